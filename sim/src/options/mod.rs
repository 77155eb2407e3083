//! What one run is made of: every knob of the master, the network, the HTTP side and the session,
//! expanded from a seed and a named fault mix ([`Preset`]).
//!
//! A run is a pure function of its [`Options`]; the options are a pure function of
//! `(seed, preset, events)`. A failing run prints both, so it can be replayed with
//! `cargo run -p hicache-index-sim --release -- --seeds N..N+1 --preset P --events E`, or in the
//! tests with `SIM_SEED=N SIM_PRESET=P SIM_EVENTS=E`.
//!
//! On top of the preset, each seed draws from a stream of its own which of the named
//! [`WorldKind`]s it also runs (issue 26: the classes of failure the rules must survive), so
//! that the preset's own draws stay what they were; `--world NAME` runs one alone. The knobs of
//! each part live in `options/parts.rs`, the worlds in `options/worlds.rs` (both re-exported
//! here) and what each world sets in `options/world_knobs.rs`; the fault classes a hunt turns
//! off are in `options/classes.rs`, the options narrowed for a hunt in `options/shapes.rs`,
//! the reorder knobs in `options/reorder.rs` and the duration helpers in
//! `options/durations.rs`.

use core::fmt;
use core::time::Duration;

use hicache_index::{
    BackoffConfig, Config, IndexConfig, ModelLayout, ReorderConfig, ResyncConfig, VerifyConfig,
};
use hicache_index_wire::MasterFlavor;

use crate::models::{all_models, catalogue, hybrid_catalogue, ModelSpec};
use crate::rng::Rng;

mod classes;
mod durations;
mod parts;
mod reorder;
mod shapes;
mod world_knobs;
mod worlds;

use durations::{ms, us};
use reorder::reordering;

pub use parts::{
    ActionMix, ClientOptions, DriverOptions, HttpOptions, MasterOptions, NetworkOptions,
    SessionOptions, TWIN_FLUSH,
};
pub use worlds::{TailKind, TailLoss, WorldKind, Worlds, WORLD_CHANCE};

/// A named fault mix.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Preset {
    /// No fault at all, no silent removal, resync and verification off: the index must answer
    /// exactly like the event-history oracle.
    Pristine,
    /// Normal master behaviour (evictions, disk replicas, a few silent removals) over a clean
    /// network.
    Calm,
    /// Loss everywhere: a small master queue that overflows, failed sends, dropped messages,
    /// partitions, disconnects and slow joiners, undecodable payloads, odd keys; often a loaded
    /// HTTP side and a CPU-starved driver.
    Lossy,
    /// Master restarts (losing every object, sequences from 1; the transport never hears of them),
    /// failovers right after a key list was served, failing connects and HTTP, unknown keyless
    /// events, odd keys; often reordering across restarts with late copies.
    RestartHeavy,
    /// A transport that reorders and duplicates, with a reorder window in the session; late
    /// copies of old batches, requested clears, restarts whose batches overtake the old
    /// master's.
    ReorderHeavy,
    /// Everything: a stray publisher, junk and corrupted frames, duplicates, disconnects,
    /// partitions, `cleared` events, unreadable removals, per-medium removals, HTTP faults,
    /// unknown keyless events, odd keys, undecodable payloads, stalls, a loaded HTTP side.
    Hostile,
}

impl Preset {
    /// The presets a sweep draws from when none is given.
    pub const SWEEP: [Preset; 5] = [
        Preset::Calm,
        Preset::Lossy,
        Preset::RestartHeavy,
        Preset::ReorderHeavy,
        Preset::Hostile,
    ];

    /// Every preset.
    pub const ALL: [Preset; 6] = [
        Preset::Pristine,
        Preset::Calm,
        Preset::Lossy,
        Preset::RestartHeavy,
        Preset::ReorderHeavy,
        Preset::Hostile,
    ];

