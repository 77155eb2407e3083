//! The replay: each request is asked of every follower at its arrival (by page hashes and by
//! tokens), checked against the store model's exact state, loaded from the store, then put
//! after its prefill; the store's changes go out as the master's messages and every follower
//! applies them before the next request.

use hdrhistogram::Histogram;
use hicache_index::{Instant, Layout, SglangParams};

use crate::blocks::{Blocks, RequestPages, PAGES_PER_BLOCK, PAGE_SIZE};
use crate::followers::{ExactSet, Follower, Ours, Reference};
use crate::master::{Master, Message};
use crate::report::{FollowerFigures, Replayed};
use crate::store::{Change, Store};
use crate::trace::Trace;

/// The model's layout: how a page is stored.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Model {
    /// MHA at TP 8 (`Qwen/Qwen3-32B`): 16 objects a page, `_{rank}_k` and `_{rank}_v`.
    Tp8,
    /// MLA (`deepseek-ai/DeepSeek-V3`, TP 8, rank-replicated): one object a page, `__k`.
    Mla,
}

impl Model {
    /// Both layouts, TP 8 first.
    pub const ALL: [Model; 2] = [Model::Tp8, Model::Mla];

    /// Returns the layout's short name.
    pub fn as_str(self) -> &'static str {
        match self {
            Model::Tp8 => "tp8",
            Model::Mla => "mla",
        }
    }

    /// Returns SGLang's layout of this model (page size 64, the served model name as the key
    /// prefix).
    pub fn layout(self) -> Layout {
        let mut params = SglangParams::new(PAGE_SIZE as u32, 8);
        match self {
            Model::Tp8 => params.model = Some("Qwen/Qwen3-32B".into()),
            Model::Mla => {
                params.mla = true;
                params.model = Some("deepseek-ai/DeepSeek-V3".into());
            }
        }
        Layout::from_sglang(&params).expect("a valid layout")
    }
}

/// How one replay runs.
#[derive(Clone, Debug)]
pub struct ReplayConfig {
    /// The layout.
    pub model: Model,
    /// The store's capacity as a fraction of the trace's distinct blocks (each 8 pages of all
    /// their objects).
    pub capacity: f64,
    /// Also replay through the reference and the exact-key set.
    pub yardsticks: bool,
    /// A fault for the checker's own test: the message of this index (from 0) is lost on the
    /// way to every follower.
    pub lose_message: Option<u64>,
}

impl ReplayConfig {
    /// Replays `model` at a store of `capacity` of the distinct blocks, with the yardsticks.
    pub fn new(model: Model, capacity: f64) -> ReplayConfig {
        ReplayConfig {
            model,
            capacity,
            yardsticks: true,
            lose_message: None,
        }
    }
}

/// Where the replay's allocations are counted: a global allocator that adds each allocation and
/// removal to the account entered last (the bench's), or nothing ([`NoMeter`]).
pub trait Meter {
    /// Counts what follows for follower `account` (its index in the replay's figures).
    fn enter(&self, account: usize);
    /// Stops counting for the account entered last.
    fn leave(&self);
    /// Returns the bytes follower `account` holds (what its calls allocated and did not free),
    /// `None` when nothing is counted.
    fn live(&self, account: usize) -> Option<usize>;
}

/// Counts nothing.
#[derive(Copy, Clone, Debug, Default)]
pub struct NoMeter;

impl Meter for NoMeter {
    fn enter(&self, _account: usize) {}
    fn leave(&self) {}
    fn live(&self, _account: usize) -> Option<usize> {
        None
    }
}

/// Reads the wall clock: it measures the bench and never reaches a session.
#[allow(clippy::disallowed_methods)]
fn wall() -> std::time::Instant {
    std::time::Instant::now()
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_max(100_000_000_000, 3).expect("valid bounds")
}

/// What is measured of one follower as the replay goes.
struct Tally {
    figures: FollowerFigures,
    by_hashes: Histogram<u64>,
    by_tokens: Histogram<u64>,
}

