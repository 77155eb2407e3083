//! Row 7: the read side under ingest, with busy threads ≤ cores (one writer, one query thread).
//!
//! One writer thread feeds the session pre-encoded 64-event Mooncake batches from memory (no
//! publisher, no socket), taking the session's write lock per batch as the driver does; one
//! query thread asks 256-page queries of pages the index holds. Each read side is measured in
//! the same run: `lock` asks through the session's `RwLock` (the driver before the reader),
//! `reader` through [`Session::reader`] (no lock on the query path). Phases per read side: the
//! query alone, ingest alone, both at once, run in turn in ten slices each ([`interleaved`]);
//! a hash query (page hashes given) and a cold token
//! query (SHA-256 of every page, no memo); for the reader, also a token query whose pages are
//! all in the driver's [`PrefixMemo`] (warmed first), hashed through it as the query handle
//! does. Latencies go into hdrhistograms (ns). Three more phases profile the reader's hash
//! query: around each query the query thread reads how often the kernel has put it on a CPU
//! ([`Switches`]), so they report the p99 of the queries no context switch interrupted, and
//! how many were: the scheduler's share of the tail; and the thread's CPU time around each
//! query ([`cpu_time`]), which the kernel of a guest counts without the time the hypervisor
//! took the vCPU away (steal): so the p99 of that CPU time is the query's own execution (with
//! the interrupts it took, which this kernel does not account apart, and the clock reads), and
//! what the wall-clock p99 has above it is the scheduler's and the hypervisor's. The third
//! asks the same 256 pages every time (their memory cached), in turn with cold queries: the
//! query's instructions without the memory latency of cold probes. Writes
//! `<target>/perf/readside.json`; `cargo bench -- --test` runs it small, without figures.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hdrhistogram::Histogram;
use hicache_index::{
    Config, EventKind, Hits, IndexConfig, Instant, Lookup, MapCover, ModelLayout, Namespace,
    PageHash, PageHashes, QueryError, Reader, Session,
};
use hicache_index_bench::perf::{self, BenchArgs};
use hicache_index_bench::workload;
use hicache_index_driver::{PrefixMemo, DEFAULT_MEMO_BYTES};
use hicache_index_shortcuts::Shortcuts;
use hicache_index_wire::{EventIdSlots, FIXED_WIDTH_EVENT_ID};

/// Pages a query asks about.
const QUERY_PAGES: usize = 256;

/// The writer's state: the cycled batches and where the stream stands.
struct Writer {
    /// Batches that store fresh pages (what the phases ingest by default).
    payloads: Vec<Vec<u8>>,
    ids: Vec<EventIdSlots>,
    /// Batches that store fresh pages and batches that remove them again, alternately: every
    /// other batch removes, so it is a change readers must not read across.
    churn: Vec<Vec<u8>>,
    churn_ids: Vec<EventIdSlots>,
    /// Feed `churn` instead of `payloads`.
    removing: bool,
    churn_next: usize,
    next: usize,
    event_id: u64,
    seq: u64,
}

impl Writer {
    /// Feeds batches until `stop`, one write-lock hold per batch; returns the events fed and
    /// the time taken.
    fn run(&mut self, session: &RwLock<Session>, stop: &AtomicBool) -> (u64, Duration) {
        #[allow(clippy::disallowed_methods)]
        let start = std::time::Instant::now();
        let mut events = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let (payloads, ids, next) = if self.removing {
                (&mut self.churn, &self.churn_ids, &mut self.churn_next)
            } else {
                (&mut self.payloads, &self.ids, &mut self.next)
            };
            let i = *next;
            *next = (i + 1) % payloads.len();
            self.event_id = ids[i].renumber(&mut payloads[i], self.event_id);
            self.seq += 1;
            let seq = self.seq.to_be_bytes();
            let fx = session
                .write()
                .expect("no panic while writing")
                .feed(Instant::ZERO, &[b"", &seq, &payloads[i]]);
            debug_assert!(fx.is_empty(), "{fx:?}");
            drop(fx);
            events += 64;
        }
        (events, start.elapsed())
    }
}