    /// Returns the name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Pristine => "pristine",
            Preset::Calm => "calm",
            Preset::Lossy => "lossy",
            Preset::RestartHeavy => "restart-heavy",
            Preset::ReorderHeavy => "reorder-heavy",
            Preset::Hostile => "hostile",
        }
    }

    /// Parses a command-line name.
    pub fn from_name(name: &str) -> Option<Preset> {
        Preset::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything one run is made of.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// The seed everything is drawn from.
    pub seed: u64,
    /// The fault mix.
    pub preset: Preset,
    /// Events the master emits while faults are on.
    pub events: u64,
    /// Normal traffic after faults stop, before the final checks.
    pub quiet: Duration,
    /// Queries after each master action.
    pub queries_per_action: u32,
    /// Compare every answer with the oracle's exact answer (only without faults).
    pub exact: bool,
    /// The master.
    pub master: MasterOptions,
    /// The network.
    pub network: NetworkOptions,
    /// The HTTP side.
    pub http: HttpOptions,
    /// The session.
    pub session: SessionOptions,
    /// The driver's timing.
    pub driver: DriverOptions,
    /// The named worlds this run adds to its preset (see [`WorldKind`]).
    pub worlds: Worlds,
    /// The chaos phase ends with a burst whose tail is lost, then the master is idle
    /// ([`WorldKind::TailLossIdle`]); `None`: normal traffic goes on for [`Options::quiet`].
    pub tail: Option<TailLoss>,
}

/// The default number of events per run.
pub const DEFAULT_EVENTS: u64 = 20_000;

impl Options {
    /// Expands a seed into options: the preset and the named worlds are drawn from the seed
    /// unless given.
    pub fn for_seed(seed: u64, preset: Option<Preset>, events: u64) -> Options {
        Options::for_seed_with(seed, preset, events, None)
    }

