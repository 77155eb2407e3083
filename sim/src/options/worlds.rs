//! The named worlds of issue 26: histories the rules must survive that the presets alone do not
//! reach. Each seed draws each world with [`WORLD_CHANCE`] from a stream of its own, on top of
//! its preset; each world's knobs are drawn from a stream of their own too, so that a world
//! named alone (`--worlds NAME`) has the knobs it has in the mix.

use core::fmt;
use core::time::Duration;

use hicache_index::ReorderConfig;

use super::{ms, reordering, ClientOptions, Options};
use crate::rng::Rng;

/// The chance that a seed's options include each named world.
pub const WORLD_CHANCE: f64 = 0.15;

/// One named world (see each variant).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorldKind {
    /// After a restart the master's HTTP side answers as the old run for a while (an HA proxy
    /// or a virtual IP lagging behind the stream): a fetch reads the old run's status and key
    /// list while the stream is already the new run's. Some restarts are seen by the transport
    /// (the shipped driver sees the socket close), some not.
    StaleKeyList,
    /// Frequent restarts the transport does not see, between short twin runs (every batch of
    /// the same size, no queue drop, so a new run's sequences and event ids match the old
    /// run's), with undecodable batches, reconnects and failovers right after a key list
    /// around them, mostly without a reorder window: the histories of the false hits without a
    /// window.
    UnseenRestarts,
    /// Another application floods the default tenant with keys that are not HiCache pages,
    /// several times more of them than SGLang objects (keys of other shapes, HiCache-shaped
    /// keys of 256 other deployments, keys holding a `\n`, a space or a `\r`), listed by
    /// `GET /get_all_keys` in hash order among the SGLang keys.
    ForeignFlood,
    /// The chaos phase ends with a burst whose tail is lost (the master's queue overflowing,
    /// the last messages lost, or a restart right after it), and then the master is idle:
    /// nothing on the stream reveals what was lost.
    TailLossIdle,
    /// The publisher's clock jumps forward, and is often stepped back after a while: batch
    /// timestamps leap ahead, then fall back; half the time with a reorder window.
    ClockJump,
    /// Issue 27: store clients mount segments, a put lands on one of them at random, and
    /// clients close (their segment's objects vanish at once), crash (hidden at the active
    /// TTL, unmounted after the suspicion TTL) and stall (hidden, then back on resume), with no
    /// event for any of it; only the master's `/metrics` moves. Half the time the HTTP side
    /// never fails or hangs, so the watch's bound is checked all along.
    Segments,
}

impl WorldKind {
    /// Every named world, in the order they are drawn.
    pub const ALL: [WorldKind; 6] = [
        WorldKind::StaleKeyList,
        WorldKind::UnseenRestarts,
        WorldKind::ForeignFlood,
        WorldKind::TailLossIdle,
        WorldKind::ClockJump,
        WorldKind::Segments,
    ];

    /// The worlds of issue 26, drawn one after the other from one stream (a later world is
    /// drawn from a stream of its own, so that their draws stay what they were).
    pub const DRAWN_TOGETHER: [WorldKind; 5] = [
        WorldKind::StaleKeyList,
        WorldKind::UnseenRestarts,
        WorldKind::ForeignFlood,
        WorldKind::TailLossIdle,
        WorldKind::ClockJump,
    ];

    /// Returns the name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            WorldKind::StaleKeyList => "stale-key-list",
            WorldKind::UnseenRestarts => "unseen-restarts",
            WorldKind::ForeignFlood => "foreign-flood",
            WorldKind::TailLossIdle => "tail-loss-idle",
            WorldKind::ClockJump => "clock-jump",
            WorldKind::Segments => "segments",
        }
    }

    /// Parses a name.
    pub fn from_name(name: &str) -> Option<WorldKind> {
        WorldKind::ALL.into_iter().find(|k| k.name() == name)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for WorldKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of named worlds.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Worlds(u8);

impl Worlds {
    /// No named world: the preset alone.
    pub const NONE: Worlds = Worlds(0);

    /// Adds a world.
    pub fn insert(&mut self, kind: WorldKind) {
        self.0 |= kind.bit();
    }

    /// Removes a world.
    pub fn remove(&mut self, kind: WorldKind) {
        self.0 &= !kind.bit();
    }

    /// Reports whether the set holds `kind`.
    pub fn contains(self, kind: WorldKind) -> bool {
        self.0 & kind.bit() != 0
    }

    /// Reports whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Returns the worlds in the set, in [`WorldKind::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = WorldKind> {
        WorldKind::ALL
            .into_iter()
            .filter(move |k| self.contains(*k))
    }

    /// Returns the only world of the set, if it holds exactly one.
    pub fn only(self) -> Option<WorldKind> {
        let mut it = self.iter();
        match (it.next(), it.next()) {
            (Some(k), None) => Some(k),
            _ => None,
        }
    }

    /// Returns the names, comma-separated (`none` for the empty set).
    pub fn names(self) -> String {
        if self.is_empty() {
            return "none".into();
        }
        self.iter()
            .map(WorldKind::name)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Parses comma-separated names (`none` for the empty set).
    pub fn from_names(names: &str) -> Option<Worlds> {
        let mut set = Worlds::NONE;
        for name in names.split(',').filter(|n| !n.is_empty() && *n != "none") {
            set.insert(WorldKind::from_name(name)?);
        }
        Some(set)
    }
}

impl fmt::Display for Worlds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.names())
    }
}

