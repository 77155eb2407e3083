//! A model of the Mooncake master, faithful to the specification's sections 3 and 4.
//!
//! - **Puts** are SGLang HiCache write-backs: a request's tokens (with realistic prefix sharing:
//!   shared system prompts, multi-turn continuations, branches) are cut into pages, hashed with
//!   [`Layout::page_hashes`], and every object of each page the store lacks is put
//!   ([`Layout::object_keys`]): one `stored` event (medium `cpu`) per object.
//! - A **disk replica** emits a second `stored` with medium `disk`. **Evictions** (of one object,
//!   of a page, or to stay under capacity) emit `removed`. A memory replica evicted while a disk
//!   replica remains emits nothing, or `removed` with medium `cpu` when
//!   [`MasterOptions::per_medium_removals`] is on (PR 2876 on); an object evicted from both
//!   media then gets one `removed` per medium, as upstream's `PublishObjectRemoved` sends them.
//! - **Silent removals** emit nothing: batch remove, remove-all of a tenant, a worker segment
//!   going away (memory replicas on it vanish).
//! - The **publisher** drains a bounded queue every [`MasterOptions::publish_interval`] into
//!   batches of at most [`MasterOptions::batch_max`] (≤ 64) events, so the objects of one page can
//!   land in different batches. Sequences start at 1; a full queue drops its oldest event and
//!   skips one sequence; a failed send consumes its sequence. Event ids are given when a batch
//!   is made, to the events it publishes (as measured on the 0.3.14 master): a batch that follows
//!   the previous one starts at exactly its last id + 1, a queue drop skips no id, a failed send
//!   (loss after publishing) skips its batch's ids.
//! - A **restart** loses every object and the queue, and after some downtime starts again with
//!   sequence 1 and event id 1. The transport never hears of it (ZeroMQ reconnects underneath).
//! - **Odd keys**: another client of the default tenant puts keys that are no SGLang key but look
//!   like one page's keys once trimmed or split at a line break ([`Action::ForeignPut`]); they
//!   come back in the key list verbatim. **Unknown keyless events**: an event of a type the
//!   decoder does not know, without a key, is a tenant-wide removal of a future master.
//! - The **HTTP side**: [`Master::status`] (`GET /kv_events/status`), [`Master::all_keys_body`]
//!   (`GET /get_all_keys`, default tenant, verbatim lines) and [`Master::batch_query`].
//!
//! Every state change is reported, in order, as a [`Record`] with a global *history position*
//! (a counter that never restarts): events when they are created (a later queue drop does not
//! undo the change), silent removals, and restarts. The oracle is built from these records.

use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use hicache_index::{
    layout::{DcpParams, KeyRule, Pool},
    EventKind, HitPolicy, Instant, Layout, Medium, Namespace, PageHash, Seq, SglangParams,
    Timestamp, DEFAULT_TENANT,
};

use crate::encode::{encode_payload_into, MasterFlavor, OwnedBatch, OwnedEvent};
use crate::options::{ActionMix, MasterOptions};
use crate::rng::Rng;
use crate::util::{FxHashMap, IdSet};

/// One model a fleet of SGLang workers serves, and how its pages are stored.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSpec {
    /// The served model name (the session's layout key).
    pub name: String,
    /// The object layout.
    pub layout: Layout,
    /// Every suffix, in [`Layout::suffixes`] order.
    pub suffixes: Vec<String>,
    /// The hit policy of each suffix.
    pub policies: Vec<HitPolicy>,
}

impl ModelSpec {
    fn new(name: &str, layout: Layout) -> ModelSpec {
        layout.validate().expect("catalogue layouts are valid");
        let suffixes = layout.suffixes().map(|(s, _)| s.to_owned()).collect();
        let policies = layout.suffixes().map(|(_, p)| p).collect();
        ModelSpec {
            name: name.into(),
            layout,
            suffixes,
            policies,
        }
    }
}

fn sglang(f: impl FnOnce(&mut SglangParams)) -> Layout {
    let mut p = SglangParams::new(4, 1);
    f(&mut p);
    Layout::from_sglang(&p).expect("catalogue parameters are valid")
}

/// The models a run can serve: one per layout family of the specification (MHA, PP, head split
/// with EAGLE, MLA, MLA with DCP, no prefix, an empty tag, a trailing-pages pool).
pub fn catalogue() -> Vec<ModelSpec> {
    vec![
        ModelSpec::new(
            "Qwen/Qwen3-8B",
            sglang(|p| {
                p.tp = 2;
                p.model = Some("Qwen/Qwen3-8B".into());
            }),
        ),
        ModelSpec::new(
            "deepseek-ai/DeepSeek-V3",
            sglang(|p| {
                p.page_size = 8;
                p.tp = 8;
                p.mla = true;
                p.extra_backend_tag = Some("prod".into());
                p.model = Some("deepseek-ai/DeepSeek-V3".into());
            }),
        ),
        ModelSpec::new(
            "meta/llama-pp",
            sglang(|p| {
                p.tp = 2;
                p.pp = 2;
                p.model = Some("meta/llama-pp".into());
            }),
        ),
        ModelSpec::new(
            "eagle-split",
            sglang(|p| {
                p.tp = 2;
                p.tp_lcm = Some(4);
                p.eagle = true;
                p.model = Some("eagle-split".into());
            }),
        ),
        ModelSpec::new(
            "plain-old",
            sglang(|p| {
                p.page_size = 2;
                p.key_rule = KeyRule::TagOnly;
            }),
        ),
        ModelSpec::new(
            "hybrid",
            Layout::new(
                4,
                Some("hybrid".into()),
                vec![
                    Pool::all_pages("kv", vec!["_0_k".into(), "_0_v".into()]),
                    Pool {
                        name: "mamba".into(),
                        suffixes: vec!["_ssm".into()],
                        hit_policy: HitPolicy::TrailingPages(2),
                    },
                ],
            )
            .expect("a valid hybrid layout"),
        ),
        ModelSpec::new(
            "dsv3-dcp",
            sglang(|p| {
                p.page_size = 2;
                p.mla = true;
                p.dcp = Some(DcpParams { dcp: 2, cp: 1 });
                p.model = Some("dsv3-dcp".into());
            }),
        ),
        ModelSpec::new(
            "empty-tag",
            sglang(|p| {
                p.extra_backend_tag = Some(String::new());
                p.model = Some("m".into());
            }),
        ),
    ]
}

