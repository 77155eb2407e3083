//! The knobs of each part of a run: the master (and its action mix), the network, the HTTP
//! side, the driver and the session.

use core::time::Duration;

use hicache_index::ReorderConfig;
use hicache_index_wire::MasterFlavor;

use super::durations::us;

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
    /// Another application's client puts a batch of its own keys into the default tenant (and
    /// removes some when it holds [`MasterOptions::foreign_per_object`] times the SGLang
    /// objects): keys of other shapes, HiCache-shaped keys of other deployments, keys with a
    /// `\n`, a space or a `\r` (spec section 6).
    pub foreign_flood: f64,
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
            foreign_flood: 0.0,
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
    /// Indices into [`all_models`](crate::models::all_models) of the models served: the
    /// [`catalogue`](crate::models::catalogue)'s first, then the
    /// [`hybrid_catalogue`](crate::models::hybrid_catalogue)'s.
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
    /// Store clients with segments that close, crash, stall and resume
    /// ([`crate::options::WorldKind::Segments`]); `None`: the segments above only lose their
    /// memory replicas ([`ActionMix::segment_loss`]).
    pub clients: Option<ClientOptions>,
    /// The action mix while faults are on.
    pub mix: ActionMix,
    /// Chance that sending a batch fails (its sequence is consumed).
    pub send_fail: f64,
    /// The current publisher generation (PR 2876 on): a memory replica evicted while a disk
    /// replica remains emits `removed` (medium cpu), and an object evicted from both media one
    /// `removed` per medium. Off: an older master, one `removed` (medium cpu) when no replica is
    /// left.
    pub per_medium_removals: bool,
    /// How long a restarting master is down.
    pub restart_downtime: (Duration, Duration),
    /// Chance, after an action, that the workers go idle for a while (queries go on: whatever
    /// the last batch left wrong stays visible).
    pub idle: f64,
    /// How long an idle period lasts.
    pub idle_len: (Duration, Duration),
    /// Twin runs: every batch holds exactly this many events (0: batch sizes vary), so every
    /// run of the master numbers its sequences and event ids alike, as at light SGLang load
    /// where each put is one batch of one size; once the faults stop, a partial batch goes out
    /// when its oldest event has waited [`TWIN_FLUSH`].
    pub twin_batch: usize,
    /// The most foreign keys the default tenant holds per SGLang object of it, once the
    /// [`ActionMix::foreign_flood`] client fills it (at least 16 objects' worth).
    pub foreign_per_object: u32,
    /// `GET /get_all_keys` lists the keys in the master's hash order (an unordered map), so
    /// foreign lines sit among the SGLang ones; off, SGLang keys come first.
    pub hashed_key_list: bool,
    /// Publisher clock jumps per second while faults are on (0: the clock is steady).
    pub clock_jumps_per_sec: f64,
    /// How far one jump moves the batch timestamps forward.
    pub clock_jump: (Duration, Duration),
    /// Chance a forward jump is stepped back to the true time (NTP correcting it), after
    /// [`MasterOptions::clock_back_after`].
    pub clock_back: f64,
    /// How long a jump lasts before it is stepped back.
    pub clock_back_after: (Duration, Duration),
}

/// The store clients of [`crate::options::WorldKind::Segments`]: each mounts one segment, a
/// put lands on one segment mounted by a client that heartbeats, and clients close, crash and
/// stall with the master's TTLs at the simulator's time scale (spec section 10).
#[derive(Clone, Debug, PartialEq)]
pub struct ClientOptions {
    /// Store clients, one segment each.
    pub clients: u8,
    /// Closes, crashes and stalls per second while faults are on (a third each).
    pub faults_per_sec: f64,
    /// `--client_active_ttl_sec`: a client silent this long has its segment's objects hidden.
    pub active_ttl: Duration,
    /// `--client_suspicion_ttl_sec`: a suspected client silent this much longer goes offline,
    /// its segment unmounted.
    pub suspicion_ttl: Duration,
    /// How long a stall lasts (some end before the active TTL, most while suspected, some after
    /// the client went offline).
    pub stall_len: (Duration, Duration),
    /// How long after a segment went away a new client mounts one in its place.
    pub mount_after: (Duration, Duration),
}

/// How long the oldest event of a partial batch waits in [`MasterOptions::twin_batch`] mode.
pub const TWIN_FLUSH: Duration = Duration::from_millis(20);

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
    /// Share of master restarts the transport sees: the connection breaks at the restart and
    /// the driver is told ([`crate::network::NetEvent::Disconnected`]), as the shipped driver
    /// sees the socket close. The others are unseen (ZeroMQ reconnects underneath, or a proxy
    /// or a virtual IP hides the restart).
    pub seen_restarts: f64,
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
    /// Chance the master's publisher clears a tenant (a `cleared` event, its objects gone) within
    /// 5 ms of serving a key list: the event reaches a session while it applies that list.
    pub clear_after_keys: f64,
    /// Chance the master restarts right after it answered a fetch's status, before the key
    /// list is read: with [`HttpOptions::lag_after_restart`], a key list of the run before.
    pub restart_after_status: f64,
    /// After a restart, a fetch whose status the run before it answered still reads that run's
    /// key list, as of its death, until this long after the new run is up, drawn uniformly per
    /// restart (the key list was under way: a fetch that reads the old run's key list while
    /// the stream is already the new run's). Requests begun after the restart reach the new
    /// run. Zero: none.
    pub lag_after_restart: (Duration, Duration),
    /// Chance that, as the master begins to serve a fetch (its status, then its key list), its
    /// `POST /batch_query_keys` goes down: it fails every request for a while
    /// ([`HttpOptions::query_keys_down_for`]), so the fetch's questions about its doubted lines
    /// can all fail, and the fetch with them. Zero: never.
    pub query_keys_down: f64,
    /// How long `POST /batch_query_keys` stays down once it goes down, drawn uniformly.
    pub query_keys_down_for: (Duration, Duration),
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
    /// How late the driver hands the session a timer that is due: a busy driver reads the
    /// messages that arrived meanwhile first, so they land between the steps the session
    /// takes through its timers (a reconcile's slices, due at once one after another).
    pub timer_lag: Duration,
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
    /// How long the stream stays quiet before its status check (`None`: no checks).
    pub status_check: Option<Duration>,
    /// Watch the master's signals (at the status check's interval, with resync): on in every
    /// world; a planted bug that silent removals would hide turns it off to be hunted.
    pub store_watch: bool,
}