    /// Expands a seed into options with the named worlds `worlds` instead of the drawn ones
    /// (`None`: drawn); their knobs are still drawn from the seed's world stream.
    pub fn for_seed_with(
        seed: u64,
        preset: Option<Preset>,
        events: u64,
        worlds: Option<Worlds>,
    ) -> Options {
        let root = Rng::new(seed);
        let mut r = root.fork(0x0b7);
        // Always draw, so that naming the drawn preset replays the very same options.
        let drawn = *r
            .pick(&Preset::SWEEP)
            .expect("the sweep has presets to pick from");
        let preset = preset.unwrap_or(drawn);
        let n_models = catalogue().len();
        let want = r.range(1, 4) as usize;
        let mut models: Vec<usize> = Vec::new();
        while models.len() < want {
            let m = r.index(n_models);
            if !models.contains(&m) {
                models.push(m);
            }
        }
        // SGLang's hybrid pools (issue 17) from a stream of their own, so that the draws above
        // (and every seed's other options) stay what they were.
        let mut hybrid_rng = root.fork(0x17);
        let n_hybrid = hybrid_catalogue().len();
        let extra = hybrid_rng.range(0, 2) as usize;
        while models.len() < want + extra {
            let m = n_models + hybrid_rng.index(n_hybrid);
            if !models.contains(&m) {
                models.push(m);
            }
        }
        let master = MasterOptions {
            flavor: if r.chance(0.5) {
                MasterFlavor::Upstream
            } else {
                MasterFlavor::Release0314
            },
            tenants: r.range(1, 3) as usize,
            models,
            default_model: r.chance(0.3),
            group_ids: r.chance(0.5),
            namespaces: r.chance(0.3),
            wide_tokens: r.chance(0.2),
            queue_capacity: 65_536,
            publish_interval: r.duration(us(200), ms(2)),
            batch_max: if r.chance(0.7) {
                64
            } else {
                r.range(1, 64) as usize
            },
            batches_per_tick: 0,
            action_interval: (us(100), r.duration(us(500), ms(3))),
            pages_per_put: (1, r.range(2, 8) as u32),
            capacity_objects: r.range(500, 6_000) as usize,
            segments: r.range(1, 4) as u8,
            clients: None,
            mix: ActionMix {
                silent_batch_remove: 0.01,
                silent_remove_all: 0.001,
                segment_loss: 0.002,
                ..ActionMix::quiet()
            },
            send_fail: 0.0,
            per_medium_removals: false,
            restart_downtime: (ms(5), ms(200)),
            idle: 0.0,
            idle_len: (ms(20), ms(300)),
            twin_batch: 0,
            foreign_per_object: 0,
            hashed_key_list: false,
            clock_jumps_per_sec: 0.0,
            clock_jump: (Duration::ZERO, Duration::ZERO),
            clock_back: 0.0,
            clock_back_after: (Duration::ZERO, Duration::ZERO),
        };
        let network = NetworkOptions {
            latency: (us(20), r.duration(us(50), ms(2))),
            reorder_jitter: Duration::ZERO,
            drop: 0.0,
            duplicate: 0.0,
            truncate: 0.0,
            garble: 0.0,
            late_copy: 0.0,
            late_delay: (ms(20), ms(400)),
            corrupt: 0.0,
            bad_topic: 0.0,
            bad_frame_count: 0.0,
            disconnects_per_sec: 0.0,
            partitions_per_sec: 0.0,
            partition_len: (ms(1), ms(50)),
            partition_drops: 0.5,
            slow_join: (Duration::ZERO, Duration::ZERO),
            stray_per_sec: 0.0,
            junk_per_sec: 0.0,
            connect_fail: 0.0,
            connect_hang: 0.0,
            connect_latency: (us(100), ms(5)),
            restart_reconnect: (Duration::ZERO, Duration::ZERO),
            cross_epoch_reorder: false,
            seen_restarts: 0.0,
        };
        let http = HttpOptions {
            latency: (us(200), r.duration(ms(1), ms(20))),
            fail: 0.0,
            hang: 0.0,
            slow: 0.0,
            watermark: r.chance(0.8),
            status_to_keys: (Duration::ZERO, us(200)),
            body_time: (Duration::ZERO, us(500)),
            load: (Duration::ZERO, Duration::ZERO),
            restart_after_keys: 0.0,
            clear_after_keys: 0.0,
            restart_after_status: 0.0,
            lag_after_restart: (Duration::ZERO, Duration::ZERO),
            query_keys_down: 0.0,
            query_keys_down_for: (Duration::ZERO, Duration::ZERO),
        };
        let driver = DriverOptions {
            stalls_per_sec: 0.0,
            stall_len: (ms(50), ms(500)),
            snapshot_stall: 0.0,
            queries_per_sec: r.range(0, 400) as f64,
            timer_lag: Duration::ZERO,
        };
        let session = SessionOptions {
            resync: r.chance(0.7),
            verify: r.chance(0.6),
            reorder: ReorderConfig::default(),
            index_cap: if r.chance(0.2) {
                r.range(32, 512) as usize
            } else {
                1 << 16
            },
            max_buffered_batches: *r.pick(&[8usize, 64, 65_536]).expect("non-empty"),
            page_deltas: r.chance(0.2),
            verify_interval: r.duration(ms(20), ms(200)),
            verify_sample: r.range(64, 512) as usize,
            requested_clears_per_sec: 0.0,
            fetch_timeout: ms(200),
            status_check: Some(ms(1_000)),
            store_watch: true,
        };
        let mut o = Options {
            seed,
            preset,
            events,
            quiet: ms(500),
            queries_per_action: 2,
            exact: false,
            master,
            network,
            http,
            session,
            driver,
            worlds: Worlds::NONE,
            tail: None,
        };
        o.apply_preset(&mut r);
        // Both publisher generations wherever the master evicts with events (drawn last, so the
        // draws above stay as they were). Hostile draws its own; Pristine has none.
        if !matches!(o.preset, Preset::Pristine | Preset::Hostile) {
            o.master.per_medium_removals = r.chance(0.5);
        }
        // The named worlds, from a stream of their own (issue 26): the draws above stay as
        // they were, and a seed that draws none runs exactly as before. Pristine has none.
        if o.preset != Preset::Pristine {
            let mut w = root.fork(0x26);
            for kind in WorldKind::DRAWN_TOGETHER {
                if w.chance(WORLD_CHANCE) {
                    o.worlds.insert(kind);
                }
            }
            // Issue 27's world from a stream of its own: the draws above stay as they were.
            if root.fork(0x27).chance(WORLD_CHANCE) {
                o.worlds.insert(WorldKind::Segments);
            }
            // A later world of issue 26, from a stream of its own likewise.
            if root.fork(0x28).chance(WORLD_CHANCE) {
                o.worlds.insert(WorldKind::QueryKeysDown);
            }
            if let Some(forced) = worlds {
                o.worlds = forced;
            }
            o.apply_worlds(&mut w, &root.fork(0x27), &root.fork(0x28));
        }
        // A busy driver's late timers, from a stream of their own: the draws above stay as they
        // were. Pristine has none.
        let mut lag = root.fork(0x42);
        if o.preset != Preset::Pristine && lag.chance(0.3) {
            o.driver.timer_lag = lag.duration(us(100), ms(3));
        }
        // Where the master's publisher clears, it sometimes clears as a key list is applied (the
        // same stream: the draws above stay as they were).
        if o.master.mix.cleared_event > 0.0 && lag.chance(0.5) {
            o.http.clear_after_keys = lag.unit() * 0.5;
        }
        // A reorder window needs resync (rule R7 of the core's sequence module): only the
        // master's status places a reordering stream after a loss.
        o.session.resync |= o.session.reorder.is_on();
        // The quiet stream's check (rule R11), from a stream of its own: mostly the default,
        // sometimes faster, sometimes off (then rule R10 bounds what only it would find).
        let mut c = root.fork(0x11);
        o.session.status_check = match c.below(10) {
            0 => None,
            1..=3 => Some(ms(250)),
            _ => Some(ms(1_000)),
        };
        o
    }