/// How the chaos phase of a [`WorldKind::TailLossIdle`] run ends.
#[derive(Clone, Debug, PartialEq)]
pub struct TailLoss {
    /// Put requests served at one instant: the burst.
    pub puts: u32,
    /// The master's queue capacity during the burst (the `--kv_events_queue_capacity` of the
    /// real test is 16).
    pub queue_capacity: usize,
    /// What is lost at its tail.
    pub kind: TailKind,
}

/// What a burst loses at its tail.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TailKind {
    /// The queue overflows (drops its oldest events, skipping sequences); the last batches
    /// show the gap, while the master is already idle.
    Overflow,
    /// The last this many messages of the burst are lost after publishing (a send failing, or
    /// libzmq's high-water mark): no later message reveals them.
    LostMessages(u32),
    /// The master restarts right after the burst and its new run stays idle: no message
    /// reveals the restart.
    Restart,
}

impl Options {
    /// Sets the knobs of every world in [`Options::worlds`], each from its own stream of `w`.
    /// [`WorldKind::Segments`] draws its knobs from `segments` instead.
    pub(super) fn apply_worlds(&mut self, w: &mut Rng, segments: &Rng) {
        for kind in self.worlds.iter() {
            let mut r = if kind == WorldKind::Segments {
                segments.fork(1)
            } else {
                w.fork(kind as u64 + 1)
            };
            self.apply_world(kind, &mut r);
        }
    }

