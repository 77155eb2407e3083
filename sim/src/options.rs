//! What one run is made of: every knob of the master, the network, the HTTP side and the session,
//! expanded from a seed and a named fault mix ([`Preset`]).
//!
//! A run is a pure function of its [`Options`]; the options are a pure function of
//! `(seed, preset, events)`. A failing run prints both, so it can be replayed with
//! `cargo run -p hicache-index-sim --release -- --seeds N..N+1 --preset P --events E`, or in the
//! tests with `SIM_SEED=N SIM_PRESET=P SIM_EVENTS=E`.

use core::fmt;
use core::time::Duration;

use hicache_index::{
    BackoffConfig, Config, IndexConfig, ModelLayout, ReorderConfig, ResyncConfig, VerifyConfig,
};

use crate::encode::MasterFlavor;
use crate::master::{catalogue, ModelSpec};
use crate::rng::Rng;

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

/// How likely each master action is, per action (a put takes what is left).
#[derive(Clone, Debug, PartialEq)]
pub struct ActionMix {
    /// An object gains a disk replica (a second `stored`, medium disk).
    pub disk_replica: f64,
    /// One object is evicted (`removed`).
    pub evict_object: f64,
    /// Every object of one page is evicted (`removed` each).
    pub evict_page: f64,
    /// The memory replica of an object that also has a disk replica is evicted (no event
    /// upstream; a `removed` with medium cpu when [`MasterOptions::per_medium_removals`]).
    pub evict_memory: f64,
    /// Several objects are removed without any event (batch remove, remove-by-regex, revoke).
    pub silent_batch_remove: f64,
    /// Every object of one tenant is removed without any event (remove-all).
    pub silent_remove_all: f64,
    /// A worker segment goes away: its memory replicas vanish without any event.
    pub segment_loss: f64,
    /// The master restarts: every object is lost, sequences and event ids start again at 1.
    pub restart: f64,
    /// A tenant-wide `cleared` event (not sent by today's master; the decoder must cope).
    pub cleared_event: f64,
    /// A `removed` event without its object key.
    pub unreadable_removal: f64,
    /// An event of an unknown type without an object key (a future tenant-wide removal).
    pub unknown_keyless: f64,
    /// A foreign client puts odd keys that look like one page's keys once trimmed or split.
    pub foreign_put: f64,
}

impl ActionMix {
    /// Normal operation: puts, disk replicas and evictions that emit events.
    pub fn quiet() -> ActionMix {
        ActionMix {
            disk_replica: 0.1,
            evict_object: 0.08,
            evict_page: 0.03,
            evict_memory: 0.03,
            silent_batch_remove: 0.0,
            silent_remove_all: 0.0,
            segment_loss: 0.0,
            restart: 0.0,
            cleared_event: 0.0,
            unreadable_removal: 0.0,
            unknown_keyless: 0.0,
            foreign_put: 0.0,
        }
    }
}

/// The Mooncake master model's knobs.
#[derive(Clone, Debug, PartialEq)]
pub struct MasterOptions {
    /// Which event layout to write.
    pub flavor: MasterFlavor,
    /// Tenants (the first is `"default"`).
    pub tenants: usize,
    /// Indices into [`catalogue`] of the models served.
    pub models: Vec<usize>,
    /// The first model is the session's default layout (configured with no model name).
    pub default_model: bool,
    /// SGLang group semantics: events carry `group_id`.
    pub group_ids: bool,
    /// Some requests carry a namespace (`extra_key`, `cache_salt`).
    pub namespaces: bool,
    /// Some requests carry token ids above `u32::MAX` (wide pages).
    pub wide_tokens: bool,
    /// Events the bounded queue holds; overflow drops the oldest and skips one sequence.
    pub queue_capacity: usize,
    /// Time between publisher runs.
    pub publish_interval: Duration,
    /// The most events in one batch (at most 64).
    pub batch_max: usize,
    /// The most batches per publisher run; 0 drains the whole queue (a publisher that keeps up,
    /// like the real one at ~100k events/s). A limit makes bursts overflow a small queue.
    pub batches_per_tick: usize,
    /// Time between master actions, drawn uniformly.
    pub action_interval: (Duration, Duration),
    /// New pages per put request, drawn uniformly.
    pub pages_per_put: (u32, u32),
    /// Objects the master keeps before it evicts (with events) to make room.
    pub capacity_objects: usize,
    /// Worker segments memory replicas live on.
    pub segments: u8,
    /// The action mix while faults are on.
    pub mix: ActionMix,
    /// Chance that sending a batch fails (its sequence is consumed).
    pub send_fail: f64,
    /// A memory replica evicted while a disk replica remains emits `removed` (medium cpu).
    pub per_medium_removals: bool,
    /// How long a restarting master is down.
    pub restart_downtime: (Duration, Duration),
    /// Chance, after an action, that the workers go idle for a while (queries go on: whatever
    /// the last batch left wrong stays visible).
    pub idle: f64,
    /// How long an idle period lasts.
    pub idle_len: (Duration, Duration),
}