    fn apply_preset(&mut self, r: &mut Rng) {
        let (m, n, h, s, d) = (
            &mut self.master,
            &mut self.network,
            &mut self.http,
            &mut self.session,
            &mut self.driver,
        );
        // Heavy load on the HTTP side: the status read, the key-list read and the answer far
        // apart, relative to the stream.
        let heavy_http = |h: &mut HttpOptions, s: &mut SessionOptions, r: &mut Rng| {
            h.status_to_keys = (Duration::ZERO, r.duration(ms(20), ms(300)));
            h.body_time = (ms(1), r.duration(ms(10), ms(250)));
            h.load = (Duration::ZERO, r.duration(ms(1), ms(100)));
            // A driver that knows its master is slow waits longer for a key list.
            s.fetch_timeout = ms(1_000);
        };
        // A CPU-starved driver.
        let starved = |d: &mut DriverOptions, r: &mut Rng| {
            d.stalls_per_sec = r.unit() * 2.0;
            d.snapshot_stall = r.unit() * 0.6;
        };
        match self.preset {
            Preset::Pristine => {
                m.mix = ActionMix::quiet();
                s.resync = false;
                s.verify = false;
                s.index_cap = 1 << 16;
                self.exact = true;
            }
            Preset::Calm => {
                d.queries_per_sec = d.queries_per_sec.max(50.0);
            }
            Preset::Lossy => {
                m.queue_capacity = *r.pick(&[16usize, 32, 64, 256, 65_536]).expect("non-empty");
                m.batches_per_tick = r.range(1, 4) as usize;
                m.send_fail = r.unit() * 0.02;
                m.mix.silent_batch_remove = 0.02;
                m.mix.segment_loss = 0.005;
                n.drop = r.unit() * 0.03;
                n.partitions_per_sec = r.unit() * 2.0;
                n.disconnects_per_sec = r.unit() * 1.0;
                n.slow_join = (Duration::ZERO, r.duration(Duration::ZERO, ms(20)));
                n.garble = r.unit() * 0.02;
                h.fail = r.unit() * 0.1;
                m.idle = r.unit() * 0.01;
                m.mix.foreign_put = r.unit() * 0.004;
                if r.chance(0.4) {
                    heavy_http(h, s, r);
                }
                if r.chance(0.3) {
                    starved(d, r);
                }
            }
            Preset::RestartHeavy => {
                m.mix.restart = r.range(3, 15) as f64 / 1000.0;
                m.queue_capacity = *r.pick(&[64usize, 65_536]).expect("non-empty");
                n.restart_reconnect = (Duration::ZERO, r.duration(Duration::ZERO, ms(10)));
                n.connect_fail = r.unit() * 0.3;
                n.disconnects_per_sec = r.unit() * 0.5;
                h.fail = r.unit() * 0.2;
                h.hang = r.unit() * 0.05;
                m.idle = r.unit() * 0.01;
                m.mix.unknown_keyless = r.unit() * 0.002;
                m.mix.foreign_put = r.unit() * 0.003;
                h.restart_after_keys = r.unit() * 0.6;
                if r.chance(0.4) {
                    // Reordering across restarts: the new master's batches overtake the old one's.
                    reordering(s, n, r, ms(5));
                    n.cross_epoch_reorder = true;
                    n.late_copy = r.unit() * 0.01;
                }
                if r.chance(0.3) {
                    heavy_http(h, s, r);
                }
                if r.chance(0.3) {
                    starved(d, r);
                }
            }
            Preset::ReorderHeavy => {
                let max_held = r.range(2, 32) as usize;
                s.reorder = ReorderConfig {
                    max_held,
                    max_delay: Some(r.duration(ms(2), ms(50))),
                };
                n.reorder_jitter = r.duration(us(100), ms(5));
                n.duplicate = r.unit() * 0.1;
                n.drop = r.unit() * 0.01;
                n.disconnects_per_sec = r.unit() * 0.3;
                // Around clears and reconnects: late copies of old batches, clears asked for,
                // restarts whose batches overtake the old master's.
                n.late_copy = r.unit() * 0.02;
                s.requested_clears_per_sec = r.unit() * 1.0;
                m.mix.restart = r.unit() * 0.003;
                n.restart_reconnect = (Duration::ZERO, r.duration(Duration::ZERO, ms(5)));
                n.cross_epoch_reorder = r.chance(0.6);
                n.garble = r.unit() * 0.01;
                m.idle = r.unit() * 0.01;
                if r.chance(0.3) {
                    starved(d, r);
                }
            }
            Preset::Hostile => {
                if r.chance(0.3) {
                    reordering(s, n, r, ms(3));
                    n.late_copy = r.unit() * 0.01;
                    n.cross_epoch_reorder = r.chance(0.5);
                }
                m.queue_capacity = *r.pick(&[32usize, 256, 65_536]).expect("non-empty");
                m.batches_per_tick = r.range(0, 4) as usize;
                m.send_fail = r.unit() * 0.01;
                m.mix.restart = r.unit() * 0.004;
                m.mix.silent_batch_remove = 0.02;
                m.mix.silent_remove_all = 0.003;
                m.mix.segment_loss = 0.005;
                m.mix.cleared_event = r.unit() * 0.004;
                m.mix.unreadable_removal = r.unit() * 0.004;
                m.per_medium_removals = r.chance(0.5);
                n.drop = r.unit() * 0.02;
                n.duplicate = r.unit() * 0.05;
                n.truncate = r.unit() * 0.02;
                n.corrupt = r.unit() * 0.02;
                n.bad_topic = r.unit() * 0.01;
                n.bad_frame_count = r.unit() * 0.01;
                n.disconnects_per_sec = r.unit() * 1.0;
                n.partitions_per_sec = r.unit() * 1.0;
                n.slow_join = (Duration::ZERO, r.duration(Duration::ZERO, ms(10)));
                n.stray_per_sec = r.unit() * 200.0;
                n.junk_per_sec = r.unit() * 50.0;
                n.connect_fail = r.unit() * 0.2;
                n.connect_hang = r.unit() * 0.1;
                n.restart_reconnect = (Duration::ZERO, r.duration(Duration::ZERO, ms(5)));
                h.fail = r.unit() * 0.1;
                h.hang = r.unit() * 0.05;
                h.slow = r.unit() * 0.05;
                s.requested_clears_per_sec = r.unit() * 0.5;
                n.garble = r.unit() * 0.01;
                m.mix.unknown_keyless = r.unit() * 0.003;
                m.mix.foreign_put = r.unit() * 0.004;
                m.idle = r.unit() * 0.01;
                if r.chance(0.4) {
                    heavy_http(h, s, r);
                }
                if r.chance(0.4) {
                    starved(d, r);
                }
            }
        }
    }

