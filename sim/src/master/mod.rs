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
//!   come back in the key list verbatim. **A foreign flood** ([`Action::ForeignFlood`]): another
//!   application puts many keys of its own, of every shape, several times more than the SGLang
//!   objects. **Unknown keyless events**: an event of a type the decoder does not know, without
//!   a key, is a tenant-wide removal of a future master.
//! - **Twin runs** ([`MasterOptions::twin_batch`]): every batch has one size, so every run
//!   numbers sequences and event ids alike. **The publisher's clock** may jump forward and be
//!   stepped back ([`MasterOptions::clock_jumps_per_sec`]): only the batch timestamps move.
//! - The **HTTP side**: [`Master::status`] (`GET /kv_events/status`), [`Master::all_keys_body`]
//!   (`GET /get_all_keys`, default tenant, verbatim lines, in the master's hash order with
//!   [`MasterOptions::hashed_key_list`]) and [`Master::batch_query`], each as of the run that
//!   answers ([`Master::serving`]): after a restart, with
//!   [`crate::options::HttpOptions::lag_after_restart`], the old run still answers for a
//!   while ([`Served::Lagging`]).
//!
//! Every state change is reported, in order, as a [`Record`] with a global *history position*
//! (a counter that never restarts): events when they are created (a later queue drop does not
//! undo the change), silent removals, and restarts. The oracle is built from these records.
//!
//! # Files
//! - `store.rs`: the object store (pages, objects, requests, puts, evictions, silent removals,
//!   foreign keys).
//! - `publisher.rs`: the event queue, event ids, sequences and the batches sent.
//! - `history.rs`: the records the oracle learns and what one call produced.
//! - `http.rs`: the HTTP answers (`/kv_events/status`, `/get_all_keys`, `/batch_query_keys`).
//! - `restart.rs`: going down and coming back, and the old run's HTTP view while it lags.
//! - `clock.rs`: the publisher's clock (jumps forward, steps back).
//! - `foreign.rs`: another application's keys (the foreign flood).

use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use hicache_index::{Instant, Medium, PageHash, Seq, Timestamp};

use crate::encode::{OwnedBatch, OwnedEvent};
use crate::models::{ModelSpec, TENANTS};
use crate::options::{ActionMix, MasterOptions};
use crate::rng::Rng;
use crate::util::{FxHashMap, IdSet};

mod clock;
mod foreign;
mod history;
mod http;
mod publisher;
mod restart;
mod store;

pub use history::{Change, MasterOutput, MasterStats, Record};
pub use http::Served;
pub use publisher::{Published, Status};
pub use store::{ObjId, ObjInfo, PageId, PageInfo, Request};

use publisher::{QKind, Queued};

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
    /// Another application's client puts a batch of keys of its own (see
    /// [`ActionMix::foreign_flood`]), removing some once it holds its share.
    ForeignFlood,
}

