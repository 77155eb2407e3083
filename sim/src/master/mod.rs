//! A model of the Mooncake master, faithful to the specification's sections 3 and 4.
//!
//! - **Puts** are SGLang HiCache write-backs: a request's tokens (with realistic prefix sharing:
//!   shared system prompts, multi-turn continuations, branches) are cut into pages, hashed with
//!   [`Layout::page_hashes`](hicache_index::Layout::page_hashes), and every object of each page
//!   the store lacks is put ([`Layout::object_keys`](hicache_index::Layout::object_keys)): one
//!   `stored` event (medium `cpu`) per object.
//! - A **disk replica** emits a second `stored` with medium `disk`. **Evictions** (of one object,
//!   of a page, or to stay under capacity) emit `removed`. A memory replica evicted while a disk
//!   replica remains emits nothing, or `removed` with medium `cpu` when
//!   [`MasterOptions::per_medium_removals`] is on (PR 2876 on); an object evicted from both
//!   media then gets one `removed` per medium, as upstream's `PublishObjectRemoved` sends them.
//! - **Silent removals** emit nothing: batch remove, remove-all of a tenant, a worker segment
//!   going away (memory replicas on it vanish); each moves the master's unmount counter. With
//!   [`MasterOptions::clients`] the store clients' segments go away as the real master's do
//!   (`segments.rs`): closed at once, hidden at a client's active TTL and unmounted after its
//!   suspicion TTL, or back when a stalled client resumes. A restart starts the counters from
//!   zero, as a new process's `/metrics` does.
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
//! - `state.rs`: the master's state ([`Master`]) and the flags of its objects; this file reads
//!   it, drives it and records its changes.
//! - `pages.rs`: the pages, objects and requests the store holds; `store.rs`: the object store
//!   (puts, evictions, silent removals, foreign keys).
//! - `messages.rs`: what the publisher queues and sends, and its status; `publisher.rs`: the
//!   event queue, event ids, sequences and the batches sent.
//! - `history.rs`: the records the oracle learns and what one call produced.
//! - `http.rs`: the HTTP answers (`/kv_events/status`, `/get_all_keys`, `/batch_query_keys`).
//! - `restart.rs`: going down and coming back; `old_view.rs`: the old run's HTTP view while it
//!   lags.
//! - `clock.rs`: the publisher's clock (jumps forward, steps back).
//! - `foreign.rs`: another application's keys (the foreign flood).
//! - `segments.rs`: store clients and their segments (issue 27): puts placed on them, clients
//!   that close, crash, stall and resume without events, and the `/metrics` counters they move;
//!   `clients.rs`: the clients' states and counters.
//! - `tests.rs`: the model's own tests.

use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use hicache_index::{Instant, Medium, Seq, Timestamp};
use hicache_index_wire::OwnedBatch;

use crate::models::{ModelSpec, TENANTS};
use crate::options::{ActionMix, MasterOptions};
use crate::rng::Rng;
use crate::util::{FxHashMap, IdSet};

mod clients;
mod clock;
mod foreign;
mod history;
mod http;
mod messages;
mod old_view;
mod pages;
mod publisher;
mod restart;
mod segments;
mod state;
mod store;

pub use clients::{ClientSignals, ClientStats};
pub use history::{Change, MasterOutput, MasterStats, Record};
pub use http::Served;
pub use messages::{MasterMeta, Published, Status};
pub use pages::{ObjId, ObjInfo, PageId, PageInfo, Request};
pub use state::Master;

use clients::Clients;
use clock::Clock;
use messages::QKind;
use state::{DISK, HIDDEN, MEM};

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

impl Master {
    /// Makes a master serving `models`; it acts from time zero.
    pub fn new(opts: MasterOptions, models: Vec<ModelSpec>, rng: Rng) -> Master {
        // The clock draws from a stream of its own: a steady clock draws nothing.
        let clock = Clock::new(&opts, rng.fork(0xc10c));
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
        // The clients draw from a stream of their own.
        let clients = opts
            .clients
            .clone()
            .map(|c| Clients::new(c, rng.fork(0x5e6)));
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
            clients,
            signalled_removals: 0,
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

    /// Reports whether `obj` is present (true state: held and listed).
    pub fn is_present(&self, obj: ObjId) -> bool {
        let f = self.flags[obj as usize];
        f != 0 && f & HIDDEN == 0
    }

    /// Returns how many objects the actions of the other worlds removed without an event (each
    /// moves the simulated master's unmount counter, as a segment leaving does).
    pub fn silent_signals(&self) -> u64 {
        self.signalled_removals
    }

    // ---- recording ----

    /// Records `change` at the next history position, and returns that position.
    pub(super) fn record(&mut self, change: Change, out: &mut MasterOutput) -> u64 {
        self.pos += 1;
        out.records.push(Record {
            pos: self.pos,
            change,
        });
        self.pos
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
        let clients = self
            .clients
            .as_ref()
            .and_then(|c| c.next_at(self.faults && self.acting));
        tick.into_iter().chain(action).chain(clients).min()
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
        self.step_clients(now, out);
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
                        if self.is_present(o) {
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
                self.drop_hidden(|m, o| m.tenant_of(o) as usize == tenant);
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
                self.drop_hidden(|m, o| m.tenant_of(o) as usize == tenant);
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
                self.drop_hidden(|m, o| m.tenant_of(o) as usize == tenant);
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
mod tests;