    /// Returns the one-line command that replays this run.
    pub fn replay_command(&self) -> String {
        let drawn = Options::for_seed(self.seed, Some(self.preset), self.events).worlds;
        let (flag, env) = if drawn == self.worlds {
            (String::new(), String::new())
        } else {
            let names = self.worlds.names();
            (format!(" --worlds {names}"), format!(" SIM_WORLDS={names}"))
        };
        format!(
            "cargo run -p hicache-index-sim --release -- --seeds {}..{} --preset {} --events {}{flag}   \
             (or SIM_SEED={} SIM_PRESET={} SIM_EVENTS={}{env} cargo test -p hicache-index-sim --test replay)",
            self.seed,
            self.seed + 1,
            self.preset,
            self.events,
            self.seed,
            self.preset,
            self.events
        )
    }

    /// Returns the models served, from the catalogue.
    pub fn model_specs(&self) -> Vec<ModelSpec> {
        let all = all_models();
        self.master.models.iter().map(|&i| all[i].clone()).collect()
    }

    /// Returns the session configuration these options describe.
    pub fn session_config(&self) -> Config {
        let layouts = self
            .model_specs()
            .into_iter()
            .enumerate()
            .map(|(i, spec)| ModelLayout {
                model: (!(i == 0 && self.master.default_model)).then_some(spec.name),
                layout: spec.layout,
            })
            .collect();
        let s = &self.session;
        Config {
            endpoint: Some(ENDPOINT.into()),
            topic: Vec::new(),
            layouts,
            index: IndexConfig {
                max_pages: s.index_cap,
                max_namespaces: 1024,
                seed: self.seed.rotate_left(17),
            },
            reorder: s.reorder,
            backoff: BackoffConfig {
                initial: ms(10),
                max: ms(500),
                reset_after: ms(1_000),
                connect_timeout: ms(100),
            },
            resync: s.resync.then_some(ResyncConfig {
                max_buffered_batches: s.max_buffered_batches,
                max_buffered_bytes: 64 << 20,
                fetch_timeout: s.fetch_timeout,
                retry_after: ms(50),
                status_check: s.status_check,
                // The watch of the master's signals, on whenever the quiet stream's check is
                // (the worlds choose that at random).
                store_watch: s.status_check.filter(|_| s.store_watch),
            }),
            verify: s.verify.then_some(VerifyConfig {
                interval: s.verify_interval,
                sample: s.verify_sample,
                timeout: ms(200),
                // The default's ratio (30 s over rounds every 5 s), at the worlds' time scale.
                escalate_every: s.verify_interval.saturating_mul(6),
            }),
            page_deltas: s.page_deltas,
            seed: self.seed ^ 0x5e55_1011,
            leader: None,
        }
    }
}

/// The endpoint the simulated master publishes on.
pub const ENDPOINT: &str = "tcp://mooncake-master:5557";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_a_function_of_the_seed() {
        for seed in 0..50 {
            assert_eq!(
                Options::for_seed(seed, None, 100),
                Options::for_seed(seed, None, 100)
            );
        }
    }

    #[test]
    fn every_preset_is_drawn_by_some_seed() {
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..200 {
            seen.insert(Options::for_seed(seed, None, 100).preset);
        }
        assert_eq!(seen.len(), Preset::SWEEP.len());
    }

    #[test]
    fn naming_the_drawn_preset_gives_the_same_options() {
        for seed in 0..50 {
            let drawn = Options::for_seed(seed, None, 100);
            assert_eq!(Options::for_seed(seed, Some(drawn.preset), 100), drawn);
        }
    }

    #[test]
    fn preset_names_round_trip() {
        for p in Preset::ALL {
            assert_eq!(Preset::from_name(p.name()), Some(p));
        }
    }
}