/// How a query thread asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    /// Through the session's `RwLock` (read lock per query; tokens hashed outside it).
    Lock,
    /// Through the session's [`Reader`] (no lock).
    Reader,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Lock => "lock",
            Side::Reader => "reader",
        }
    }
}

/// What a query asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// 256 page hashes, all held.
    Hashes,
    /// The same 256 page hashes every query: their buckets and slots stay in the cache, so
    /// the query costs its instructions without the memory latency of a cold probe.
    SameHashes,
    /// 256 pages of tokens, all held, hashed by every query (cold).
    Tokens,
    /// 256 pages of tokens, all held, every page's digest in the prefix memo.
    Memo,
}

struct Fixture {
    session: Arc<RwLock<Session>>,
    reader: Arc<Reader>,
    hashes: Vec<PageHash>,
    tokens: Vec<Vec<u32>>,
    memo: PrefixMemo,
}

/// Asks the reader; when the writer kept changing what it read ([`QueryError::Busy`]), asks
/// under the session's lock, as the driver's query handle does.
fn reader_query(fx: &Fixture, lookup: &Lookup<'_>) -> Result<Hits, QueryError> {
    match fx.reader.query(lookup) {
        Err(QueryError::Busy) => {
            BUSY.fetch_add(1, Ordering::Relaxed);
            fx.session.read().expect("no panic").query(lookup)
        }
        answered => answered,
    }
}

/// Reads the page shape of the default layout under the session's lock.
fn shape_under_lock(fx: &Fixture) -> (u32, bool) {
    let session = fx.session.read().expect("no panic");
    let layout = session.models().layout_for(None).expect("a layout");
    (layout.page_size, layout.eagle)
}

/// Hashes `tokens` through the prefix memo: through the session's lock (the page shape read
/// under it, the pages hashed outside it, probed under it), or through the reader as the
/// driver's query handle does (hashed as the probe reaches each page; asked again under the
/// lock when the writer kept changing what it read).
fn memo_query(
    fx: &Fixture,
    side: Side,
    tokens: &[u32],
    scratch: &mut Vec<PageHash>,
) -> Result<Hits, QueryError> {
    let lookup = Lookup::tokens(tokens);
    match side {
        Side::Lock => {
            let (page_size, eagle) = shape_under_lock(fx);
            scratch.clear();
            let mut pages = PageHashes::new(tokens, page_size, eagle, Namespace::NONE);
            while let Some(page) = pages.next_with(&fx.memo) {
                scratch.push(page);
            }
            let hashed = Lookup::page_hashes(scratch);
            fx.session.read().expect("no panic").query(&hashed)
        }
        Side::Reader => {
            let mut query =
                fx.reader
                    .ask(&lookup, &fx.memo, Some(scratch), None, MapCover::UntilMiss);
            match query.answer() {
                Err(QueryError::Busy) => {
                    BUSY.fetch_add(1, Ordering::Relaxed);
                    let _still = fx.session.read().expect("no panic");
                    query.answer()
                }
                answered => answered,
            }
        }
    }
}

/// How often the kernel has put the calling thread on a CPU: the third field of
/// `/proc/thread-self/schedstat` (`None` where it cannot be read). Read before a query's timer
/// starts and after it stops (a positioned read of a file opened once, outside the timed part):
/// a query during which the count moved was switched out and in again.
struct Switches(Option<std::fs::File>);

impl Switches {
    /// Opens the file for the calling thread (`thread-self` is resolved when it is opened).
    fn of_this_thread() -> Switches {
        Switches(std::fs::File::open("/proc/thread-self/schedstat").ok())
    }

    /// Returns the count now, if the file can be read.
    fn now(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 96];
        let n = self.0.as_ref()?.read_at(&mut buf, 0).ok()?;
        let line = std::str::from_utf8(&buf[..n]).ok()?;
        line.split_ascii_whitespace().nth(2)?.parse().ok()
    }
}