const MEM: u8 = 1;
const DISK: u8 = 2;

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
    /// The ids of every foreign key ever put, by its text (for `/batch_query_keys`).
    foreign_index: FxHashMap<Box<str>, Vec<u32>>,
    /// The time of the call being served (events are stamped with it when queued).
    now: Instant,
    clock: clock::Clock,
    /// The run before the last restart, as the HTTP side still serves it (see
    /// [`Served::Lagging`]).
    old_view: Option<restart::OldView>,
    /// How long the HTTP side lags behind a restart (see [`Master::set_http_lag`]).
    http_lag: (Duration, Duration),
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
        // The clock draws from a stream of its own: a steady clock draws nothing.
        let clock = clock::Clock::new(&opts, rng.fork(0xc10c));
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
            foreign_index: FxHashMap::default(),
            now: Instant::ZERO,
            clock,
            old_view: None,
            http_lag: (Duration::ZERO, Duration::ZERO),
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

    // ---- driving ----

    /// Turns faults (silent removals, restarts, queue overflow, failed sends...) on or off; off,
    /// the queue never overflows and the action mix is [`ActionMix::quiet`].
    pub fn set_faults(&mut self, on: bool) {
        self.faults = on;
        if !on {
            self.clock.steady();
        }
    }

    /// Returns how often the publisher's clock jumped forward and was stepped back.
    pub fn clock_changes(&self) -> (u64, u64) {
        (self.clock.jumps, self.clock.steps_back)
    }

    /// Stops or resumes actions; the publisher keeps draining the queue.
    pub fn set_acting(&mut self, on: bool) {
        self.acting = on;
    }

    /// Reports whether the master acts on its own (puts, evictions...).
    pub fn is_acting(&self) -> bool {
        self.acting
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

    /// Sets the capacity of the event queue from now on (a burst against a small queue).
    pub fn set_queue_capacity(&mut self, capacity: usize) {
        self.opts.queue_capacity = capacity;
    }

    /// Does what is due at `now`: comes back from a restart, publishes, acts.
    pub fn step(&mut self, now: Instant, out: &mut MasterOutput) {
        self.now = now;
        if let Some(up) = self.down_until {
            if now < up {
                return;
            }
            self.came_up(now);
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
            (mix.foreign_flood, Action::ForeignFlood),
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
        self.now = now;
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
            Action::ForeignFlood => self.foreign_flood(out),
            Action::UnreadableRemoval => {
                if let Some(obj) = self.pick_present(|_| true) {
                    self.take_away(obj);
                    self.emit(QKind::RemovedWithoutKey, obj, Some(Medium::Cpu), out);
                }
            }
        }
    }

    /// Returns how long until the next action would be drawn (for scripts that step manually).
    pub fn action_interval(&self) -> (Duration, Duration) {
        self.opts.action_interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Options;
    use hicache_index::decode;

    fn calm(seed: u64) -> Options {
        let none = Some(crate::options::Worlds::NONE);
        Options::for_seed_with(seed, Some(crate::options::Preset::Calm), 1000, none)
    }

    fn master(seed: u64) -> Master {
        let o = calm(seed);
        Master::new(o.master.clone(), o.model_specs(), Rng::new(seed))
    }

    /// Steps `m` from `now` for `d`, acting; returns the time reached.
    fn run_for(m: &mut Master, mut now: Instant, d: Duration, out: &mut MasterOutput) -> Instant {
        let until = now + d;
        while now < until {
            m.step(now, out);
            now = m
                .next_at()
                .unwrap_or(until)
                .max(now + Duration::from_micros(1));
        }
        now
    }

    #[test]
    fn twin_runs_number_their_batches_alike() {
        let o = calm(3);
        let mut mo = o.master.clone();
        mo.twin_batch = 4;
        let mut m = Master::new(mo, o.model_specs(), Rng::new(3));
        let mut out = MasterOutput::default();
        let now = run_for(&mut m, Instant::ZERO, Duration::from_millis(30), &mut out);
        let old: Vec<Published> = core::mem::take(&mut out.published);
        m.act(now, Action::Restart, &mut out);
        let up = out.restarted_until.expect("a restart");
        run_for(&mut m, up, Duration::from_millis(30), &mut out);
        let shape = |p: &Published| (p.seq, p.first_event_id, p.events);
        assert!(old.len() > 3 && out.published.len() > 3);
        for (a, b) in old.iter().zip(&out.published) {
            assert_eq!(
                shape(a),
                shape(b),
                "the new run numbers its batches as the old one"
            );
            assert_eq!(a.events, 4, "full batches only while faults are on");
        }
        assert_ne!(old[0].epoch, out.published[0].epoch);
    }

    #[test]
    fn a_lagging_http_side_serves_the_old_run_until_its_lag_ends() {
        let mut m = master(4);
        m.set_http_lag((Duration::from_millis(50), Duration::from_millis(50)));
        let mut out = MasterOutput::default();
        let now = run_for(&mut m, Instant::ZERO, Duration::from_millis(30), &mut out);
        let mut before = Vec::new();
        m.all_keys_body(&mut before);
        let status = m.status();
        assert!(!before.is_empty() && status.published_batches > 0);
        m.act(now, Action::Restart, &mut out);
        let up = out.restarted_until.expect("a restart");
        // While down and for the lag after it comes up, the old run answers.
        for at in [now, up, up + Duration::from_millis(49)] {
            assert_eq!(m.serving(at), Some(Served::Lagging));
        }
        let mut body = Vec::new();
        m.all_keys_as(Served::Lagging, &mut body);
        assert_eq!(body, before, "the old run's key list");
        assert_eq!(m.status_as(Served::Lagging), status);
        let keys: Vec<String> = hicache_index::snapshot_lines(&before)
            .map(|l| String::from_utf8(l.to_vec()).expect("utf-8"))
            .collect();
        assert!(m
            .batch_query_as(Served::Lagging, &keys)
            .iter()
            .all(|&ok| ok));
        assert!(m
            .batch_query_as(Served::Current, &keys)
            .iter()
            .all(|&ok| !ok));
        m.step(up, &mut out);
        assert_eq!(
            m.serving(up + Duration::from_millis(50)),
            Some(Served::Current)
        );
        assert_eq!(m.served_epoch(Served::Lagging) + 1, m.epoch());
    }

    #[test]
    fn the_foreign_flood_outnumbers_the_sglang_objects_and_sits_among_them() {
        let o = calm(6);
        let mut mo = o.master.clone();
        mo.foreign_per_object = 5;
        mo.hashed_key_list = true;
        let mut m = Master::new(mo, o.model_specs(), Rng::new(6));
        let mut out = MasterOutput::default();
        for _ in 0..30 {
            m.act(Instant::ZERO, Action::Put, &mut out);
        }
        for _ in 0..80 {
            m.act(Instant::ZERO, Action::ForeignFlood, &mut out);
        }
        let (sglang, foreign) = (m.default_objects(), m.foreign_count_as(Served::Current));
        assert!(
            sglang > 0 && foreign >= 3 * sglang,
            "{foreign} foreign, {sglang} sglang"
        );
        assert!(foreign <= 5 * sglang.max(16));
        let mut body = Vec::new();
        m.all_keys_body(&mut body);
        let lines: Vec<&[u8]> = hicache_index::snapshot_lines(&body).collect();
        let is_key = |l: &[u8]| {
            core::str::from_utf8(l)
                .ok()
                .and_then(|k| m.find_object(0, k))
                .is_some_and(|o| m.is_present(o))
        };
        // SGLang lines among the foreign ones, not first: some follow a foreign line.
        let after_foreign = lines
            .windows(2)
            .filter(|w| !is_key(w[0]) && is_key(w[1]))
            .count();
        assert!(after_foreign > sglang / 2, "{after_foreign} of {sglang}");
        assert!(
            lines.len() > sglang + foreign,
            "keys holding a \\n make more lines than keys"
        );
        let flood: Vec<String> = m.foreign_keys[..50].iter().map(|k| k.to_string()).collect();
        let present = m.batch_query(&flood);
        for (k, ok) in flood.iter().zip(present) {
            let id = m.foreign_index[k.as_str()][0];
            assert_eq!(ok, m.foreign_present.contains(id), "{k:?}");
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
        let o = calm(1);
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