/// Tenants, the first being Mooncake's default.
pub const TENANTS: [&str; 3] = [DEFAULT_TENANT, "tenant-a", "tenant-b"];

/// Request namespaces some requests carry.
pub const NAMESPACES: [Namespace<'static>; 3] = [
    Namespace {
        extra_key: Some("user-1lora-7"),
        cache_salt: None,
    },
    Namespace {
        extra_key: None,
        cache_salt: Some("salt-a"),
    },
    Namespace {
        extra_key: Some(""),
        cache_salt: Some(""),
    },
];

/// An object's number, unique over the whole run (tenant and key).
pub type ObjId = u32;
/// A page's number, unique over the whole run (tenant, model, hash).
pub type PageId = u32;

/// One logical page ever written.
#[derive(Copy, Clone, Debug)]
pub struct PageInfo {
    /// Index into [`TENANTS`].
    pub tenant: u8,
    /// Index into the run's models.
    pub model: u8,
    /// The page hash.
    pub hash: PageHash,
    /// The first object; the page's objects are `first_obj..first_obj + objs`, in suffix order.
    pub first_obj: ObjId,
    /// How many objects the page has.
    pub objs: u16,
}

/// One physical object ever written.
#[derive(Clone, Debug)]
pub struct ObjInfo {
    /// Its page.
    pub page: PageId,
    /// The object key.
    pub key: Box<str>,
    /// The length of the logical key (the key without its suffix).
    pub logical_len: u16,
}

/// One request the workers served: its tokens and pages.
#[derive(Clone, Debug)]
pub struct Request {
    /// Index into [`TENANTS`].
    pub tenant: u8,
    /// Index into the run's models.
    pub model: u8,
    /// Index into [`NAMESPACES`], or none.
    pub namespace: Option<u8>,
    /// The tokens.
    pub tokens: Vec<u64>,
    /// Its full pages, in order.
    pub pages: Vec<PageId>,
}

impl Request {
    /// Returns the request's namespace.
    pub fn namespace(&self) -> Namespace<'static> {
        self.namespace
            .map_or(Namespace::NONE, |i| NAMESPACES[i as usize])
    }
}

/// One state change, as the oracle learns it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A `stored` event was created (the object is present in both histories).
    Stored {
        /// The object.
        obj: ObjId,
        /// Its tenant.
        tenant: u8,
    },
    /// A `removed` event was created (with or without its key): absent in both histories.
    Removed {
        /// The object.
        obj: ObjId,
    },
    /// A `cleared` event was created for a tenant: every object of it is absent.
    Cleared {
        /// The tenant.
        tenant: u8,
    },
    /// The object vanished without an event (true state only).
    SilentlyRemoved {
        /// The object.
        obj: ObjId,
    },
    /// A `removed` event for one medium while a replica on another remains: the object is
    /// still present, for the events (they said it was stored on both) and for the master.
    MediumRemoved {
        /// The object.
        obj: ObjId,
    },
    /// The master restarted: every object is gone, with no event.
    Restart,
}

/// A change and its position in the master's history.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The history position (from 1, never restarting).
    pub pos: u64,
    /// What changed.
    pub change: Change,
}

/// What `GET /kv_events/status` answers, as the real master counts (specification section 3):
/// within one run of the master the counters only grow; a restart sets them back to 0.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// Batches the publisher made. The model counts a batch whose send failed too (its sequence
    /// was assigned), so that `published_batches + dropped_events` is the last sequence
    /// assigned.
    pub published_batches: u64,
    /// Events given an id: the last event id given (ids go to published events only).
    pub published_events: u64,
    /// Events the full queue dropped (each skipped one sequence, and no event id).
    pub dropped_events: u64,
}

impl Status {
    /// Returns the last sequence the publisher assigned (`published_batches + dropped_events`).
    pub fn last_seq(&self) -> Seq {
        Seq(self.published_batches + self.dropped_events)
    }
}

/// One message the publisher sent.
#[derive(Clone, Debug)]
pub struct Published {
    /// The message's number over the whole run (from 1, never restarting).
    pub id: u64,
    /// The master's restart count when it was sent.
    pub epoch: u32,
    /// The sequence.
    pub seq: u64,
    /// The history position of its first event.
    pub first_pos: u64,
    /// The history position of its last event.
    pub last_pos: u64,
    /// The event id of its first event (its events have consecutive ids).
    pub first_event_id: u64,
    /// How many events it holds.
    pub events: usize,
    /// `[topic, seq, payload]`, as the master's bytes.
    pub frames: [Vec<u8>; 3],
}

/// What a call to the master produced; the caller drains it.
#[derive(Debug, Default)]
pub struct MasterOutput {
    /// State changes, in order.
    pub records: Vec<Record>,
    /// Messages sent, in order.
    pub published: Vec<Published>,
    /// The highest history position whose event will never be sent (queue drop, failed send,
    /// restart); 0 when none.
    pub lost_upto: u64,
    /// The history positions of the events the full queue dropped.
    pub dropped: Vec<u64>,
    /// The history positions of the first events of batches whose send failed.
    pub failed: Vec<u64>,
    /// The history positions of restarts.
    pub restarts: Vec<u64>,
    /// A restart happened; the master is down until this time.
    pub restarted_until: Option<Instant>,
    /// A put happened (the world then runs queries).
    pub put: bool,
}

impl MasterOutput {
    fn lost(&mut self, pos: u64) {
        self.lost_upto = self.lost_upto.max(pos);
    }
}

