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
use crate::hash::{page_count, DigestMemo, Namespace, NoMemo, PageHash, PageHashes};
use crate::index::shared::{Claims, PageTable, Shared, SlotAt, Spill, Still, FEW_CLAIMS};
use crate::layout::ModelLayout;
use crate::layout::{Layout, LayoutVotes, ModelVerdict};
use crate::query::{Hits, Lookup, MapCover, Pages, Tokens};

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
    /// Returns the generation of the workers' verdicts.
    fn generation(&self) -> u64 {
        self.votes.generation()
    }

    fn layout_for(&self, model: Option<&str>) -> Result<&Layout, QueryError> {
        resolve(&self.configured, &self.votes, model)
    }
}

/// Returns the layout a lookup for `model` uses: a configured one, else the one its workers
/// agree on (see [`crate::Models::layout_for`]).
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
        Health::Reconciling => 5,
    }
}

fn health_of(flags: u32) -> Health {
    match flags & 7 {
        1 => Health::Connecting,
        2 => Health::Live,
        3 => Health::Recovering,
        4 => Health::EventsDisabled,
        5 => Health::Reconciling,
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
        self.ask(lookup, &NoMemo, None, None, MapCover::UntilMiss)
            .answer()
    }

    /// Answers like [`Reader::query`] and also fills `map[i]` with whether page `i` has every
    /// object of every pool; pages past the map's length are not examined.
    pub fn query_map(&self, lookup: &Lookup<'_>, map: &mut [bool]) -> Result<Hits, QueryError> {
        self.ask(lookup, &NoMemo, None, Some(map), MapCover::Every)
            .answer()
    }

    /// Answers like [`Reader::query`] and fills `map[i]` for the pages checked, until the first
    /// that misses (that one included; the rest of the map is false): the map of what the
    /// prefix cost, no page hashed after the miss.
    pub fn query_prefix_map(
        &self,
        lookup: &Lookup<'_>,
        map: &mut [bool],
    ) -> Result<Hits, QueryError> {
        self.ask(lookup, &NoMemo, None, Some(map), MapCover::UntilMiss)
            .answer()
    }

    /// Prepares a query as a driver asks it: a token lookup's pages are hashed through `memo`
    /// as the probe reaches them and kept in `kept` (cleared here; reuse one buffer per thread
    /// so that a query does not allocate), `map`, if given, is filled as `cover` says. Nothing
    /// is read before [`Query::answer`].
    ///
    /// With no map, or a map covering [`MapCover::UntilMiss`], no page after the first miss is
    /// hashed or probed, whatever the request's length. Without `kept`, a reading done again
    /// hashes again from the first page.
    pub fn ask<'q, M: DigestMemo + ?Sized>(
        &'q self,
        lookup: &'q Lookup<'q>,
        memo: &'q M,
        kept: Option<&'q mut Vec<PageHash>>,
        map: Option<&'q mut [bool]>,
        cover: MapCover,
    ) -> Query<'q, M> {
        let pages = match lookup.pages {
            Pages::Tokens { tokens, namespace } => {
                Some(TokenPages::new(tokens, namespace, memo, kept))
            }
            Pages::Hashes(_) => None,
        };
        Query {
            reader: self,
            lookup,
            pages,
            map,
            cover,
        }
    }

    /// Reports whether the index holds the object `key` of `tenant` (one physical key, on any
    /// medium; a suspect is not held): the object-level question the judges of tests and simulators
    /// ask to compare the index with the master. Not counted as a query, and it changes nothing
    /// (not which page is evicted next).
    pub fn holds_object(&self, tenant: &str, key: &str) -> bool {
        self.index.holds_object(tenant, key)
    }

    /// Returns the queries counted and the pages they hit.
    pub(crate) fn counted(&self) -> (usize, usize) {
        (
            self.queries.load(Ordering::Relaxed),
            self.hit_pages.load(Ordering::Relaxed),
        )
    }

    /// Answers a lookup: each reading takes the layouts in force (a token lookup's pages,
    /// from `tokens`, are hashed again only if the page shape changed), probes, and checks that
    /// the state held; else it reads again, and answers [`QueryError::Busy`] when the state
    /// kept moving. Counted once it answers.
    fn answer(
        &self,
        lookup: &Lookup<'_>,
        tokens: Option<&mut dyn PageSource>,
        map: Option<&mut [bool]>,
        cover: MapCover,
    ) -> Result<Hits, QueryError> {
        let hits = self.read(lookup, tokens, map, cover)?;
        self.queries.fetch_add(1, Ordering::Relaxed);
        self.hit_pages
            .fetch_add(hits.prefix_pages, Ordering::Relaxed);
        Ok(hits)
    }

    /// Reads the index for [`Reader::answer`], uncounted.
    fn read(
        &self,
        lookup: &Lookup<'_>,
        mut tokens: Option<&mut dyn PageSource>,
        mut map: Option<&mut [bool]>,
        cover: MapCover,
    ) -> Result<Hits, QueryError> {
        if let Some(map) = map.as_deref_mut() {
            map.fill(false);
        }
        let mut state = self.pages().state();
        for _ in 0..ATTEMPTS {
            // The layouts are taken after the state and checked again with it at the end: a
            // worker that puts a layout in doubt moves no page, yet the pages stored after it
            // are not to be read under the old layout.
            let (layouts, swaps) = self.layouts().ok_or(QueryError::Busy)?;
            let layout = layouts.layout_for(lookup.model)?;
            let total = match lookup.pages {
                Pages::Hashes(hashes) => hashes.len(),
                Pages::Tokens { tokens, .. } => {
                    page_count(tokens.len(), layout.page_size, layout.eagle)
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
            // A query claims at most its pages: it zeroes a short buffer, and a longer one
            // only once its claims outgrow the short one.
            let mut few = [SlotAt::default(); FEW_CLAIMS];
            let mut spill: Spill = None;
            let mut claims = if total <= FEW_CLAIMS {
                Claims::new(&mut few)
            } else {
                Claims::spilling(&mut few, &mut spill)
            };
            let claimed = Some(&mut claims);
            let found = match (tokens.as_deref_mut(), lookup.pages) {
                (_, Pages::Hashes(hashes)) => {
                    let hashes = hashes.iter().copied();
                    self.index
                        .query(tenant, layout, hashes, page_map, claimed, cover)
                }
                (Some(source), Pages::Tokens { .. }) => {
                    source.reshape(Shape::of(layout));
                    let pages = (0..).map_while(|i| source.page(i));
                    self.index
                        .query(tenant, layout, pages, page_map, claimed, cover)
                }
                (None, Pages::Tokens { .. }) => {
                    unreachable!("a token lookup is asked with its pages (Reader::ask)")
                }
            };
            let stands = match self.pages().still(state) {
                Still::Yes => true,
                // Removals overlapped the query: its pages stand if none of their slots was
                // written since it read them (all were then in the table together).
                Still::IfUnchanged => claims.unchanged(|at| self.pages().unchanged(at)),
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

/// One query as a driver asks it ([`Reader::ask`]): its lookup, its map, and the pages it
/// hashed so far, kept across its readings.
pub struct Query<'q, M: DigestMemo + ?Sized> {
    reader: &'q Reader,
    lookup: &'q Lookup<'q>,
    pages: Option<TokenPages<'q, M>>,
    map: Option<&'q mut [bool]>,
    cover: MapCover,
}

impl<M: DigestMemo + ?Sized> Query<'_, M> {
    /// Answers, counted in [`crate::Counters::queries`] and [`crate::Counters::hit_pages`].
    /// A layout put in force while the query reads makes it read again under the new one
    /// (hashing again only if the page shape changed). On [`QueryError::Busy`] (the writer kept
    /// changing what the query read) the caller SHOULD call it again with the session's
    /// writer held still (under its lock): the pages already hashed are not hashed again, and
    /// the query then answers.
    pub fn answer(&mut self) -> Result<Hits, QueryError> {
        let pages = self.pages.as_mut().map(|p| p as &mut dyn PageSource);
        self.reader
            .answer(self.lookup, pages, self.map.as_deref_mut(), self.cover)
    }
}

impl<M: DigestMemo + ?Sized> core::fmt::Debug for Query<'_, M> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Query")
            .field("lookup", self.lookup)
            .field("cover", &self.cover)
            .finish_non_exhaustive()
    }
}

/// How a token lookup's pages are hashed: the page size and mode of the layout it resolves to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shape {
    page_size: u32,
    eagle: bool,
}

