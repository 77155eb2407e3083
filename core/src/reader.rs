//! The read view of a session: everything a query reads, readable while the session changes,
//! without a lock.
//!
//! A [`Reader`] (from [`crate::Session::reader`]) is `Sync` and cheap to share (`Arc`). It reads
//! what the session writes into it: the page table (one atomic read of a slot per page, see
//! [`crate::index`]'s shared table), the namespaces and their suffixes (set once, replaced whole by
//! a clear), the layouts in force (a versioned snapshot: the configured layouts and the workers'
//! verdicts, replaced whole when a verdict changes, see [`crate::layout::LayoutVotes`]), and one
//! state word holding the session's health, whether the last snapshot is unproven, whether a change
//! under way that queries must read again after (a clear, a batch of doubt), and the table's
//! generation. A query reads the state word before its first probe and again after its last: when
//! it moved (a clear, a batch holding an event that names no object, a flag that changed), the
//! answer may mix two states and is thrown away. When only removals overlapped it, the query checks
//! that the slot of every page it claims still holds what it read (see [`crate::index`]'s shared
//! table), and keeps the answer if so. Otherwise it asks again, and after [`ATTEMPTS`] readings
//! answers [`QueryError::Busy`], on which the caller asks under the session's lock
//! ([`crate::Session::query`]). A reader never waits for the writer: a writer preempted in the
//! middle of a change makes a query read again and then ask under the lock, never claim a page the
//! session would not claim.
//!
//! Queries are `&self`, allocate nothing, and answer exactly what the index held at one point
//! of the stream it applied: between two calls into the session (what [`crate::Session::query`]
//! answers then; the session answers through its own reader), or between two events of the
//! input under way.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use spin::RwLock;

use crate::effect::Health;
use crate::error::QueryError;
use crate::hash::{DigestMemo, PageHashes};
use crate::index::shared::{Claims, PageTable, Shared, Still};
use crate::layout::{Layout, LayoutVotes, ModelVerdict};
use crate::query::{Hits, LazyHashes, Lookup, MapCover, PageSource, Pages, QueryPlan, Tokens};
use crate::session::ModelLayout;

/// How many times a query reads the index before it answers [`QueryError::Busy`], when the state keeps
/// moving under it.
pub const ATTEMPTS: usize = 3;

/// How many times a query reads the state word again while a bracketed change (a clear, a batch
/// of doubt) is under
/// way, per attempt, before it counts the attempt as lost.
const CHANGE_SPINS: usize = 256;

/// The unproven bit of the state word's flags (the low three bits hold the health).
const UNPROVEN: u32 = 1 << 3;

/// How many times a query tries to take the layouts when the writer is swapping them (a swap
/// is a pointer store), before it answers as if the state had kept moving.
const LAYOUT_ATTEMPTS: usize = 64;

/// The layouts in force at one generation: the configured ones and the workers' verdicts. A
/// query plans and probes under one snapshot, so it never mixes two generations.
#[derive(Debug)]
pub(crate) struct Layouts {
    configured: Vec<ModelLayout>,
    votes: LayoutVotes,
}

impl Layouts {
    /// Returns the generation of the workers' verdicts (see [`QueryPlan::layouts`]).
    fn generation(&self) -> u64 {
        self.votes.generation()
    }

    fn layout_for(&self, model: Option<&str>) -> Result<&Layout, QueryError> {
        resolve(&self.configured, &self.votes, model)
    }
}

/// Returns the layout a lookup for `model` uses: a configured one, else the one its workers
/// agree on (see [`crate::Session::layout_for`]).
pub(crate) fn resolve<'a>(
    configured: &'a [ModelLayout],
    votes: &'a LayoutVotes,
    model: Option<&str>,
) -> Result<&'a Layout, QueryError> {
    let configured_for = |m: Option<&str>| {
        configured
            .iter()
            .find(|ml| ml.model.as_deref() == m)
            .map(|ml| &ml.layout)
    };
    let advertised = |m: &str| match votes.verdict(m) {
        Some(ModelVerdict::Agreed(layout)) => Ok(layout),
        Some(ModelVerdict::Conflict { reason }) => Err(QueryError::LayoutConflict {
            reason: reason.clone(),
        }),
        Some(ModelVerdict::NoLayout { reason }) => Err(QueryError::NoLayout {
            reason: reason.clone(),
        }),
        None => Err(QueryError::UnknownModel),
    };
    match model {
        Some(m) => configured_for(Some(m)).map_or_else(|| advertised(m), Ok),
        None => {
            if let Some(layout) = configured_for(None) {
                return Ok(layout);
            }
            let mut names = configured
                .iter()
                .filter_map(|ml| ml.model.as_deref())
                .chain(
                    votes
                        .verdicts()
                        .map(|(m, _)| m)
                        .filter(|m| configured_for(Some(m)).is_none()),
                );
            match (names.next(), names.next()) {
                (Some(only), None) => {
                    configured_for(Some(only)).map_or_else(|| advertised(only), Ok)
                }
                _ => Err(QueryError::NoDefaultLayout),
            }
        }
    }
}