/// What the master can do in one action.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Serve a request and write back the pages the store lacks.
    Put,
    /// Add a disk replica to an object.
    DiskReplica,
    /// Evict one object (with an event).
    EvictObject,
    /// Evict every object of a page (with events).
    EvictPage,
    /// Evict a memory replica that has a disk replica.
    EvictMemory,
    /// Remove some objects without events.
    SilentBatchRemove,
    /// Remove every object of a tenant without events.
    SilentRemoveAll,
    /// Lose a worker segment (memory replicas) without events.
    SegmentLoss,
    /// Restart.
    Restart,
    /// Send a tenant-wide `cleared` event.
    ClearedEvent,
    /// Remove an object and send the `removed` event without its key.
    UnreadableRemoval,
    /// Send an event of a type the decoder does not know, without a key: a future tenant-wide
    /// removal (the master forgets the tenant's objects).
    UnknownKeyless,
    /// Another client of the default tenant puts keys that are not SGLang object keys but look
    /// like the keys of one page once trimmed or split at a line break (`"<key> "`,
    /// `"<key>\r"`, `"x\n<key>"`, `"\n<key>"`), and removes an older one when it has many.
    ForeignPut,
}

/// Counts of what the master did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MasterStats {
    /// Events created.
    pub events: u64,
    /// Events dropped by the full queue.
    pub queue_drops: u64,
    /// Batches sent.
    pub batches: u64,
    /// Batches whose send failed.
    pub failed_sends: u64,
    /// Restarts.
    pub restarts: u64,
    /// Objects removed without an event.
    pub silent_removals: u64,
    /// Put requests served.
    pub puts: u64,
    /// Events of an unknown type without a key sent.
    pub unknown_keyless: u64,
    /// Foreign keys put (odd keys of another client).
    pub foreign_keys: u64,
}

const MEM: u8 = 1;
const DISK: u8 = 2;
const RECENT_REQUESTS: usize = 512;
/// The most foreign keys the master holds at once.
const MAX_FOREIGN: usize = 48;
const MAX_REQUEST_PAGES: usize = 40;
/// The batch timestamp's base: a Unix time in milliseconds (above `u32::MAX`, as on the wire).
const EPOCH_MS: u64 = 1_764_000_000_000;

#[derive(Copy, Clone, Debug)]
enum QKind {
    Stored,
    Removed,
    RemovedWithoutKey,
    Cleared,
    /// A `removed` for one medium while another replica remains.
    RemovedMedium,
    /// An event of a type this model's decoder does not know, without an object key, for a
    /// tenant (the target): a future tenant-wide removal.
    UnknownKeyless,
    /// A `stored` of a foreign client's key (the target indexes [`Master::foreign_keys`]).
    ForeignStored,
    /// A `removed` of a foreign client's key.
    ForeignRemoved,
}

#[derive(Copy, Clone, Debug)]
struct Queued {
    kind: QKind,
    /// The object (or the tenant, for `Cleared`).
    target: u32,
    medium: Option<Medium>,
    pos: u64,
}

/// The master model (see the module docs).
#[derive(Debug)]
pub struct Master {
    opts: MasterOptions,
    models: Vec<ModelSpec>,
    rng: Rng,
    pages: Vec<PageInfo>,
    page_index: FxHashMap<(u8, u8, PageHash), PageId>,
    objects: Vec<ObjInfo>,
    /// Objects of the default tenant by the hash of their key (checked against the key).
    default_keys: FxHashMap<u64, ObjId>,
    flags: Vec<u8>,
    segment: Vec<u8>,
    present: Vec<IdSet>,
    requests: VecDeque<Rc<Request>>,
    prompts: Vec<Vec<Vec<u64>>>,
    queue: VecDeque<Queued>,
    epoch: u32,
    next_seq: u64,
    next_event_id: u64,
    foreign_keys: Vec<Box<str>>,
    foreign_present: IdSet,
    run_dropped: u64,
    published_ids: u64,
    pos: u64,
    next_action: Instant,
    next_tick: Instant,
    down_until: Option<Instant>,
    faults: bool,
    acting: bool,
    stats: MasterStats,
    batch: OwnedBatch,
    spare_events: Vec<OwnedEvent>,
    items: Vec<Queued>,
    scratch: String,
}

impl Master {
    /// Makes a master serving `models`; it acts from time zero.
    pub fn new(opts: MasterOptions, models: Vec<ModelSpec>, rng: Rng) -> Master {
        let mut rng = rng;
        let prompts = models
            .iter()
            .map(|m| {
                let ps = m.layout.page_size as usize;
                (0..3)
                    .map(|_| {
                        let len = ps * rng.range(1, 3) as usize;
                        (0..len).map(|_| rng.range(1, 50_000)).collect()
                    })
                    .collect()
            })
            .collect();
        let tenants = opts.tenants.clamp(1, TENANTS.len());
        Master {
            opts: MasterOptions { tenants, ..opts },
            models,
            rng,
            pages: Vec::new(),
            page_index: FxHashMap::default(),
            objects: Vec::new(),
            default_keys: FxHashMap::default(),
            flags: Vec::new(),
            segment: Vec::new(),
            present: (0..TENANTS.len()).map(|_| IdSet::new()).collect(),
            requests: VecDeque::new(),
            prompts,
            queue: VecDeque::new(),
            epoch: 0,
            next_seq: 1,
            next_event_id: 1,
            foreign_keys: Vec::new(),
            foreign_present: IdSet::new(),
            run_dropped: 0,
            published_ids: 0,
            pos: 0,
            next_action: Instant::ZERO,
            next_tick: Instant::ZERO,
            down_until: None,
            faults: true,
            acting: true,
            stats: MasterStats::default(),
            batch: OwnedBatch {
                seq: Seq(0),
                timestamp: Timestamp::Nil,
                dp_rank: Some(0),
                events: Vec::new(),
            },
            spare_events: Vec::new(),
            items: Vec::new(),
            scratch: String::new(),
        }
    }

    // ---- reading ----

    /// Returns the models served.
    pub fn models(&self) -> &[ModelSpec] {
        &self.models
    }

    /// Returns every page ever written.
    pub fn pages(&self) -> &[PageInfo] {
        &self.pages
    }

    /// Returns a page.
    pub fn page(&self, page: PageId) -> &PageInfo {
        &self.pages[page as usize]
    }

    /// Returns every object ever written.
    pub fn objects(&self) -> &[ObjInfo] {
        &self.objects
    }