/// The network's knobs (per message, like a netem).
#[derive(Clone, Debug, PartialEq)]
pub struct NetworkOptions {
    /// One-way latency, drawn uniformly; delivery stays in order unless `reorder_jitter` is set.
    pub latency: (Duration, Duration),
    /// Extra random delay that reorders messages (zero: first in, first out).
    pub reorder_jitter: Duration,
    /// Chance a message is dropped.
    pub drop: f64,
    /// Chance a message is delivered twice.
    pub duplicate: f64,
    /// Chance a payload is truncated.
    pub truncate: f64,
    /// Chance a payload is replaced by one that does not decode, topic and sequence intact.
    pub garble: f64,
    /// Chance a message is also delivered much later (after reconnects and clears), as a copy.
    pub late_copy: f64,
    /// How long after the message its late copy comes.
    pub late_delay: (Duration, Duration),
    /// Chance a message is corrupted (payload bytes flipped, or a sequence frame of the wrong
    /// length); only corruption that the decoder rejects, or that decodes to the same batch, is
    /// delivered: TCP and ZeroMQ framing make silent corruption out of scope.
    pub corrupt: f64,
    /// Chance a master message arrives with a damaged topic frame.
    pub bad_topic: f64,
    /// Chance a master message arrives with a frame missing or one too many.
    pub bad_frame_count: f64,
    /// Connection losses per second (the driver is told).
    pub disconnects_per_sec: f64,
    /// Partitions per second (the driver is not told).
    pub partitions_per_sec: f64,
    /// How long a partition lasts.
    pub partition_len: (Duration, Duration),
    /// Chance a partition drops what is sent during it (else it holds and releases in order).
    pub partition_drops: f64,
    /// After a connect, messages are lost for this long (PUB/SUB slow joiner).
    pub slow_join: (Duration, Duration),
    /// Messages per second from a second publisher on the socket with another topic.
    pub stray_per_sec: f64,
    /// Messages per second with a wrong number of frames.
    pub junk_per_sec: f64,
    /// Chance a connect attempt fails.
    pub connect_fail: f64,
    /// Chance a connect attempt never answers (the session's timeout must fire).
    pub connect_hang: f64,
    /// How long a connect takes.
    pub connect_latency: (Duration, Duration),
    /// After a master restart, its first messages are lost for this long while ZeroMQ
    /// reconnects underneath (the driver is not told).
    pub restart_reconnect: (Duration, Duration),
    /// Let messages of a restarted master overtake the old master's in-flight ones.
    pub cross_epoch_reorder: bool,
}

/// The master's HTTP side, as the driver sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpOptions {
    /// Request and response latency, each drawn uniformly.
    pub latency: (Duration, Duration),
    /// Chance a request fails (reported to the session).
    pub fail: f64,
    /// Chance a request never answers.
    pub hang: f64,
    /// Chance an answer comes after the session's timeout.
    pub slow: f64,
    /// The master answers `GET /kv_events/status`, so a snapshot comes with a watermark.
    pub watermark: bool,
    /// Time between reading `GET /kv_events/status` and reading the key list (heavy load: the
    /// stream moves on in between).
    pub status_to_keys: (Duration, Duration),
    /// Time from reading the key list to the answer's arrival (a large body on a busy link).
    pub body_time: (Duration, Duration),
    /// Extra latency of every request under load.
    pub load: (Duration, Duration),
    /// Chance the master restarts (an HA failover, unseen by the transport) right after it
    /// served a key list: between a snapshot and the first batch after it.
    pub restart_after_keys: f64,
}

impl HttpOptions {
    /// Takes the heavy load off: the status and the key list read together, answers at once.
    pub fn calm_down(&mut self) {
        self.status_to_keys = (Duration::ZERO, us(200));
        self.body_time = (Duration::ZERO, us(500));
        self.load = (Duration::ZERO, Duration::ZERO);
    }
}