    fn apply_world(&mut self, kind: WorldKind, r: &mut Rng) {
        let (m, n, h, s) = (
            &mut self.master,
            &mut self.network,
            &mut self.http,
            &mut self.session,
        );
        match kind {
            WorldKind::StaleKeyList => {
                m.mix.restart = m.mix.restart.max(r.range(3, 10) as f64 / 1000.0);
                h.lag_after_restart = (ms(10), r.duration(ms(100), ms(1_500)));
                h.restart_after_status = r.unit() * 0.5;
                h.status_to_keys = (Duration::ZERO, h.status_to_keys.1.max(ms(20)));
                n.seen_restarts = *r.pick(&[0.0, 0.5, 1.0]).expect("non-empty");
                s.resync = true;
            }
            WorldKind::UnseenRestarts => {
                // Short runs, so that a new run soon reaches the old run's last position; no
                // queue drop and no failed send, which would put the twins out of step.
                m.mix.restart = m.mix.restart.max(r.range(20, 50) as f64 / 1000.0);
                m.twin_batch = *r.pick(&[2usize, 4, 8, 16]).expect("non-empty");
                m.queue_capacity = 65_536;
                m.send_fail = 0.0;
                n.seen_restarts = 0.0;
                n.restart_reconnect = (Duration::ZERO, r.duration(Duration::ZERO, ms(10)));
                n.garble = n.garble.max(r.unit() * 0.03);
                n.disconnects_per_sec = n.disconnects_per_sec.max(r.unit());
                h.restart_after_keys = h.restart_after_keys.max(r.unit() * 0.5);
                if r.chance(0.7) {
                    // One ZeroMQ connection: nothing reorders (no late copies either), and the
                    // session has no window.
                    s.reorder = ReorderConfig::default();
                    n.reorder_jitter = Duration::ZERO;
                    n.cross_epoch_reorder = false;
                    n.late_copy = 0.0;
                }
                s.resync = true;
            }
            WorldKind::ForeignFlood => {
                m.mix.foreign_flood = r.range(2, 6) as f64 / 100.0;
                m.foreign_per_object = r.range(3, 8) as u32;
                m.capacity_objects = m.capacity_objects.min(r.range(200, 1_200) as usize);
                m.hashed_key_list = true;
                m.mix.foreign_put = m.mix.foreign_put.max(0.002);
                s.resync = true;
            }
            WorldKind::TailLossIdle => {
                let kind = match r.below(3) {
                    0 => TailKind::Overflow,
                    1 => TailKind::LostMessages(r.range(1, 3) as u32),
                    _ => TailKind::Restart,
                };
                let queue_capacity = match kind {
                    TailKind::Overflow => *r.pick(&[16usize, 32, 64]).expect("non-empty"),
                    _ => *r.pick(&[16usize, 64, 65_536]).expect("non-empty"),
                };
                self.tail = Some(TailLoss {
                    puts: r.range(10, 80) as u32,
                    queue_capacity,
                    kind,
                });
            }
            WorldKind::ClockJump => {
                m.clock_jumps_per_sec = 0.2 + r.unit() * 2.0;
                let far = *r.pick(&[60u64, 3_600, 86_400]).expect("non-empty");
                m.clock_jump = (Duration::from_secs(1), Duration::from_secs(far));
                m.clock_back = 0.7;
                m.clock_back_after = (ms(5), ms(500));
                if s.reorder.max_held == 0 && r.chance(0.5) {
                    reordering(s, n, r, ms(3));
                }
            }
            WorldKind::Segments => {
                // The master's TTLs (10 s and 20 s by default, 2 s and 3 s in the real-master
                // test) at the worlds' time scale, where the watch reads every 250 ms or 1 s.
                let active_ttl = r.duration(ms(150), ms(1_500));
                let suspicion_ttl = active_ttl.mul_f64(1.0 + r.unit());
                m.clients = Some(ClientOptions {
                    clients: r.range(2, 5) as u8,
                    faults_per_sec: 0.5 + r.unit() * 2.0,
                    active_ttl,
                    suspicion_ttl,
                    stall_len: (active_ttl / 2, (active_ttl + suspicion_ttl).mul_f64(1.2)),
                    mount_after: (ms(5), ms(300)),
                });
                // Segments replace the memory-replica loss of the other worlds.
                m.mix.segment_loss = 0.0;
                if r.chance(0.5) {
                    // An HTTP side that never fails or hangs: the bound holds all along.
                    h.fail = 0.0;
                    h.hang = 0.0;
                }
                s.resync = true;
            }
        }
    }

    /// Turns one named world off (its knobs back to off).
    pub(super) fn without_world(&mut self, kind: WorldKind) {
        self.worlds.remove(kind);
        let (m, n, h) = (&mut self.master, &mut self.network, &mut self.http);
        match kind {
            WorldKind::StaleKeyList => {
                h.lag_after_restart = (Duration::ZERO, Duration::ZERO);
                h.restart_after_status = 0.0;
                n.seen_restarts = 0.0;
            }
            WorldKind::UnseenRestarts => m.twin_batch = 0,
            WorldKind::ForeignFlood => {
                m.mix.foreign_flood = 0.0;
                m.foreign_per_object = 0;
                m.hashed_key_list = false;
            }
            WorldKind::TailLossIdle => self.tail = None,
            WorldKind::ClockJump => m.clock_jumps_per_sec = 0.0,
            WorldKind::Segments => m.clients = None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn world_names_round_trip() {
        for kind in WorldKind::ALL {
            assert_eq!(WorldKind::from_name(kind.name()), Some(kind));
        }
        let mut all = Worlds::NONE;
        for kind in WorldKind::ALL {
            all.insert(kind);
        }
        assert_eq!(Worlds::from_names(&all.names()), Some(all));
        assert_eq!(Worlds::from_names("none"), Some(Worlds::NONE));
        assert_eq!(Worlds::from_names("no-such-world"), None);
    }

    #[test]
    fn every_world_is_drawn_by_some_seed_and_a_named_world_keeps_its_knobs() {
        let mut seen = Worlds::NONE;
        for seed in 0..100 {
            let o = Options::for_seed(seed, None, 100);
            for kind in o.worlds.iter() {
                seen.insert(kind);
                let mut alone = Worlds::NONE;
                alone.insert(kind);
                let forced = Options::for_seed_with(seed, Some(o.preset), 100, Some(alone));
                if o.worlds.only().is_some() {
                    assert_eq!(forced, o, "a world alone is drawn as in the mix");
                }
            }
        }
        for kind in WorldKind::ALL {
            assert!(seen.contains(kind), "{kind} is never drawn");
        }
    }
}