    /// Returns an object's key.
    pub fn key(&self, obj: ObjId) -> &str {
        &self.objects[obj as usize].key
    }

    /// Returns the recent requests, oldest first.
    pub fn requests(&self) -> &VecDeque<Rc<Request>> {
        &self.requests
    }

    /// Returns the restart count.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Returns the history position of the latest change.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Returns what the master did so far.
    pub fn stats(&self) -> MasterStats {
        self.stats
    }

    /// Reports whether the master is down (restarting) at `now`.
    pub fn is_down(&self, now: Instant) -> bool {
        self.down_until.is_some_and(|t| now < t)
    }

    /// `GET /kv_events/status` of the current run of the master (every counter 0 before the
    /// first batch).
    pub fn status(&self) -> Status {
        Status {
            published_batches: self.next_seq - 1 - self.run_dropped,
            published_events: self.next_event_id - 1,
            dropped_events: self.run_dropped,
        }
    }

    /// Returns the history position of the oldest event waiting in the queue.
    pub fn oldest_queued(&self) -> Option<u64> {
        self.queue.front().map(|q| q.pos)
    }

    /// Returns the number of events waiting in the queue.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Reports whether `obj` is present (true state).
    pub fn is_present(&self, obj: ObjId) -> bool {
        self.flags[obj as usize] != 0
    }

    // ---- HTTP side ----

    /// `GET /get_all_keys` as the master writes it: every key of the default tenant, one a line,
    /// each ended by `\n` and nothing trimmed. The foreign keys come after the SGLang ones (a key
    /// with a `\n` makes two lines). Returns the object whose line is right before the first
    /// foreign line, if any: a session that skips the lines next to a line that is not a key
    /// skips it.
    pub fn all_keys_body(&self, body: &mut Vec<u8>) -> Option<ObjId> {
        body.clear();
        for &obj in self.present[0].as_slice() {
            body.extend_from_slice(self.objects[obj as usize].key.as_bytes());
            body.push(b'\n');
        }
        for &id in self.foreign_present.as_slice() {
            body.extend_from_slice(self.foreign_keys[id as usize].as_bytes());
            body.push(b'\n');
        }
        let foreign = !self.foreign_present.is_empty();
        foreign
            .then(|| self.present[0].as_slice().last().copied())
            .flatten()
    }

    /// Returns how many foreign keys the default tenant holds now.
    pub fn foreign_count(&self) -> usize {
        self.foreign_present.len()
    }

    /// `GET /batch_query_keys`: whether each key exists in the default tenant now.
    pub fn batch_query(&self, keys: &[String]) -> Vec<bool> {
        keys.iter()
            .map(|k| {
                let sglang = self.default_keys.get(&key_hash(k)).is_some_and(|&o| {
                    &*self.objects[o as usize].key == k && self.flags[o as usize] != 0
                });
                // A foreign client's key is as present as any other.
                sglang
                    || self
                        .foreign_present
                        .as_slice()
                        .iter()
                        .any(|&id| &*self.foreign_keys[id as usize] == k)
            })
            .collect()
    }

    // ---- driving ----

    /// Turns faults (silent removals, restarts, queue overflow, failed sends...) on or off; off,
    /// the queue never overflows and the action mix is [`ActionMix::quiet`].
    pub fn set_faults(&mut self, on: bool) {
        self.faults = on;
    }

    /// Stops or resumes actions; the publisher keeps draining the queue.
    pub fn set_acting(&mut self, on: bool) {
        self.acting = on;
    }

    /// Returns when the master next has something to do.
    pub fn next_at(&self) -> Option<Instant> {
        if let Some(up) = self.down_until {
            return Some(up);
        }
        let tick = (!self.queue.is_empty()).then_some(self.next_tick);
        let action = self.acting.then_some(self.next_action);
        tick.into_iter().chain(action).min()
    }

    /// Does what is due at `now`: comes back from a restart, publishes, acts.
    pub fn step(&mut self, now: Instant, out: &mut MasterOutput) {
        if let Some(up) = self.down_until {
            if now < up {
                return;
            }
            self.down_until = None;
            self.epoch += 1;
            self.next_seq = 1;
            self.next_event_id = 1;
            self.run_dropped = 0;
            self.next_action = now;
            self.next_tick = self.tick_after(now);
        }
        if !self.queue.is_empty() && now >= self.next_tick {
            self.publish(now, out);
            self.next_tick = self.tick_after(now);
        }
        if self.acting && now >= self.next_action {
            let action = self.choose_action();
            self.act(now, action, out);
            let (lo, hi) = self.opts.action_interval;
            self.next_action = now + self.rng.duration(lo, hi);
            if self.faults && self.opts.idle > 0.0 && self.rng.chance(self.opts.idle) {
                let (lo, hi) = self.opts.idle_len;
                self.next_action = self.next_action + self.rng.duration(lo, hi);
            }
        }
    }

    /// The first publisher tick strictly after `now`, on the interval's grid.
    fn tick_after(&self, now: Instant) -> Instant {
        let iv = (self.opts.publish_interval.as_nanos() as u64).max(1);
        Instant::from_nanos((now.as_nanos() / iv + 1) * iv)
    }

    fn choose_action(&mut self) -> Action {
        let quiet;
        let mix = if self.faults {
            &self.opts.mix
        } else {
            quiet = ActionMix::quiet();
            &quiet
        };
        let table = [
            (mix.disk_replica, Action::DiskReplica),
            (mix.evict_object, Action::EvictObject),
            (mix.evict_page, Action::EvictPage),
            (mix.evict_memory, Action::EvictMemory),
            (mix.silent_batch_remove, Action::SilentBatchRemove),
            (mix.silent_remove_all, Action::SilentRemoveAll),
            (mix.segment_loss, Action::SegmentLoss),
            (mix.restart, Action::Restart),
            (mix.cleared_event, Action::ClearedEvent),
            (mix.unreadable_removal, Action::UnreadableRemoval),
            (mix.unknown_keyless, Action::UnknownKeyless),
            (mix.foreign_put, Action::ForeignPut),
        ];
        let mut u = self.rng.unit();
        for (p, action) in table {
            if u < p {
                return action;
            }
            u -= p;
        }
        Action::Put
    }