impl Tally {
    fn new(name: &'static str) -> Tally {
        Tally {
            figures: FollowerFigures::new(name),
            by_hashes: histogram(),
            by_tokens: histogram(),
        }
    }

    fn finish(mut self) -> FollowerFigures {
        for (h, q) in [
            (&self.by_hashes, &mut self.figures.by_hashes),
            (&self.by_tokens, &mut self.figures.by_tokens),
        ] {
            q.p50_ns = h.value_at_quantile(0.5);
            q.p99_ns = h.value_at_quantile(0.99);
        }
        self.figures
    }
}

/// What a replay begins with: the model's layout, the master, and its store sized as the
/// config says.
pub(crate) struct Stage {
    pub(crate) layout: Layout,
    /// The trace's distinct blocks.
    pub(crate) distinct: usize,
    pub(crate) master: Master,
    /// The store's capacity in objects.
    pub(crate) capacity: usize,
    /// The store's capacity in pages.
    pub(crate) capacity_pages: usize,
    /// One past the highest page number the trace can name.
    pub(crate) page_bound: usize,
    pub(crate) store: Store,
    pub(crate) blocks: Blocks,
}

impl Stage {
    pub(crate) fn new(trace: &Trace, config: &ReplayConfig) -> Stage {
        let layout = config.model.layout();
        let distinct = trace.distinct_blocks();
        let master = Master::new(&layout);
        let objects_per_page = master.objects_per_page();
        let capacity_pages =
            ((distinct * PAGES_PER_BLOCK) as f64 * config.capacity).round() as usize;
        let capacity = capacity_pages.max(1) * objects_per_page as usize;
        let page_bound = trace.block_id_bound() * PAGES_PER_BLOCK;
        Stage {
            store: Store::new(capacity, page_bound, objects_per_page),
            blocks: Blocks::new(trace),
            layout,
            distinct,
            master,
            capacity,
            capacity_pages,
            page_bound,
        }
    }

    /// Room for every page the store can hold whole and as many again partly: the index must
    /// not evict on its own (its evictions are counted, and would show as present pages missed).
    pub(crate) fn max_pages(capacity_pages: usize) -> usize {
        2 * capacity_pages + 1024
    }
}