impl Shape {
    fn of(layout: &Layout) -> Shape {
        Shape {
            page_size: layout.page_size,
            eagle: layout.eagle,
        }
    }
}

/// Pages a reading probes in order, by position, from page 0: the object-safe face of
/// [`TokenPages`].
trait PageSource {
    /// Makes the pages those of `shape` (hashing again from page 0 if it is another one).
    fn reshape(&mut self, shape: Shape);
    /// Returns the hash of page `i`, computing it if it is the next one; `None` past the last.
    fn page(&mut self, i: usize) -> Option<PageHash>;
}

/// A token lookup's page hashes: the one way a query hashes. Computed one at a time as the
/// probe asks for them, through a memo, and kept when a buffer is given: a reading done again
/// (the writer moved under it) hashes no page twice, and a reading that stops at a miss hashed
/// no page after it.
struct TokenPages<'q, M: DigestMemo + ?Sized> {
    tokens: Tokens<'q>,
    namespace: Namespace<'q>,
    memo: &'q M,
    kept: Option<&'q mut Vec<PageHash>>,
    /// The shape hashed under, and the chain from where it stands (`None` until the first
    /// reading).
    chain: Option<(Shape, Chain<'q>)>,
    /// Pages the chain has hashed.
    hashed: usize,
}

/// The chain of page hashes of tokens of either width.
enum Chain<'t> {
    U32(PageHashes<'t, u32>),
    U64(PageHashes<'t, u64>),
}

impl<'q, M: DigestMemo + ?Sized> TokenPages<'q, M> {
    fn new(
        tokens: Tokens<'q>,
        namespace: Namespace<'q>,
        memo: &'q M,
        mut kept: Option<&'q mut Vec<PageHash>>,
    ) -> TokenPages<'q, M> {
        if let Some(kept) = kept.as_deref_mut() {
            kept.clear();
        }
        TokenPages {
            tokens,
            namespace,
            memo,
            kept,
            chain: None,
            hashed: 0,
        }
    }

    /// Starts the chain again from page 0 under `shape`.
    fn restart(&mut self, shape: Shape) {
        let (size, eagle, ns) = (shape.page_size, shape.eagle, self.namespace);
        let chain = match self.tokens {
            Tokens::U32(t) => Chain::U32(PageHashes::new(t, size, eagle, ns)),
            Tokens::U64(t) => Chain::U64(PageHashes::new(t, size, eagle, ns)),
        };
        self.chain = Some((shape, chain));
        self.hashed = 0;
        if let Some(kept) = self.kept.as_deref_mut() {
            kept.clear();
        }
    }
}

impl<M: DigestMemo + ?Sized> PageSource for TokenPages<'_, M> {
    fn reshape(&mut self, shape: Shape) {
        if self.chain.as_ref().is_none_or(|(had, _)| *had != shape) {
            self.restart(shape);
        }
    }

    fn page(&mut self, i: usize) -> Option<PageHash> {
        if let Some(kept) = self.kept.as_deref().and_then(|k| k.get(i)) {
            return Some(*kept);
        }
        let (shape, _) = self.chain.as_ref().expect("reshaped before the first page");
        if i < self.hashed {
            // Nothing kept: a reading done again hashes again from page 0.
            debug_assert_eq!(i, 0, "pages are asked for in order from page 0");
            self.restart(*shape);
        }
        debug_assert_eq!(i, self.hashed, "pages are asked for in order");
        let (_, chain) = self.chain.as_mut().expect("reshaped before the first page");
        let page = match chain {
            Chain::U32(p) => p.next_with(self.memo),
            Chain::U64(p) => p.next_with(self.memo),
        }?;
        self.hashed += 1;
        if let Some(kept) = self.kept.as_deref_mut() {
            kept.push(page);
        }
        Some(page)
    }
}

#[cfg(test)]
mod tests;