    /// Performs one action now (the random driver draws them; scripts name them).
    pub fn act(&mut self, now: Instant, action: Action, out: &mut MasterOutput) {
        if self.is_down(now) {
            return;
        }
        match action {
            Action::Put => self.put(out),
            Action::DiskReplica => {
                for _ in 0..self.rng.range(1, 8) {
                    if let Some(obj) = self.pick_present(|f| f == MEM) {
                        self.flags[obj as usize] |= DISK;
                        self.emit(QKind::Stored, obj, Some(Medium::Disk), out);
                    }
                }
            }
            Action::EvictObject => {
                if let Some(obj) = self.pick_present(|_| true) {
                    self.evict(obj, out);
                }
            }
            Action::EvictPage => {
                if let Some(obj) = self.pick_present(|_| true) {
                    let page = self.objects[obj as usize].page;
                    for o in self.page_objects(page) {
                        if self.flags[o as usize] != 0 {
                            self.evict(o, out);
                        }
                    }
                }
            }
            Action::EvictMemory => {
                if let Some(obj) = self.pick_present(|f| f == MEM | DISK) {
                    self.flags[obj as usize] = DISK;
                    if self.opts.per_medium_removals {
                        self.emit(QKind::RemovedMedium, obj, Some(Medium::Cpu), out);
                    }
                }
            }
            Action::SilentBatchRemove => {
                let n = self.rng.range(1, 16);
                for _ in 0..n {
                    if let Some(obj) = self.pick_present(|_| true) {
                        self.vanish(obj, out);
                    }
                }
            }
            Action::SilentRemoveAll => {
                let tenant = self.rng.index(self.opts.tenants);
                let all = self.present[tenant].as_slice().to_vec();
                for obj in all {
                    self.vanish(obj, out);
                }
            }
            Action::SegmentLoss => {
                let seg = self.rng.below(u64::from(self.opts.segments.max(1))) as u8;
                for tenant in 0..self.opts.tenants {
                    let all = self.present[tenant].as_slice().to_vec();
                    for obj in all {
                        let f = self.flags[obj as usize];
                        if f & MEM != 0 && self.segment[obj as usize] == seg {
                            if f == MEM {
                                self.vanish(obj, out);
                            } else {
                                self.flags[obj as usize] = DISK;
                            }
                        }
                    }
                }
            }
            Action::Restart => self.restart(now, out),
            Action::ClearedEvent => {
                let tenant = self.rng.index(self.opts.tenants);
                self.emit(QKind::Cleared, tenant as u32, None, out);
                let all = self.present[tenant].as_slice().to_vec();
                for obj in all {
                    self.flags[obj as usize] = 0;
                }
                self.present[tenant].clear();
            }
            Action::UnknownKeyless => {
                let tenant = self.rng.index(self.opts.tenants);
                self.stats.unknown_keyless += 1;
                self.emit(QKind::UnknownKeyless, tenant as u32, None, out);
                let all = self.present[tenant].as_slice().to_vec();
                for obj in all {
                    self.flags[obj as usize] = 0;
                }
                self.present[tenant].clear();
            }
            Action::ForeignPut => self.foreign_put(out),
            Action::UnreadableRemoval => {
                if let Some(obj) = self.pick_present(|_| true) {
                    self.take_away(obj);
                    self.emit(QKind::RemovedWithoutKey, obj, Some(Medium::Cpu), out);
                }
            }
        }
    }

    fn restart(&mut self, now: Instant, out: &mut MasterOutput) {
        self.stats.restarts += 1;
        let pos = self.record(Change::Restart, out);
        out.lost(pos);
        out.restarts.push(pos);
        if let Some(q) = self.queue.front() {
            // The queued events die with the master, unsent.
            out.dropped.push(q.pos);
        }
        for tenant in 0..TENANTS.len() {
            for &obj in self.present[tenant].as_slice() {
                self.flags[obj as usize] = 0;
            }
            self.present[tenant].clear();
        }
        self.queue.clear();
        let (lo, hi) = self.opts.restart_downtime;
        let up = now + self.rng.duration(lo, hi);
        self.down_until = Some(up);
        out.restarted_until = Some(up);
    }

    fn foreign_put(&mut self, out: &mut MasterOutput) {
        let mut rng = self.rng.clone();
        let page = (0..8).find_map(|_| {
            let req = self.recent_request(&mut rng)?;
            let pages = &req.pages;
            (req.tenant == 0 && !pages.is_empty()).then(|| pages[rng.index(pages.len())])
        });
        self.rng = rng;
        let Some(page) = page else {
            return;
        };
        for obj in self.page_objects(page) {
            let key = &self.objects[obj as usize].key;
            let odd = match self.rng.below(4) {
                0 => format!("{key} "),
                1 => format!("{key}\r"),
                2 => format!("x\n{key}"),
                _ => format!("\n{key}"),
            };
            let id = self.foreign_keys.len() as u32;
            self.foreign_keys.push(odd.into_boxed_str());
            self.foreign_present.insert(id);
            self.stats.foreign_keys += 1;
            self.emit(QKind::ForeignStored, id, Some(Medium::Cpu), out);
        }
        while self.foreign_present.len() > MAX_FOREIGN {
            let i = self.rng.index(self.foreign_present.len());
            let id = self.foreign_present.get(i).expect("index within the set");
            self.foreign_present.remove(id);
            self.emit(QKind::ForeignRemoved, id, Some(Medium::Cpu), out);
        }
    }

    fn page_objects(&self, page: PageId) -> std::ops::Range<ObjId> {
        let p = &self.pages[page as usize];
        p.first_obj..p.first_obj + u32::from(p.objs)
    }