/// The calling thread's CPU time, in ns: `CLOCK_THREAD_CPUTIME_ID`, which a guest kernel with
/// steal accounting (Linux's `CONFIG_PARAVIRT_TIME_ACCOUNTING`) keeps without the time the
/// hypervisor ran something else on the vCPU, and which stops while the thread is switched out
/// (interrupts the thread took stay in it, unless the kernel accounts IRQ time apart).
fn cpu_time() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    let (secs, nanos) = (u64::try_from(t.tv_sec), u64::try_from(t.tv_nsec));
    secs.unwrap_or(0) * 1_000_000_000 + nanos.unwrap_or(0)
}

/// One query thread's latencies (ns).
struct Latencies {
    /// Every query.
    all: Histogram<u64>,
    /// The queries during which the thread was not switched out.
    undisturbed: Histogram<u64>,
    /// Queries during which it was.
    switched: u64,
    /// Whether [`Switches`] could be read (if not, `undisturbed` holds every query).
    seen: bool,
    /// Each query's CPU time ([`cpu_time`]), in the profiling phases only.
    cpu: Histogram<u64>,
}

impl Latencies {
    /// Adds what another run of the same query measured.
    fn add(&mut self, other: &Latencies) {
        for (mine, theirs) in [
            (&mut self.all, &other.all),
            (&mut self.undisturbed, &other.undisturbed),
            (&mut self.cpu, &other.cpu),
        ] {
            mine.add(theirs).expect("the same bounds");
        }
        self.switched += other.switched;
        self.seen |= other.seen;
    }
}

/// Reader queries that fell back to the lock.
static BUSY: AtomicU64 = AtomicU64::new(0);

/// Runs queries of `kind` through `side` until `stop`; returns their latencies. With
/// `count_switches`, reads [`Switches`] and [`cpu_time`] around each query (four system calls
/// per query, outside the timed part, which still leave the next query's caches colder: so
/// only the profiling phases do).
fn query_loop(
    fx: &Fixture,
    side: Side,
    kind: Kind,
    stop: &AtomicBool,
    count_switches: bool,
) -> Latencies {
    let histogram = || Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).expect("bounds");
    let mut out = Latencies {
        all: histogram(),
        undisturbed: histogram(),
        switched: 0,
        seen: false,
        cpu: histogram(),
    };
    let switches = if count_switches {
        Switches::of_this_thread()
    } else {
        Switches(None)
    };
    out.seen = switches.now().is_some();
    let windows = fx.hashes.len() - QUERY_PAGES;
    let mut k = 0usize;
    let mut scratch: Vec<PageHash> = Vec::with_capacity(QUERY_PAGES);
    while !stop.load(Ordering::Relaxed) {
        if kind != Kind::SameHashes {
            k = (k + 7919) % windows;
        }
        let before = switches.now();
        let cpu_before = count_switches.then(cpu_time);
        #[allow(clippy::disallowed_methods)]
        let start = std::time::Instant::now();
        let hits = match kind {
            Kind::Hashes | Kind::SameHashes => {
                let lookup = Lookup::page_hashes(&fx.hashes[k..k + QUERY_PAGES]);
                match side {
                    Side::Lock => fx.session.read().expect("no panic").query(&lookup),
                    Side::Reader => reader_query(fx, &lookup),
                }
            }
            Kind::Tokens => {
                let tokens = &fx.tokens[k % fx.tokens.len()];
                let lookup = Lookup::tokens(tokens);
                match side {
                    Side::Lock => {
                        // As the driver did: the shape under the lock, hashed outside it,
                        // probed under it.
                        let (page_size, eagle) = shape_under_lock(fx);
                        scratch.clear();
                        scratch.extend(PageHashes::new(tokens, page_size, eagle, Namespace::NONE));
                        let hashed = Lookup::page_hashes(&scratch);
                        fx.session.read().expect("no panic").query(&hashed)
                    }
                    Side::Reader => reader_query(fx, &lookup),
                }
            }
            Kind::Memo => {
                let tokens = &fx.tokens[k % fx.tokens.len()];
                memo_query(fx, side, tokens, &mut scratch)
            }
        };
        let took = start.elapsed();
        let cpu_took = cpu_before.map(|before| cpu_time().saturating_sub(before));
        let after = switches.now();
        let hits = hits.expect("a layout");
        assert_eq!(hits.prefix_pages, QUERY_PAGES, "every page is held");
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX).max(1);
        out.all.record(ns).expect("in bounds");
        if let Some(cpu) = cpu_took {
            out.cpu.record(cpu.max(1)).expect("in bounds");
        }
        if !out.seen {
            // Not profiling: `undisturbed` means nothing.
        } else if before == after {
            out.undisturbed.record(ns).expect("in bounds");
        } else {
            out.switched += 1;
        }
    }
    out
}