/// The driver's own timing: a CPU-starved driver stalls while messages queue up.
#[derive(Clone, Debug, PartialEq)]
pub struct DriverOptions {
    /// Stalls per second: the driver hands nothing to the session (messages queue at the
    /// subscriber, answers wait), then drains everything due; queries go on.
    pub stalls_per_sec: f64,
    /// How long a stall lasts.
    pub stall_len: (Duration, Duration),
    /// Chance a snapshot answer is applied only after a stall (half the time before the
    /// messages queued meanwhile, half after).
    pub snapshot_stall: f64,
    /// Queries per second besides those after each put (the router asks while workers idle).
    pub queries_per_sec: f64,
}

/// The session's configuration knobs.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionOptions {
    /// Resynchronise from the master's key list.
    pub resync: bool,
    /// Verify present keys periodically.
    pub verify: bool,
    /// The reorder window (`max_held` 0: none).
    pub reorder: ReorderConfig,
    /// The index's page cap.
    pub index_cap: usize,
    /// Live batches buffered during a resync.
    pub max_buffered_batches: usize,
    /// Emit page deltas.
    pub page_deltas: bool,
    /// Verification interval.
    pub verify_interval: Duration,
    /// Keys per verification round.
    pub verify_sample: usize,
    /// Driver-requested clears per second.
    pub requested_clears_per_sec: f64,
    /// How long a snapshot fetch may take.
    pub fetch_timeout: Duration,
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
}

/// The default number of events per run.
pub const DEFAULT_EVENTS: u64 = 20_000;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

impl Options {
    /// Expands a seed into options: the preset is drawn from the seed unless given.
    pub fn for_seed(seed: u64, preset: Option<Preset>, events: u64) -> Options {
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
        };
        let driver = DriverOptions {
            stalls_per_sec: 0.0,
            stall_len: (ms(50), ms(500)),
            snapshot_stall: 0.0,
            queries_per_sec: r.range(0, 400) as f64,
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
        };
        o.apply_preset(&mut r);
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
                h.restart_after_keys = r.unit() * 0.3;
                if r.chance(0.4) {
                    // Reordering across restarts: the new master's batches overtake the old one's.
                    s.reorder = ReorderConfig {
                        max_held: r.range(2, 16) as usize,
                        max_delay: Some(r.duration(ms(2), ms(30))),
                    };
                    n.reorder_jitter = r.duration(us(100), ms(5));
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
                    s.reorder = ReorderConfig {
                        max_held: r.range(2, 16) as usize,
                        max_delay: Some(r.duration(ms(2), ms(30))),
                    };
                    n.reorder_jitter = r.duration(us(100), ms(3));
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

    /// The fault classes [`Options::without`] can turn off, to tell which one a failure needs.
    pub const CLASSES: [&'static str; 10] = [
        "stalls",
        "heavy-http",
        "undecodable",
        "late-copies",
        "cross-restart-reorder",
        "odd-keys",
        "unknown-keyless",
        "idle",
        "extra-queries",
        "restarts",
    ];

    /// Turns one fault class of [`Options::CLASSES`] off; returns `false` for an unknown name.
    pub fn without(&mut self, class: &str) -> bool {
        let (m, n, h, d) = (
            &mut self.master,
            &mut self.network,
            &mut self.http,
            &mut self.driver,
        );
        match class {
            "stalls" => {
                d.stalls_per_sec = 0.0;
                d.snapshot_stall = 0.0;
            }
            "heavy-http" => h.calm_down(),
            "undecodable" => {
                n.garble = 0.0;
                n.truncate = 0.0;
            }
            "late-copies" => n.late_copy = 0.0,
            "cross-restart-reorder" => n.cross_epoch_reorder = false,
            "odd-keys" => m.mix.foreign_put = 0.0,
            "unknown-keyless" => m.mix.unknown_keyless = 0.0,
            "idle" => m.idle = 0.0,
            "extra-queries" => d.queries_per_sec = 0.0,
            "restarts" => {
                m.mix.restart = 0.0;
                h.restart_after_keys = 0.0;
            }
            _ => return false,
        }
        true
    }

    /// Returns the one-line command that replays this run.
    pub fn replay_command(&self) -> String {
        format!(
            "cargo run -p hicache-index-sim --release -- --seeds {}..{} --preset {} --events {}   \
             (or SIM_SEED={} SIM_PRESET={} SIM_EVENTS={} cargo test -p hicache-index-sim --test replay)",
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
        let all = catalogue();
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
            }),
            verify: s.verify.then_some(VerifyConfig {
                interval: s.verify_interval,
                sample: s.verify_sample,
                timeout: ms(200),
                resync_stale_percent: 10,
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