    /// Picks a present object whose replica flags pass `want` (a few random tries).
    fn pick_present(&mut self, want: impl Fn(u8) -> bool) -> Option<ObjId> {
        let total: usize = self.present.iter().map(IdSet::len).sum();
        if total == 0 {
            return None;
        }
        for _ in 0..8 {
            let mut i = self.rng.index(total);
            for set in &self.present {
                if i < set.len() {
                    let obj = set.get(i).expect("index within the set");
                    if want(self.flags[obj as usize]) {
                        return Some(obj);
                    }
                    break;
                }
                i -= set.len();
            }
        }
        None
    }

    fn tenant_of(&self, obj: ObjId) -> u8 {
        self.pages[self.objects[obj as usize].page as usize].tenant
    }

    fn take_away(&mut self, obj: ObjId) {
        self.flags[obj as usize] = 0;
        let t = self.tenant_of(obj) as usize;
        self.present[t].remove(obj);
    }

    /// Evicts an object from every medium. An older master sends one `removed` once no replica
    /// is left (medium `cpu`, whatever the last one was); with
    /// [`MasterOptions::per_medium_removals`] one per medium it had (`cpu` first), the last
    /// one taking the object away.
    fn evict(&mut self, obj: ObjId, out: &mut MasterOutput) {
        let flags = self.flags[obj as usize];
        self.take_away(obj);
        if !self.opts.per_medium_removals {
            self.emit(QKind::Removed, obj, Some(Medium::Cpu), out);
        } else if flags == MEM | DISK {
            self.emit(QKind::RemovedMedium, obj, Some(Medium::Cpu), out);
            self.emit(QKind::Removed, obj, Some(Medium::Disk), out);
        } else if flags == DISK {
            self.emit(QKind::Removed, obj, Some(Medium::Disk), out);
        } else {
            self.emit(QKind::Removed, obj, Some(Medium::Cpu), out);
        }
    }

    fn vanish(&mut self, obj: ObjId, out: &mut MasterOutput) {
        self.take_away(obj);
        self.stats.silent_removals += 1;
        self.record(Change::SilentlyRemoved { obj }, out);
    }

    fn record(&mut self, change: Change, out: &mut MasterOutput) -> u64 {
        self.pos += 1;
        out.records.push(Record {
            pos: self.pos,
            change,
        });
        self.pos
    }

    /// Creates an event: records the change and queues the event (dropping the oldest when full).
    fn emit(&mut self, kind: QKind, target: u32, medium: Option<Medium>, out: &mut MasterOutput) {
        let change = match kind {
            QKind::Stored => Some(Change::Stored {
                obj: target,
                tenant: self.tenant_of(target),
            }),
            QKind::Removed | QKind::RemovedWithoutKey => Some(Change::Removed { obj: target }),
            QKind::RemovedMedium => Some(Change::MediumRemoved { obj: target }),
            QKind::Cleared | QKind::UnknownKeyless => Some(Change::Cleared {
                tenant: target as u8,
            }),
            // Foreign keys are no page's objects: the oracle has nothing to learn.
            QKind::ForeignStored | QKind::ForeignRemoved => None,
        };
        let pos = match change {
            Some(change) => self.record(change, out),
            None => self.pos,
        };
        self.stats.events += 1;
        let capacity = if self.faults {
            self.opts.queue_capacity.max(1)
        } else {
            usize::MAX
        };
        if self.queue.len() >= capacity {
            let dropped = self.queue.pop_front().expect("a full queue has an oldest");
            self.stats.queue_drops += 1;
            self.run_dropped += 1;
            self.next_seq += 1;
            out.lost(dropped.pos);
            out.dropped.push(dropped.pos);
        }
        self.queue.push_back(Queued {
            kind,
            target,
            medium,
            pos,
        });
    }

    fn put(&mut self, out: &mut MasterOutput) {
        self.stats.puts += 1;
        out.put = true;
        let request = self.make_request();
        let model = &self.models[request.model as usize];
        let trailing: Vec<bool> = model
            .policies
            .iter()
            .map(|p| matches!(p, HitPolicy::TrailingPages(_)))
            .collect();
        let last = request.pages.len().saturating_sub(1);
        for (i, &page) in request.pages.iter().enumerate() {
            let first = self.pages[page as usize].first_obj;
            for (j, &is_trailing) in trailing.iter().enumerate() {
                if is_trailing && i != last && self.rng.chance(0.5) {
                    continue;
                }
                let obj = first + j as u32;
                if self.flags[obj as usize] == 0 {
                    self.flags[obj as usize] = MEM;
                    self.segment[obj as usize] =
                        self.rng.below(u64::from(self.opts.segments.max(1))) as u8;
                    self.present[request.tenant as usize].insert(obj);
                    self.emit(QKind::Stored, obj, Some(Medium::Cpu), out);
                }
            }
        }
        if self.requests.len() >= RECENT_REQUESTS {
            self.requests.pop_front();
        }
        self.requests.push_back(Rc::new(request));
        // Stay under capacity by evicting (with events), as memory pressure does.
        let total: usize = self.present.iter().map(IdSet::len).sum();
        let over = total.saturating_sub(self.opts.capacity_objects.max(1));
        for _ in 0..over {
            if let Some(obj) = self.pick_present(|_| true) {
                self.evict(obj, out);
            }
        }
    }

    /// Returns a recent request, biased towards the newest.
    pub fn recent_request(&self, rng: &mut Rng) -> Option<&Rc<Request>> {
        let n = self.requests.len();
        if n == 0 {
            return None;
        }
        let back = if rng.chance(0.7) {
            rng.index(n.min(32))
        } else {
            rng.index(n)
        };
        self.requests.get(n - 1 - back)
    }

    fn new_token(&mut self) -> u64 {
        if self.opts.wide_tokens && self.rng.chance(0.01) {
            u64::from(u32::MAX) + self.rng.range(1, 1_000)
        } else {
            self.rng.range(1, 50_000)
        }
    }