/// Replays `trace` as `config` says; `meter` counts each follower's memory.
///
/// # Panics
/// If the trace is empty, or a follower fails to read the master's messages.
pub fn replay(trace: &Trace, config: &ReplayConfig, meter: &dyn Meter) -> Replayed {
    let started = wall();
    let Stage {
        layout,
        distinct,
        mut master,
        capacity,
        capacity_pages,
        page_bound,
        mut store,
        mut blocks,
    } = Stage::new(trace, config);
    meter.enter(0);
    let mut ours = Ours::new(&layout, Stage::max_pages(capacity_pages));
    meter.leave();
    let mut others: Vec<Box<dyn Follower>> = Vec::new();
    if config.yardsticks {
        meter.enter(1);
        others.push(Box::new(Reference::new(&layout)));
        meter.leave();
        meter.enter(2);
        others.push(Box::new(ExactSet::new(&layout)));
        meter.leave();
    }
    let mut tallies: Vec<Tally> = std::iter::once(ours.name())
        .chain(others.iter().map(|f| f.name()))
        .map(Tally::new)
        .collect();

    let mut out = Replayed::new(
        trace,
        config.model.as_str(),
        config.capacity,
        &layout,
        distinct,
        capacity,
        capacity_pages,
    );
    let mut pages = RequestPages::default();
    let mut seen = vec![false; page_bound];
    let mut map: Vec<bool> = Vec::new();
    let mut changes: Vec<Change> = Vec::new();
    let mut messages: Vec<Message> = Vec::new();
    let mut message_index = 0u64;
    let mut model_time = std::time::Duration::ZERO;
    for request in &trace.requests {
        let t = wall();
        blocks.request(request, &mut pages);
        let truth = store.present_prefix(&pages.pages);
        let ideal = pages
            .pages
            .iter()
            .take_while(|&&p| seen[p as usize])
            .count();
        model_time += t.elapsed();
        out.requests += 1;
        out.pages += pages.pages.len() as u64;
        out.hit_pages += truth as u64;
        out.ideal_pages += ideal as u64;

        // Asked at arrival, by every follower, each answer checked. The second query of a
        // request finds the first one's memory cached: only the first is timed, by page hashes
        // on odd requests and by tokens on even ones.
        let now = Instant::from_millis(request.timestamp);
        let hashes_first = out.requests % 2 == 1;
        for (i, tally) in tallies.iter_mut().enumerate() {
            let follower: &dyn Follower = if i == 0 { &ours } else { &*others[i - 1] };
            meter.enter(i);
            let t = wall();
            let first = if hashes_first {
                follower.by_hashes(&pages.hashes)
            } else {
                follower.by_tokens(&pages.tokens)
            };
            let spent = t.elapsed();
            let second = if hashes_first {
                follower.by_tokens(&pages.tokens)
            } else {
                follower.by_hashes(&pages.hashes)
            };
            meter.leave();
            let (by_hashes, by_tokens) = if hashes_first {
                (first, second)
            } else {
                (second, first)
            };
            let f = &mut tally.figures;
            f.by_hashes.wrong += u64::from(by_hashes != truth);
            f.by_tokens.wrong += u64::from(by_tokens != truth);
            let (timed, histogram) = if hashes_first {
                (&mut f.by_hashes, &mut tally.by_hashes)
            } else {
                (&mut f.by_tokens, &mut tally.by_tokens)
            };
            timed.add(spent);
            histogram.saturating_record(spent.as_nanos() as u64);
        }
        // Every page, not only the prefix: ours must equal the store page by page.
        map.clear();
        map.resize(pages.pages.len(), false);
        ours.page_map(&pages.hashes, &mut map);
        for (&page, &claimed) in pages.pages.iter().zip(&map) {
            match (claimed, store.is_page_present(page)) {
                (true, false) => out.claimed_absent += 1,
                (false, true) => out.present_missed += 1,
                _ => {}
            }
        }

        // Loaded at arrival, put after the prefill.
        let t = wall();
        store.load(&pages.pages[..truth]);
        changes.clear();
        store.put(&pages.pages, &mut changes);
        for &page in &pages.pages {
            seen[page as usize] = true;
        }
        let filled = master.publish(request.timestamp, &changes, &blocks, &mut messages);
        model_time += t.elapsed();
        for change in &changes {
            match change.kind {
                hicache_index::EventKind::Stored => out.stored += 1,
                _ => out.removed += 1,
            }
        }
        let sent = &messages[..filled];
        let lost = config
            .lose_message
            .filter(|&m| (message_index..message_index + filled as u64).contains(&m))
            .map(|m| (m - message_index) as usize);
        message_index += filled as u64;
        out.messages += filled as u64;
        for (i, tally) in tallies.iter_mut().enumerate() {
            let follower: &mut dyn Follower = if i == 0 {
                &mut ours
            } else {
                &mut *others[i - 1]
            };
            meter.enter(i);
            let t = wall();
            for (k, message) in sent.iter().enumerate() {
                if lost != Some(k) {
                    follower.apply(now, &message.frames());
                }
            }
            tally.figures.ingest += t.elapsed();
            meter.leave();
            if let Some(bytes) = meter.live(i) {
                tally.figures.peak_bytes = tally.figures.peak_bytes.max(bytes);
            }
        }
    }
    out.model_time = model_time;
    out.store_evictions = store.evicted();
    out.peak_pages_held = store.peak_pages_held();
    let c = ours.session().status(Instant::ZERO).counters;
    out.ours_gaps = c.gaps;
    out.ours_clears = c.clears_gap + c.clears_restart + c.clears_undecodable;
    out.ours_index_evictions = c.evictions;
    out.ours_pages_at_end = c.pages;
    out.not_live = ours.not_live();
    out.unexpected_commands = ours.unexpected_commands();
    out.followers = tallies.into_iter().map(Tally::finish).collect();
    out.wall = started.elapsed();
    out
}