/// One phase's figures.
#[derive(Default)]
struct Phase {
    events_per_s: Option<f64>,
    p50_ns: Option<u64>,
    p99_ns: Option<u64>,
    queries: u64,
    /// The p99 of the queries no context switch interrupted.
    p99_undisturbed_ns: Option<u64>,
    /// Queries a context switch interrupted.
    switched: u64,
    /// The p50 of the queries' own CPU time ([`cpu_time`]), where it was read.
    cpu_p50_ns: Option<u64>,
    /// The p99 of the same.
    cpu_p99_ns: Option<u64>,
    /// The query's p99 in each slice of an [`interleaved`] run, in order (`None` for a slice
    /// without a query; empty outside such a run): the same slice of two phases ran in the same
    /// seconds of the machine, so the lists pair by position.
    slices_p99_ns: Vec<Option<u64>>,
}

impl Phase {
    fn json(&self) -> String {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "null".into());
        format!(
            "{{\"events_per_s\":{},\"p50_ns\":{},\"p99_ns\":{},\"queries\":{},\"p99_undisturbed_ns\":{},\"switched\":{},\"cpu_p50_ns\":{},\"cpu_p99_ns\":{},\"slices_p99_ns\":[{}]}}",
            opt(self.events_per_s.map(|r| format!("{r:.0}"))),
            opt(self.p50_ns.map(|n| n.to_string())),
            opt(self.p99_ns.map(|n| n.to_string())),
            self.queries,
            opt(self.p99_undisturbed_ns.map(|n| n.to_string())),
            self.switched,
            opt(self.cpu_p50_ns.map(|n| n.to_string())),
            opt(self.cpu_p99_ns.map(|n| n.to_string())),
            self.slices_p99_ns
                .iter()
                .map(|p| opt(p.map(|n| n.to_string())))
                .collect::<Vec<_>>()
                .join(",")
        )
    }
}

/// What one run of the threads measured, before it is summed up as a [`Phase`].
#[derive(Default)]
struct Raw {
    /// Events the writer fed and the time it took, if it ran.
    writer: Option<(u64, Duration)>,
    /// The query thread's latencies, if it ran.
    latencies: Option<Latencies>,
}

impl Raw {
    /// Adds another run of the same phase.
    fn add(&mut self, other: Raw) {
        if let Some((events, took)) = other.writer {
            let (e, t) = self.writer.get_or_insert((0, Duration::ZERO));
            *e += events;
            *t += took;
        }
        match (&mut self.latencies, other.latencies) {
            (Some(mine), Some(theirs)) => mine.add(&theirs),
            (mine @ None, theirs) => *mine = theirs,
            (Some(_), None) => {}
        }
    }

    /// The phase's figures.
    fn phase(&self) -> Phase {
        let mut out = Phase::default();
        if let Some((events, took)) = self.writer {
            out.events_per_s = Some(events as f64 / took.as_secs_f64());
        }
        if let Some(h) = &self.latencies {
            out.p50_ns = Some(h.all.value_at_quantile(0.5));
            out.p99_ns = Some(h.all.value_at_quantile(0.99));
            out.queries = h.all.len();
            out.p99_undisturbed_ns = (h.seen && !h.undisturbed.is_empty())
                .then(|| h.undisturbed.value_at_quantile(0.99));
            out.switched = h.switched;
            if !h.cpu.is_empty() {
                out.cpu_p50_ns = Some(h.cpu.value_at_quantile(0.5));
                out.cpu_p99_ns = Some(h.cpu.value_at_quantile(0.99));
            }
        }
        out
    }
}

