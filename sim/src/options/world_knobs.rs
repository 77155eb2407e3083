//! What each named world sets in a run's options ([`Options::apply_worlds`]), and how a hunt
//! turns one off again ([`Options::without_world`]).

use core::time::Duration;

use hicache_index::ReorderConfig;

use crate::rng::Rng;

use super::durations::ms;
use super::parts::ClientOptions;
use super::reorder::reordering;
use super::worlds::{TailKind, TailLoss, WorldKind};
use super::Options;

impl Options {
    /// Sets the knobs of every world in [`Options::worlds`], each from its own stream of `w`.
    /// [`WorldKind::Segments`] draws its knobs from `segments` instead, and
    /// [`WorldKind::QueryKeysDown`] from `query_keys_down`.
    pub(super) fn apply_worlds(&mut self, w: &mut Rng, segments: &Rng, query_keys_down: &Rng) {
        for kind in self.worlds.iter() {
            let mut r = match kind {
                WorldKind::Segments => segments.fork(1),
                WorldKind::QueryKeysDown => query_keys_down.fork(1),
                _ => w.fork(kind as u64 + 1),
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
            WorldKind::QueryKeysDown => {
                // Doubted lines in most key lists: HiCache-shaped keys of another application
                // beside the SGLang keys.
                m.mix.foreign_put = m.mix.foreign_put.max(0.002 + r.unit() * 0.004);
                h.query_keys_down = 0.3 + r.unit() * 0.6;
                // An outage begins as the master serves a fetch's status and key list; its
                // questions go out once the list has come and been applied (latency, body
                // time, a driver's stall), and failed ones are asked again at once: a short
                // outage may end before the first, a long one outlasts several fetches.
                h.query_keys_down_for = (ms(20), r.duration(ms(100), ms(1_500)));
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
            WorldKind::QueryKeysDown => h.query_keys_down = 0.0,
        }
    }
}