    fn make_request(&mut self) -> Request {
        let mode = self.rng.below(10);
        let mut rng = self.rng.clone();
        let parent = if mode < 7 {
            self.recent_request(&mut rng).map(|r| (**r).clone())
        } else {
            None
        };
        self.rng = rng;
        let (tenant, model, namespace, mut tokens) = match parent {
            Some(p) => {
                let ps = self.models[p.model as usize].layout.page_size as usize;
                let mut tokens = p.tokens;
                if mode >= 4 {
                    // A branch: keep a prefix of whole pages.
                    let cut = self.rng.index(tokens.len() / ps + 1) * ps;
                    tokens.truncate(cut);
                }
                (p.tenant, p.model, p.namespace, tokens)
            }
            None => {
                let tenant = self.rng.index(self.opts.tenants) as u8;
                let model = self.rng.index(self.models.len()) as u8;
                let namespace = (self.opts.namespaces && self.rng.chance(0.3))
                    .then(|| self.rng.index(NAMESPACES.len()) as u8);
                let prompts = &self.prompts[model as usize];
                let tokens = prompts[self.rng.index(prompts.len())].clone();
                (tenant, model, namespace, tokens)
            }
        };
        let layout = &self.models[model as usize].layout;
        let ps = layout.page_size as usize;
        if tokens.len() / ps + 8 > MAX_REQUEST_PAGES {
            let prompts = &self.prompts[model as usize];
            tokens = prompts[self.rng.index(prompts.len())].clone();
        }
        let (lo, hi) = self.opts.pages_per_put;
        let new = ps * self.rng.range(u64::from(lo), u64::from(hi)) as usize + self.rng.index(ps);
        for _ in 0..new {
            let t = self.new_token();
            tokens.push(t);
        }
        let ns = namespace.map_or(Namespace::NONE, |i| NAMESPACES[i as usize]);
        let hashes: Vec<PageHash> = self.models[model as usize]
            .layout
            .page_hashes(&tokens, ns)
            .collect();
        let pages = hashes
            .into_iter()
            .map(|h| self.page_id(tenant, model, h))
            .collect();
        Request {
            tenant,
            model,
            namespace,
            tokens,
            pages,
        }
    }

    /// Returns the page's id, registering the page and its objects on first sight.
    fn page_id(&mut self, tenant: u8, model: u8, hash: PageHash) -> PageId {
        if let Some(&id) = self.page_index.get(&(tenant, model, hash)) {
            return id;
        }
        let id = self.pages.len() as PageId;
        let first_obj = self.objects.len() as ObjId;
        let spec = &self.models[model as usize];
        spec.layout.write_logical_key(&hash, &mut self.scratch);
        let logical_len = self.scratch.len();
        for suffix in &spec.suffixes {
            let obj = self.objects.len() as ObjId;
            let mut key = String::with_capacity(logical_len + suffix.len());
            key.push_str(&self.scratch);
            key.push_str(suffix);
            if tenant == 0 {
                self.default_keys.insert(key_hash(&key), obj);
            }
            self.objects.push(ObjInfo {
                page: id,
                logical_len: logical_len as u16,
                key: key.into_boxed_str(),
            });
            self.flags.push(0);
            self.segment.push(0);
        }
        self.pages.push(PageInfo {
            tenant,
            model,
            hash,
            first_obj,
            objs: spec.suffixes.len() as u16,
        });
        self.page_index.insert((tenant, model, hash), id);
        id
    }

    /// Returns the object of `tenant` with `key`, if it was ever written.
    pub fn find_object(&self, tenant: u8, key: &str) -> Option<ObjId> {
        let parsed = hicache_index::parse_object_key(key)?;
        self.models.iter().enumerate().find_map(|(m, spec)| {
            if spec.layout.key_prefix.as_deref() != parsed.prefix {
                return None;
            }
            let slot = spec.suffixes.iter().position(|s| s == parsed.suffix)?;
            let page = self.find_page(tenant, m as u8, &parsed.page_hash)?;
            Some(self.pages[page as usize].first_obj + slot as u32)
        })
    }

    /// Returns the page of `(tenant, model, hash)` if it was ever written.
    pub fn find_page(&self, tenant: u8, model: u8, hash: &PageHash) -> Option<PageId> {
        self.page_index.get(&(tenant, model, *hash)).copied()
    }

    /// Runs the publisher: drains the queue into batches and sends them.
    fn publish(&mut self, now: Instant, out: &mut MasterOutput) {
        let limit = match self.opts.batches_per_tick {
            0 => usize::MAX,
            n if self.faults => n,
            _ => usize::MAX,
        };
        for _ in 0..limit {
            if self.queue.is_empty() {
                return;
            }
            let max = self.opts.batch_max.clamp(1, 64);
            let n = if self.rng.chance(0.5) {
                max
            } else {
                self.rng.range(1, max as u64) as usize
            }
            .min(self.queue.len());
            let seq = self.next_seq;
            self.next_seq += 1;
            let mut items = core::mem::take(&mut self.items);
            items.clear();
            items.extend(self.queue.drain(..n));
            let first_pos = items.first().expect("a batch has events").pos;
            let last_pos = items.last().expect("a batch has events").pos;
            // Event ids are given when a batch is made, to the events it publishes: the ones the
            // queue dropped never get one, so a batch that follows the previous one starts at
            // exactly its last id + 1.
            let first_event_id = self.next_event_id;
            self.next_event_id += n as u64;
            self.published_ids += 1;
            let id = self.published_ids;
            if self.faults && self.rng.chance(self.opts.send_fail) {
                // The sequence and the ids were consumed: loss after publishing.
                self.stats.failed_sends += 1;
                out.lost(last_pos);
                out.failed.push(first_pos);
                self.items = items;
                continue;
            }
            let ms = EPOCH_MS + now.as_nanos() / 1_000_000;
            self.fill_batch(seq, ms, first_event_id, &items);
            self.items = items;
            let mut payload = Vec::with_capacity(n * 420 + 16);
            encode_payload_into(&mut payload, &self.batch, self.opts.flavor);
            self.stats.batches += 1;
            out.published.push(Published {
                id,
                epoch: self.epoch,
                seq,
                first_pos,
                last_pos,
                first_event_id,
                events: n,
                frames: [Vec::new(), seq.to_be_bytes().to_vec(), payload],
            });
        }
    }