/// Runs `query` (if any) and the writer (if asked) together for `length`.
fn phase(
    fx: &Fixture,
    writer: &mut Writer,
    ingest: bool,
    query: Option<(Side, Kind)>,
    length: Duration,
) -> Phase {
    run(fx, writer, ingest, query, length, false).phase()
}

/// Runs the threads of one phase and returns what they measured; with `count_switches`, the
/// query thread reads [`Switches`] and [`cpu_time`] around each query.
fn run(
    fx: &Fixture,
    writer: &mut Writer,
    ingest: bool,
    query: Option<(Side, Kind)>,
    length: Duration,
    count_switches: bool,
) -> Raw {
    let stop = &AtomicBool::new(false);
    std::thread::scope(|s| {
        let w = ingest.then(|| s.spawn(|| writer.run(&fx.session, stop)));
        let q = query
            .map(|(side, kind)| s.spawn(move || query_loop(fx, side, kind, stop, count_switches)));
        std::thread::sleep(length);
        stop.store(true, Ordering::Relaxed);
        Raw {
            writer: w.map(|w| w.join().expect("the writer")),
            latencies: q.map(|q| q.join().expect("the query thread")),
        }
    })
}

/// How many slices [`interleaved`] cuts its phases into.
const SLICES: u32 = 10;

/// Runs the phases `runs` (whether the writer ingests, which query runs) in turn, [`SLICES`]
/// times, each a [`SLICES`]th of `length`, and sums each one's slices up. The ratios the goals
/// set (the query's p99 while ingesting against its p50 alone, the writer's rate beside queries
/// against its rate alone) then compare figures taken over the same minutes: this shared
/// machine's speed drifts by half within a minute, which phases run one after the other would
/// take for the query's or the writer's. Each phase also keeps its query's p99 per slice, so
/// a ratio can be taken slice by slice (issue 31: the median over the slices of the query's
/// p99 while ingesting against its p99 alone).
fn interleaved<const N: usize>(
    fx: &Fixture,
    writer: &mut Writer,
    runs: [(bool, Option<(Side, Kind)>); N],
    length: Duration,
    count_switches: bool,
) -> [Phase; N] {
    let mut raw: [Raw; N] = core::array::from_fn(|_| Raw::default());
    let mut slices: [Vec<Option<u64>>; N] = core::array::from_fn(|_| Vec::new());
    for _ in 0..SLICES {
        for ((sum, p99s), &(ingest, query)) in raw.iter_mut().zip(&mut slices).zip(&runs) {
            let slice = run(fx, writer, ingest, query, length / SLICES, count_switches);
            p99s.push(slice.phase().p99_ns);
            sum.add(slice);
        }
    }
    let mut out = raw.map(|r| r.phase());
    for (phase, p99s) in out.iter_mut().zip(slices) {
        phase.slices_p99_ns = p99s;
    }
    out
}

