//! The master's state: [`Master`] and the flags of its objects. Its methods live by what they
//! do: reading and driving in `mod.rs`, the store in `store.rs`, the publisher in
//! `publisher.rs`, and so on (see the module docs of [`crate::master`]).

use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use hicache_index::{Instant, PageHash};
use hicache_index_wire::{OwnedBatch, OwnedEvent};

use crate::models::ModelSpec;
use crate::options::MasterOptions;
use crate::rng::Rng;
use crate::util::{FxHashMap, IdSet};

use super::clients::Clients;
use super::clock::Clock;
use super::history::MasterStats;
use super::messages::Queued;
use super::old_view::OldView;
use super::pages::{ObjId, ObjInfo, PageId, PageInfo, Request};

pub(super) const MEM: u8 = 1;
pub(super) const DISK: u8 = 2;
/// A memory-only object whose client went silent past its active TTL: the master holds it and
/// lists it nowhere (see `segments.rs`).
pub(super) const HIDDEN: u8 = 4;

/// The master model (see the module docs).
#[derive(Debug)]
pub struct Master {
    pub(super) opts: MasterOptions,
    pub(super) models: Vec<ModelSpec>,
    pub(super) rng: Rng,
    pub(super) pages: Vec<PageInfo>,
    pub(super) page_index: FxHashMap<(u8, u8, PageHash), PageId>,
    pub(super) objects: Vec<ObjInfo>,
    /// Objects of the default tenant by the hash of their key (checked against the key).
    pub(super) default_keys: FxHashMap<u64, ObjId>,
    pub(super) flags: Vec<u8>,
    pub(super) segment: Vec<u8>,
    /// The store clients and their segments ([`MasterOptions::clients`]).
    pub(super) clients: Option<Clients>,
    /// Objects removed by the actions of the other worlds without an event
    /// ([`Master::silent_signals`]).
    pub(super) signalled_removals: u64,
    pub(super) present: Vec<IdSet>,
    pub(super) requests: VecDeque<Rc<Request>>,
    pub(super) prompts: Vec<Vec<Vec<u64>>>,
    pub(super) queue: VecDeque<Queued>,
    pub(super) epoch: u32,
    pub(super) next_seq: u64,
    pub(super) next_event_id: u64,
    pub(super) foreign_keys: Vec<Box<str>>,
    pub(super) foreign_present: IdSet,
    /// The ids of every foreign key ever put, by its text (for `/batch_query_keys`).
    pub(super) foreign_index: FxHashMap<Box<str>, Vec<u32>>,
    /// The time of the call being served (events are stamped with it when queued).
    pub(super) now: Instant,
    pub(super) clock: Clock,
    /// The run before the last restart, as the HTTP side still serves it (see
    /// [`Served::Lagging`](super::http::Served::Lagging)).
    pub(super) old_view: Option<OldView>,
    /// How long the HTTP side lags behind a restart (see [`Master::set_http_lag`]).
    pub(super) http_lag: (Duration, Duration),
    pub(super) run_dropped: u64,
    pub(super) published_ids: u64,
    pub(super) pos: u64,
    pub(super) next_action: Instant,
    pub(super) next_tick: Instant,
    pub(super) down_until: Option<Instant>,
    pub(super) faults: bool,
    pub(super) acting: bool,
    pub(super) stats: MasterStats,
    pub(super) batch: OwnedBatch,
    pub(super) spare_events: Vec<OwnedEvent>,
    pub(super) items: Vec<Queued>,
    pub(super) scratch: String,
}
