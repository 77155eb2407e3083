//! The named worlds of issue 26: histories the rules must survive that the presets alone do not
//! reach. Each seed draws each world with [`WORLD_CHANCE`] from a stream of its own, on top of
//! its preset; each world's knobs are drawn from a stream of their own too, so that a world
//! named alone (`--worlds NAME`) has the knobs it has in the mix.

use core::fmt;

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
    /// Issue 26: a store shared with another application's keys (key-list lines next to them
    /// are doubted, and confirmed with `POST /batch_query_keys`) whose `/batch_query_keys`
    /// goes down for a while as the master begins to serve a fetch: when the outage outlasts
    /// the fetch's three questions, the fetch fails with its doubted lines unanswered, and a
    /// later one must restore them.
    QueryKeysDown,
}

impl WorldKind {
    /// Every named world, in the order they are drawn.
    pub const ALL: [WorldKind; 7] = [
        WorldKind::StaleKeyList,
        WorldKind::UnseenRestarts,
        WorldKind::ForeignFlood,
        WorldKind::TailLossIdle,
        WorldKind::ClockJump,
        WorldKind::Segments,
        WorldKind::QueryKeysDown,
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
            WorldKind::QueryKeysDown => "query-keys-down",
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Options;

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