fn main() {
    let args = BenchArgs::from_env();
    if !args.is_selected("readside") {
        return;
    }
    let quick = args.quick;
    let preload: usize = if quick { 1 << 10 } else { 1 << 18 };
    let length = Duration::from_millis(if quick { 100 } else { 3_000 });
    let layout = workload::tp8();
    let mut session = Session::new(Config {
        layouts: vec![ModelLayout {
            model: None,
            layout: layout.clone(),
        }],
        index: IndexConfig {
            max_pages: preload + (1 << 16),
            ..IndexConfig::default()
        },
        ..Config::default()
    })
    .expect("a valid configuration");
    let mut seq = 0u64;
    let mut event_id = FIXED_WIDTH_EVENT_ID;
    let mut feed = |session: &mut Session, pages: &[PageHash]| {
        for payload in workload::payloads(&layout, pages, event_id) {
            seq += 1;
            let fx = session.feed(Instant::ZERO, &[b"", &seq.to_be_bytes(), &payload]);
            assert!(fx.is_empty(), "{fx:?}");
        }
        event_id += (pages.len() * 16) as u64;
    };
    let hashes: Vec<PageHash> = (0..preload as u64).map(workload::synthetic_page).collect();
    for chunk in hashes.chunks(4096) {
        feed(&mut session, chunk);
    }
    // Token chains of 256 pages each, held whole.
    let tokens: Vec<Vec<u32>> = (0..if quick { 2 } else { 16 })
        .map(|salt| workload::tokens(QUERY_PAGES, salt))
        .collect();
    for t in &tokens {
        feed(&mut session, &workload::hashes(&layout, t));
    }
    let fresh: Vec<PageHash> = (0..4096)
        .map(|i| workload::synthetic_page((preload + i) as u64))
        .collect();
    let payloads = workload::payloads(&layout, &fresh, event_id);
    let ids: Vec<EventIdSlots> = payloads.iter().map(|p| EventIdSlots::find(p)).collect();
    let removals = workload::payloads_of(EventKind::Removed, &layout, &fresh, event_id);
    let churn: Vec<Vec<u8>> = payloads
        .iter()
        .zip(&removals)
        .flat_map(|(store, remove)| [store.clone(), remove.clone()])
        .collect();
    let churn_ids: Vec<EventIdSlots> = churn.iter().map(|p| EventIdSlots::find(p)).collect();
    let mut writer = Writer {
        payloads,
        ids,
        churn,
        churn_ids,
        removing: false,
        churn_next: 0,
        next: 0,
        event_id,
        seq,
    };
    let reader = session.reader();
    let fx = Fixture {
        session: Arc::new(RwLock::new(session)),
        reader,
        hashes,
        tokens,
        memo: PrefixMemo::new(DEFAULT_MEMO_BYTES),
    };
    // Every page of every token chain in the memo, checked against the plain chain.
    let mut scratch = Vec::new();
    for t in &fx.tokens {
        let hits = memo_query(&fx, Side::Reader, t, &mut scratch).expect("a layout");
        assert_eq!(hits.prefix_pages, QUERY_PAGES, "every page is held");
        assert_eq!(
            scratch,
            workload::hashes(&layout, t),
            "the memo's digests are the chain's"
        );
    }

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("read side: 1 writer thread, 1 query thread, {cores} cores");
    let ingest_alone = phase(&fx, &mut writer, true, None, length);
    let rate = ingest_alone.events_per_s.unwrap_or(0.0);
    println!("  ingest alone: {:.2} M events/s", rate / 1e6);
    let mut json = format!(
        "{{\"cores\":{cores},\"query_pages\":{QUERY_PAGES},\"ingest_alone\":{}",
        ingest_alone.json()
    );
    for side in [Side::Lock, Side::Reader] {
        let kinds: &[Kind] = match side {
            Side::Lock => &[Kind::Hashes, Kind::Tokens],
            Side::Reader => &[Kind::Hashes, Kind::Tokens, Kind::Memo],
        };
        for &kind in kinds {
            let name = format!("{}_{}", side.name(), format!("{kind:?}").to_lowercase());
            let query = Some((side, kind));
            let runs = [(true, None), (false, query), (true, query)];
            let [ingest, alone, busy] = interleaved(&fx, &mut writer, runs, length, false);
            println!(
                "  {name:14} alone p50 {:>8} p99 {:>8} | ingesting ({:.2} M events/s; alone {:.2}) p50 {:>8} p99 {:>8} | p99 ingesting / alone, median of {SLICES} slices: {}",
                us(alone.p50_ns),
                us(alone.p99_ns),
                busy.events_per_s.unwrap_or(0.0) / 1e6,
                ingest.events_per_s.unwrap_or(0.0) / 1e6,
                us(busy.p50_ns),
                us(busy.p99_ns),
                perf::median_ratio(&busy.slices_p99_ns, &alone.slices_p99_ns)
                    .map_or("-".into(), |r| format!("{r:.2}x"))
            );
            json.push_str(&format!(
                ",\"{name}\":{{\"ingest_alone\":{},\"alone\":{},\"ingesting\":{}}}",
                ingest.json(),
                alone.json(),
                busy.json()
            ));
        }
    }
    println!(
        "  reader queries that asked under the lock (Busy), store-only ingest: {}",
        BUSY.swap(0, Ordering::Relaxed)
    );
    // The tail's profile: the reader's hash query again, the query thread reading around each
    // query whether the kernel switched it out, and its CPU time (its own phases: the reads
    // cost the queries).
    let query = Some((Side::Reader, Kind::Hashes));
    let [alone, busy] = interleaved(
        &fx,
        &mut writer,
        [(false, query), (true, query)],
        length,
        true,
    );
    println!(
        "  reader_hashes, switches counted: alone p50 {:>8} p99 {:>8} ({} of {} switched out; the rest p99 {:>8}; CPU time p50 {:>8} p99 {:>8}) | ingesting p50 {:>8} p99 {:>8} ({} of {} switched out; the rest p99 {:>8}; CPU time p50 {:>8} p99 {:>8})",
        us(alone.p50_ns),
        us(alone.p99_ns),
        alone.switched,
        alone.queries,
        us(alone.p99_undisturbed_ns),
        us(alone.cpu_p50_ns),
        us(alone.cpu_p99_ns),
        us(busy.p50_ns),
        us(busy.p99_ns),
        busy.switched,
        busy.queries,
        us(busy.p99_undisturbed_ns),
        us(busy.cpu_p50_ns),
        us(busy.cpu_p99_ns)
    );
    json.push_str(&format!(
        ",\"reader_hashes_switches\":{{\"alone\":{},\"ingesting\":{}}}",
        alone.json(),
        busy.json()
    ));
    // The same query over the same pages every time, what it costs with its memory cached,
    // in turn with the cold query (neither profiled: the profiling's reads cost the queries).
    let runs = [
        (false, Some((Side::Reader, Kind::SameHashes))),
        (false, Some((Side::Reader, Kind::Hashes))),
    ];
    let [same, cold] = interleaved(&fx, &mut writer, runs, length, false);
    println!(
        "  reader_hashes, the same 256 pages every query: alone p50 {:>8} p99 {:>8} (in turn with cold queries: p50 {:>8} p99 {:>8})",
        us(same.p50_ns),
        us(same.p99_ns),
        us(cold.p50_ns),
        us(cold.p99_ns)
    );
    json.push_str(&format!(
        ",\"reader_same_hashes\":{{\"alone\":{},\"cold\":{}}}",
        same.json(),
        cold.json()
    ));
    // Every other batch removes the pages the one before stored: each is a change a query
    // overlapping it must read again, or ask under the lock after a few tries.
    writer.removing = true;
    let removing_alone = phase(&fx, &mut writer, true, None, length);
    println!(
        "  ingest alone, every other batch removing: {:.2} M events/s",
        removing_alone.events_per_s.unwrap_or(0.0) / 1e6
    );
    json.push_str(&format!(",\"removing_alone\":{}", removing_alone.json()));
    for side in [Side::Lock, Side::Reader] {
        let name = format!("{}_hashes_removing", side.name());
        BUSY.store(0, Ordering::Relaxed);
        let busy = phase(&fx, &mut writer, true, Some((side, Kind::Hashes)), length);
        let fell_back = BUSY.swap(0, Ordering::Relaxed);
        println!(
            "  {name:23} ingesting ({:.2} M events/s) p50 {:>8} p99 {:>8}, {fell_back} of {} asked under the lock",
            busy.events_per_s.unwrap_or(0.0) / 1e6,
            us(busy.p50_ns),
            us(busy.p99_ns),
            busy.queries
        );
        json.push_str(&format!(
            ",\"{name}\":{{\"ingesting\":{},\"busy\":{fell_back}}}",
            busy.json()
        ));
    }
    json.push_str("}\n");
    let c = fx
        .session
        .read()
        .expect("no panic")
        .status(Instant::ZERO)
        .counters;
    assert_eq!((c.gaps, c.restarts), (0, 0), "{c:?}");
    if !quick {
        perf::write_result("readside.json", &json);
    }
}

fn us(ns: Option<u64>) -> String {
    ns.map_or_else(|| "-".into(), |n| format!("{:.1}µs", n as f64 / 1e3))
}