/// A session's read view (see the module docs).
pub struct Reader {
    index: Arc<Shared>,
    /// The layouts in force, replaced whole by the writer (held only for the pointer swap).
    layouts: RwLock<Arc<Layouts>>,
    /// How many times the writer swapped the layouts: bumped after each swap, so that a query
    /// that saw a count took the layouts of that swap or a later one, and a query whose count
    /// moved reads again (a plain load, where taking the lock again would write its word).
    swaps: AtomicU32,
    queries: AtomicUsize,
    hit_pages: AtomicUsize,
}

impl core::fmt::Debug for Reader {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Reader")
            .field("health", &self.health())
            .field("queries", &self.queries.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

fn health_bits(health: Health) -> u32 {
    match health {
        Health::Disconnected => 0,
        Health::Connecting => 1,
        Health::Live => 2,
        Health::Recovering => 3,
        Health::EventsDisabled => 4,
    }
}

fn health_of(flags: u32) -> Health {
    match flags & 7 {
        1 => Health::Connecting,
        2 => Health::Live,
        3 => Health::Recovering,
        4 => Health::EventsDisabled,
        _ => Health::Disconnected,
    }
}

impl Reader {
    /// Makes the view of an index with the configured layouts (the session's, at its start).
    pub(crate) fn new(index: Arc<Shared>, configured: Vec<ModelLayout>) -> Reader {
        Reader {
            index,
            layouts: RwLock::new(Arc::new(Layouts {
                configured,
                votes: LayoutVotes::new(),
            })),
            swaps: AtomicU32::new(0),
            queries: AtomicUsize::new(0),
            hit_pages: AtomicUsize::new(0),
        }
    }

    fn pages(&self) -> &PageTable {
        &self.index.pages
    }

    /// Publishes the session's health and whether its last snapshot is unproven (the writer
    /// only). A change makes every query under way read again.
    pub(crate) fn publish(&self, health: Health, unproven: bool) {
        let flags = health_bits(health) | if unproven { UNPROVEN } else { 0 };
        self.pages().set_flags(flags);
    }

    /// Publishes the layouts in force when the workers' verdicts moved to a new generation (the
    /// writer only).
    pub(crate) fn publish_layouts(&self, configured: &[ModelLayout], votes: &LayoutVotes) {
        if self.layouts.read().generation() == votes.generation() {
            return;
        }
        let fresh = Arc::new(Layouts {
            configured: configured.to_vec(),
            votes: votes.clone(),
        });
        let old = core::mem::replace(&mut *self.layouts.write(), fresh);
        let swaps = self.swaps.load(Ordering::Relaxed);
        self.swaps.store(swaps.wrapping_add(1), Ordering::Release);
        // The old snapshot is freed here, outside the lock (or by the last query holding it).
        drop(old);
    }

    /// Returns the layouts in force and the swap count read before them; `None` when the writer
    /// kept swapping them.
    fn layouts(&self) -> Option<(Arc<Layouts>, u32)> {
        for _ in 0..LAYOUT_ATTEMPTS {
            let swaps = self.swaps.load(Ordering::Acquire);
            if let Some(layouts) = self.layouts.try_read() {
                return Some((Arc::clone(&layouts), swaps));
            }
            core::hint::spin_loop();
        }
        None
    }

    /// Returns the session's health as last published.
    pub fn health(&self) -> Health {
        health_of(PageTable::flags_of(self.pages().state()))
    }

    /// Answers how many leading pages of the lookup are fully present (counted in
    /// [`crate::Counters::queries`]). Hashing stops at the first page that misses.
    /// [`QueryError::Busy`] when the writer kept changing what the query reads: the caller asks
    /// again under the session's lock ([`crate::Session::query`]), which always answers.
    pub fn query(&self, lookup: &Lookup<'_>) -> Result<Hits, QueryError> {
        let hits = self.answer(None, lookup, None, None, MapCover::UntilMiss)?;
        self.count_answer(&hits);
        Ok(hits)
    }

    /// Answers like [`Reader::query`] and also fills `map[i]` with whether page `i` has every
    /// object of every pool; pages past the map's length are not examined.
    pub fn query_map(&self, lookup: &Lookup<'_>, map: &mut [bool]) -> Result<Hits, QueryError> {
        let hits = self.answer(None, lookup, None, Some(map), MapCover::Every)?;
        self.count_answer(&hits);
        Ok(hits)
    }

    /// Answers like [`Reader::query`] and fills `map[i]` for the pages checked, until the first
    /// that misses (that one included; the rest of the map is false): the map of what the
    /// prefix cost, no page hashed after the miss.
    pub fn query_prefix_map(
        &self,
        lookup: &Lookup<'_>,
        map: &mut [bool],
    ) -> Result<Hits, QueryError> {
        let hits = self.answer(None, lookup, None, Some(map), MapCover::UntilMiss)?;
        self.count_answer(&hits);
        Ok(hits)
    }

    /// Plans a lookup: how its tokens are hashed under the layout it resolves to, and the
    /// generation of the layouts in force (see [`crate::Session::plan`]).
    pub fn plan(&self, lookup: &Lookup<'_>) -> Result<QueryPlan, QueryError> {
        let (layouts, _) = self.layouts().ok_or(QueryError::Busy)?;
        plan_under(&layouts, lookup)
    }

    /// Answers for page hashes computed under `plan`, under the very layouts it was planned
    /// with: [`QueryError::PlanChanged`] if the layouts in force are of another generation; not
    /// counted (see [`Reader::count_answer`]).
    pub fn probe(
        &self,
        plan: QueryPlan,
        lookup: &Lookup<'_>,
        map: Option<&mut [bool]>,
    ) -> Result<Hits, QueryError> {
        self.answer(Some(plan), lookup, None, map, MapCover::Every)
    }

    /// Answers a token lookup planned as `plan`, hashing its pages as the probe reaches them
    /// (`hashes`, made under the same plan): with no map, or a map covering
    /// [`MapCover::UntilMiss`], no page after the first miss is hashed or probed, whatever the
    /// request's length; a reading done again (the writer moved) hashes no page twice. Not
    /// counted (see [`Reader::count_answer`]); [`QueryError::PlanChanged`] as for
    /// [`Reader::probe`] (make new `hashes` under a new plan). On [`QueryError::Busy`] the
    /// caller asks again with the same `hashes` under the session's lock.
    pub fn probe_lazily<M: DigestMemo + ?Sized>(
        &self,
        plan: QueryPlan,
        lookup: &Lookup<'_>,
        hashes: &mut LazyHashes<'_, '_, '_, M>,
        map: Option<&mut [bool]>,
        cover: MapCover,
    ) -> Result<Hits, QueryError> {
        self.answer(Some(plan), lookup, Some(hashes), map, cover)
    }

    /// Counts one query answered by probes in [`crate::Counters::queries`] and
    /// [`crate::Counters::hit_pages`].
    pub fn count_answer(&self, hits: &Hits) {
        self.queries.fetch_add(1, Ordering::Relaxed);
        self.hit_pages
            .fetch_add(hits.prefix_pages, Ordering::Relaxed);
    }

    /// Returns the queries counted and the pages they hit.
    pub(crate) fn counted(&self) -> (usize, usize) {
        (
            self.queries.load(Ordering::Relaxed),
            self.hit_pages.load(Ordering::Relaxed),
        )
    }

    /// Answers a lookup, uncounted, under one snapshot of the layouts (the one `plan` was made
    /// under, if given): read, check that the state held, else read again; [`QueryError::Busy`]
    /// when it kept moving. `lazy`, if given, supplies the token lookup's pages (hashed under
    /// `plan` as they are reached, and kept across readings).
    fn answer(
        &self,
        plan: Option<QueryPlan>,
        lookup: &Lookup<'_>,
        mut lazy: Option<&mut dyn PageSource>,
        mut map: Option<&mut [bool]>,
        cover: MapCover,
    ) -> Result<Hits, QueryError> {
        if let Some(map) = map.as_deref_mut() {
            map.fill(false);
        }
        let mut state = self.pages().state();
        let mut claims = Claims::new();
        for _ in 0..ATTEMPTS {
            claims.clear();
            // The layouts are taken after the state and checked again with it at the end: a
            // worker that puts a layout in doubt moves no page, yet the pages stored after it
            // are not to be read under the old layout.
            let (layouts, swaps) = self.layouts().ok_or(QueryError::Busy)?;
            if let Some(plan) = plan {
                if plan_under(&layouts, lookup)? != plan {
                    return Err(QueryError::PlanChanged);
                }
            }
            let layout = layouts.layout_for(lookup.model)?;
            let total = match lookup.pages {
                Pages::Hashes(hashes) => hashes.len(),
                Pages::Tokens { tokens, .. } => {
                    crate::hash::page_count(tokens.len(), layout.page_size, layout.eagle)
                }
            };
            // A bracketed change is under way: wait for its end a little, without a lock.
            for _ in 0..CHANGE_SPINS {
                if !PageTable::is_changing(state) {
                    break;
                }
                core::hint::spin_loop();
                state = self.pages().state();
            }
            if PageTable::is_changing(state) {
                state = self.pages().state();
                continue;
            }
            let flags = PageTable::flags_of(state);
            let mut hits = Hits {
                prefix_pages: 0,
                total_pages: total,
                pages_checked: 0,
                memory_pages: 0,
                disk_only_pages: 0,
                trust: health_of(flags),
            };
            if flags & UNPROVEN != 0 {
                // The snapshot may be of another run of the master than the stream: claim nothing.
                if let Some(map) = map.as_deref_mut() {
                    map.fill(false);
                }
                return Ok(hits);
            }
            let tenant = lookup.tenant;
            let page_map = map.as_deref_mut();
            let claimed = Some(&mut claims);
            let found = match (lazy.as_deref_mut(), lookup.pages) {
                (Some(source), Pages::Tokens { .. }) => {
                    let pages = (0..).map_while(|i| source.page(i));
                    self.index
                        .query(tenant, layout, pages, page_map, claimed, cover)
                }
                (_, Pages::Hashes(hashes)) => {
                    let hashes = hashes.iter().copied();
                    self.index
                        .query(tenant, layout, hashes, page_map, claimed, cover)
                }
                (
                    None,
                    Pages::Tokens {
                        tokens: Tokens::U32(t),
                        namespace,
                    },
                ) => {
                    let pages = PageHashes::new(t, layout.page_size, layout.eagle, namespace);
                    self.index
                        .query(tenant, layout, pages, page_map, claimed, cover)
                }
                (
                    None,
                    Pages::Tokens {
                        tokens: Tokens::U64(t),
                        namespace,
                    },
                ) => {
                    let pages = PageHashes::new(t, layout.page_size, layout.eagle, namespace);
                    self.index
                        .query(tenant, layout, pages, page_map, claimed, cover)
                }
            };
            let stands = match self.pages().still(state) {
                Still::Yes => true,
                // Removals overlapped the query: its pages stand if none of their slots was
                // written since it read them (all were then in the table together).
                Still::IfUnchanged => claims.unchanged(self.pages()),
                Still::No => false,
            };
            if stands && self.swaps.load(Ordering::Acquire) == swaps {
                hits.prefix_pages = found.prefix_pages;
                hits.pages_checked = found.pages_checked;
                hits.memory_pages = found.memory_pages;
                hits.disk_only_pages = found.disk_only_pages;
                return Ok(hits);
            }
            if let Some(map) = map.as_deref_mut() {
                map.fill(false);
            }
            state = self.pages().state();
        }
        // The state kept moving: the caller asks again under the session's lock.
        Err(QueryError::Busy)
    }
}

/// Plans `lookup` under one snapshot of the layouts.
fn plan_under(layouts: &Layouts, lookup: &Lookup<'_>) -> Result<QueryPlan, QueryError> {
    let layout = layouts.layout_for(lookup.model)?;
    Ok(QueryPlan {
        page_size: layout.page_size,
        eagle: layout.eagle,
        layouts: layouts.generation(),
    })
}