    /// Rewrites the reusable batch in place (no allocation once warm).
    fn fill_batch(&mut self, seq: u64, ms: u64, first_event_id: u64, items: &[Queued]) {
        let batch = &mut self.batch;
        batch.seq = Seq(seq);
        batch.timestamp = Timestamp::Millis(ms);
        batch.dp_rank = Some(0);
        while batch.events.len() > items.len() {
            let e = batch.events.pop().expect("longer than wanted");
            self.spare_events.push(e);
        }
        while batch.events.len() < items.len() {
            let e = self.spare_events.pop().unwrap_or_else(|| OwnedEvent {
                backend_id: "mooncake-sim".into(),
                ..OwnedEvent::new(EventKind::Stored, "")
            });
            batch.events.push(e);
        }
        let flavor = self.opts.flavor;
        for ((ev, q), event_id) in batch.events.iter_mut().zip(items).zip(first_event_id..) {
            let (kind, obj) = match q.kind {
                QKind::Stored => (EventKind::Stored, Some(q.target)),
                QKind::Removed | QKind::RemovedMedium => (EventKind::Removed, Some(q.target)),
                QKind::RemovedWithoutKey => (EventKind::Removed, None),
                QKind::Cleared => (EventKind::Cleared, None),
                QKind::UnknownKeyless => (EventKind::Unknown, None),
                QKind::ForeignStored => (EventKind::Stored, None),
                QKind::ForeignRemoved => (EventKind::Removed, None),
            };
            let tenant = match q.kind {
                QKind::Cleared | QKind::UnknownKeyless => q.target as usize,
                QKind::ForeignStored | QKind::ForeignRemoved => 0,
                _ => {
                    let o = &self.objects[q.target as usize];
                    self.pages[o.page as usize].tenant as usize
                }
            };
            ev.kind = kind;
            ev.event_id = Some(event_id);
            ev.timestamp_ms = ms;
            ev.medium = q.medium;
            set_opt(&mut ev.tenant_id, Some(TENANTS[tenant]));
            let key = match q.kind {
                QKind::ForeignStored | QKind::ForeignRemoved => {
                    Some(&*self.foreign_keys[q.target as usize])
                }
                QKind::Stored | QKind::Removed | QKind::RemovedMedium => {
                    obj.map(|o| &*self.objects[o as usize].key)
                }
                _ => None,
            };
            set_opt(&mut ev.object_key, key);
            let group = match (self.opts.group_ids, obj) {
                (true, Some(o)) => {
                    let info = &self.objects[o as usize];
                    self.scratch.clear();
                    self.scratch.push_str("sglang-hicache:");
                    self.scratch
                        .push_str(&info.key[..info.logical_len as usize]);
                    Some(self.scratch.as_str())
                }
                _ => None,
            };
            set_opt(&mut ev.group_id, group);
            let stored = kind == EventKind::Stored;
            match flavor {
                MasterFlavor::Upstream => {
                    ev.dp_rank = None;
                    ev.base_block_idx = stored.then_some(0);
                    ev.session_id = None;
                }
                MasterFlavor::Release0314 => {
                    ev.dp_rank = Some(0);
                    ev.base_block_idx = None;
                    set_opt(&mut ev.session_id, stored.then_some("sim-session-1"));
                }
            }
        }
    }

    /// Returns how long until the next action would be drawn (for scripts that step manually).
    pub fn action_interval(&self) -> (Duration, Duration) {
        self.opts.action_interval
    }
}

/// The lookup hash of an object key.
fn key_hash(key: &str) -> u64 {
    use core::hash::{Hash, Hasher};
    let mut h = crate::util::FxHasher::default();
    key.hash(&mut h);
    h.finish()
}

/// Overwrites an optional string in place, reusing its allocation.
fn set_opt(dst: &mut Option<String>, src: Option<&str>) {
    match (dst.as_mut(), src) {
        (Some(d), Some(s)) => {
            d.clear();
            d.push_str(s);
        }
        (None, Some(s)) => *dst = Some(s.to_owned()),
        (_, None) => *dst = None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Options;
    use hicache_index::decode;

    fn master(seed: u64) -> Master {
        let o = Options::for_seed(seed, Some(crate::options::Preset::Calm), 1000);
        Master::new(o.master.clone(), o.model_specs(), Rng::new(seed))
    }

    #[test]
    fn every_catalogue_layout_is_valid_and_keys_parse_back() {
        for spec in catalogue() {
            let h = PageHash([7; 32]);
            for key in spec.layout.object_keys(&h) {
                let parsed = hicache_index::parse_object_key(&key).expect("keys parse");
                assert_eq!(parsed.page_hash, h);
                assert_eq!(parsed.prefix, spec.layout.key_prefix.as_deref());
            }
        }
    }

    #[test]
    fn published_batches_decode_with_sequences_from_one() {
        let mut m = master(5);
        let mut out = MasterOutput::default();
        let mut now = Instant::ZERO;
        for _ in 0..200 {
            m.step(now, &mut out);
            now = m.next_at().unwrap_or(now).max(now);
        }
        assert!(!out.published.is_empty());
        for (i, p) in out.published.iter().enumerate() {
            assert_eq!(p.seq, i as u64 + 1, "no loss in a calm master");
            let frames: Vec<&[u8]> = p.frames.iter().map(Vec::as_slice).collect();
            let batch = decode(&frames).expect("the master's bytes decode");
            assert_eq!(batch.events.len(), p.events);
            assert!(p.events <= 64);
        }
    }

    #[test]
    fn a_full_queue_drops_the_oldest_and_skips_a_sequence() {
        let o = Options::for_seed(1, Some(crate::options::Preset::Calm), 1000);
        let mut mo = o.master.clone();
        mo.queue_capacity = 2;
        mo.batch_max = 64;
        let mut m = Master::new(mo, o.model_specs(), Rng::new(1));
        let mut out = MasterOutput::default();
        for _ in 0..20 {
            m.act(Instant::ZERO, Action::Put, &mut out);
        }
        assert!(m.stats().queue_drops > 0);
        m.step(Instant::from_millis(100), &mut out);
        let first = out.published.first().expect("a batch");
        assert_eq!(first.seq, 1 + m.stats().queue_drops);
        assert!(out.lost_upto > 0);
    }
}
