//! Row 8 (issue 27, item 5): a reconcile's cost. A session holding N objects (filled by
//! events after the watch's baseline) sees the master's unmount counter move, asks for a key
//! list, and is handed one that lacks about 3 % of the objects, in chunks of 64 lines (the driver's)
//! (`SnapshotBegin`, `SnapshotLines`..., `SnapshotEnd`, as the driver hands lists over,
//! releasing the session's lock between calls). Measured: the handover's wall time, the
//! longest single `handle` call (the longest the driver holds the writer), the final step
//! (`SnapshotEnd` and the slices after it, due at once through the timer, which apply the list
//! to the index: their sum), and the peak extra memory (a counting
//! global allocator: the peak during the handover minus the bytes before it; the key list's
//! own bytes are the driver's and are allocated before). A thread queries the pages that stay
//! present through the session's lock-free `Reader` all along: every answer must be a hit.
//! After it, the check: the objects left out are removed (their pages unclaimed), every other
//! page is claimed, the session is live again.
//!
//! N in {100K, 1M} objects at TP 8 MHA (16 objects a page: the objects left out are spread
//! over the pages, as a segment's are, so a page loses one or more of its objects) and MLA (one
//! object a page: 1M pages). The final step's thread CPU time is printed beside its wall time
//! (on a shared host the writer's thread waits for a core too). Writes
//! `<target>/perf/reconcile.json`. `RECONCILE_OBJECTS=16777216` measures other sizes (TP 8 at
//! 1M pages), writing nothing; an argument selects a layout (`reconcile/tp8`, `reconcile/mla`).
//! `cargo bench -- --test` runs it small (and checks it), writing nothing.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use hicache_index::{
    Command, Config, Effect, Effects, Health, IndexConfig, Input, Instant, Layout, Lookup,
    ModelLayout, PageHash, QueryError, Report, ResyncConfig, Seq, Session, SglangParams,
    SnapshotRequest, StoreSignals, Watermark,
};
use hicache_index_bench::perf::{self, BenchArgs};
use hicache_index_bench::workload;
use hicache_index_shortcuts::Untimed;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let live = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: forwards every call to the system allocator unchanged and only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: AllocLayout) -> *mut u8 {
        grew(layout.size());
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: AllocLayout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: AllocLayout, new_size: usize) -> *mut u8 {
        // Counted as the new block before the old one goes, as a moving realloc holds both.
        grew(new_size);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Lines per `SnapshotLines` call: the driver's own chunk (`SNAPSHOT_CHUNK_LINES` in
/// `transports/driver`), so the longest call is what a driver's lock is held for.
const CHUNK_LINES: usize = 64;

/// Objects left out of the key list, per mille.
const GONE_PER_MILLE: u64 = 30;

/// Pages per query of the reader thread.
const QUERY_PAGES: usize = 64;

const UNMOUNTS: &str = "master_unmount_segment_requests_total";

/// Wall time measures the bench; it never reaches the core.
#[allow(clippy::disallowed_methods)]
fn clock() -> std::time::Instant {
    std::time::Instant::now()
}

/// The calling thread's CPU time so far, from the kernel's scheduler statistics (Linux; `None`
/// elsewhere). It lags a running thread by up to a scheduler tick: good for steps of tens of
/// milliseconds, not for short ones.
fn thread_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// MLA, page size 64: one object a page.
fn mla() -> Layout {
    let mut params = SglangParams::new(workload::PAGE_SIZE, 8);
    params.mla = true;
    Layout::from_sglang(&params).expect("a valid layout")
}

/// Whether object `k` (page `k / objects a page`, its suffix `k % objects a page`) is left out
/// of the key list: a mix of `k`, about [`GONE_PER_MILLE`] of them.
fn gone(k: u64) -> bool {
    let mut x = k.wrapping_add(0x2545_f491_4f6c_dd1d);
    x ^= x >> 31;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 29;
    x % 1000 < GONE_PER_MILLE
}

/// The session's sequence and event id so far, and its clock.
struct Driven {
    session: Session,
    now: Instant,
    seq: u64,
    event_id: u64,
}

impl Driven {
    fn handle(&mut self, input: Input<'_>) -> Effects {
        self.session.handle(self.now, input)
    }

    /// Fires timers until the session asks for the master's signals, and answers with
    /// `unmounts` as the unmount counter.
    fn read_signals(&mut self, unmounts: u64) -> Effects {
        for _ in 0..20 {
            let at = self.session.poll_timeout().expect("the watch is scheduled");
            self.now = self.now.max(at);
            let fx = self.handle(Input::Timeout);
            let Some(request) = fx.iter().find_map(|e| match e {
                Effect::Command(Command::ReadSignals { request }) => Some(*request),
                _ => None,
            }) else {
                continue;
            };
            let mut signals = StoreSignals::default();
            signals.add(UNMOUNTS, unmounts as f64);
            return self.handle(Input::Signals {
                request,
                signals: Some(signals),
            });
        }
        panic!("no signals read within 20 timers");
    }
}

fn fetch(fx: &Effects) -> Option<SnapshotRequest> {
    fx.iter().find_map(|e| match e {
        Effect::Command(Command::FetchSnapshot { request }) => Some(*request),
        _ => None,
    })
}

/// A session with resync and the store watch on (no status checks, no verification: only the
/// watch asks the master), connected, placed by an empty first key list, its baseline read.
fn session(layout: &Layout, pages: usize) -> Driven {
    let mut d = Driven {
        session: Session::new(Config {
            endpoint: Some("tcp://127.0.0.1:19997".into()),
            layouts: vec![ModelLayout {
                model: None,
                layout: layout.clone(),
            }],
            index: IndexConfig {
                max_pages: pages + (1 << 12),
                ..IndexConfig::default()
            },
            resync: Some(ResyncConfig {
                status_check: None,
                store_watch: Some(Duration::from_millis(250)),
                ..ResyncConfig::default()
            }),
            verify: None,
            ..Config::default()
        })
        .expect("a valid configuration"),
        now: Instant::ZERO,
        seq: 0,
        event_id: 0,
    };
    let fx = d.handle(Input::Timeout);
    assert!(
        matches!(fx.first(), Some(Effect::Command(Command::Connect { .. }))),
        "{fx:?}"
    );
    let fx = d.handle(Input::Connected);
    let request = fetch(&fx).expect("resync on: the first connection fetches a key list");
    let lines: [&[u8]; 0] = [];
    let _ = d.handle(Input::Snapshot {
        request,
        watermark: Some(Watermark {
            seq: Seq(0),
            events: Some(0),
        }),
        lines: &lines,
    });
    let fx = d.read_signals(0);
    assert!(fetch(&fx).is_none(), "an empty index needs no reconcile");
    d
}

/// One measurement.
struct Row {
    name: &'static str,
    objects: usize,
    pages: usize,
    removed: usize,
    pages_unclaimed: usize,
    session_bytes: usize,
    fill: Duration,
    chunks: usize,
    handover: Duration,
    longest: Duration,
    longest_step: &'static str,
    /// The longest `SnapshotLines` call.
    longest_lines: Duration,
    end: Duration,
    /// The final step's CPU time (without the time the writer's thread waited for a core).
    end_cpu: Option<Duration>,
    peak_extra: usize,
    queries: usize,
    busy: usize,
    longest_query: Duration,
}

fn run(name: &'static str, layout: &Layout, objects: usize) -> Row {
    let suffixes: Vec<String> = layout.suffixes().map(|(s, _)| s.to_owned()).collect();
    let per_page = suffixes.len();
    let pages = objects / per_page;
    let objects = pages * per_page;
    let hashes: Vec<PageHash> = (0..pages)
        .map(|i| workload::synthetic_page(i as u64))
        .collect();

    // The session, filled by events (64 a batch, in order, gap-free).
    let before_session = LIVE.load(Ordering::Relaxed);
    let mut d = session(layout, pages);
    let start = clock();
    for chunk in hashes.chunks(4096) {
        for payload in workload::payloads(layout, chunk, d.event_id + 1) {
            d.seq += 1;
            let seq = d.seq.to_be_bytes();
            let fx = d.handle(Input::Message(&[b"", &seq, &payload]));
            assert!(fetch(&fx).is_none(), "{fx:?}");
        }
        d.event_id += (chunk.len() * per_page) as u64;
    }
    let fill = start.elapsed();
    let c = d.session.counters();
    assert_eq!((c.gaps, c.restarts), (0, 0), "{c:?}");
    assert_eq!(
        (c.pages, c.objects),
        (pages as u64, objects as u64),
        "{c:?}"
    );
    assert_eq!(d.session.health(), Health::Live);
    let session_bytes = LIVE.load(Ordering::Relaxed) - before_session;

    // The key list the master gives after the segment left (the driver's bytes), and which
    // pages stay claimed.
    let mut keys = String::new();
    let mut ends = Vec::with_capacity(objects);
    let mut key = String::new();
    let mut claimed = vec![true; pages];
    let mut left_out = 0;
    for (i, page) in hashes.iter().enumerate() {
        for (j, suffix) in suffixes.iter().enumerate() {
            if gone((i * per_page + j) as u64) {
                claimed[i] = false;
                left_out += 1;
                continue;
            }
            layout.write_object_key(page, suffix, &mut key);
            keys.push_str(&key);
            ends.push(keys.len());
        }
    }
    let mut lines: Vec<&[u8]> = Vec::with_capacity(ends.len());
    let mut from = 0;
    for &end in &ends {
        lines.push(&keys.as_bytes()[from..end]);
        from = end;
    }
    // The reader's queries: runs of pages that stay present, spread over the table.
    let kept: Vec<PageHash> = hashes
        .iter()
        .zip(&claimed)
        .filter(|(_, c)| **c)
        .map(|(h, _)| *h)
        .collect();
    let stride = (kept.len() / 4096).max(1);
    let probes: Vec<PageHash> = kept.iter().step_by(stride).copied().collect();

    // The unmount counter moves: the session asks for a key list.
    let fx = d.read_signals(1);
    let request = fetch(&fx).expect("a change asks for a key list");
    assert_eq!(d.session.health(), Health::Reconciling);

    let reader = d.session.reader();
    let done = AtomicBool::new(false);
    let (queries, busy, longest_query, measured) = std::thread::scope(|scope| {
        let querying = scope.spawn(|| {
            let (mut queries, mut busy, mut longest) = (0usize, 0usize, Duration::ZERO);
            let mut windows = probes.chunks(QUERY_PAGES).cycle();
            while !done.load(Ordering::Relaxed) {
                let window = windows.next().expect("some pages stay present");
                let start = clock();
                let answer = reader.query(&Lookup::page_hashes(window));
                longest = longest.max(start.elapsed());
                queries += 1;
                match answer {
                    Ok(hits) => assert_eq!(
                        hits.prefix_pages,
                        window.len(),
                        "a page present all along missed during the reconcile"
                    ),
                    Err(QueryError::Busy) => busy += 1,
                    Err(e) => panic!("{e:?}"),
                }
            }
            (queries, busy, longest)
        });

        let before = LIVE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let mut longest = (Duration::ZERO, "");
        let mut longest_lines = Duration::ZERO;
        let mut timed = |d: &mut Driven, step: &'static str, input: Input<'_>| {
            let start = clock();
            let fx = d.handle(input);
            let spent = start.elapsed();
            if spent > longest.0 {
                longest = (spent, step);
            }
            if step == "SnapshotLines" {
                longest_lines = longest_lines.max(spent);
            }
            (fx, spent)
        };
        let start = clock();
        let watermark = Some(Watermark {
            seq: Seq(d.seq),
            events: Some(d.event_id),
        });
        let (fx, _) = timed(
            &mut d,
            "SnapshotBegin",
            Input::SnapshotBegin { request, watermark },
        );
        assert!(fx
            .iter()
            .all(|e| !matches!(e, Effect::Report(Report::Cleared { .. }))));
        let mut chunks = 0;
        for chunk in lines.chunks(CHUNK_LINES) {
            let _ = timed(
                &mut d,
                "SnapshotLines",
                Input::SnapshotLines {
                    request,
                    lines: chunk,
                },
            );
            chunks += 1;
        }
        let cpu = thread_cpu();
        let (mut fx, mut end) = timed(&mut d, "SnapshotEnd", Input::SnapshotEnd { request });
        // The rest of the reconcile is applied in slices, each due at once through the timer
        // (a driver lets queries and events in between): `end` sums them.
        let mut slices = 0;
        while !fx
            .iter()
            .any(|e| matches!(e, Effect::Report(Report::Reconciled { .. })))
        {
            let (more, spent) = timed(&mut d, "a slice (Timeout)", Input::Timeout);
            end += spent;
            fx = more;
            slices += 1;
            assert!(slices < 100_000, "the reconcile never ends");
        }
        let end_cpu = thread_cpu().zip(cpu).map(|(after, before)| after - before);
        let handover = start.elapsed();
        let peak_extra = PEAK.load(Ordering::Relaxed).saturating_sub(before);
        done.store(true, Ordering::Relaxed);
        let (queries, busy, longest_query) = querying.join().expect("the reader thread");
        let reconciled = fx.iter().find_map(|e| match e {
            Effect::Report(Report::Reconciled { removed, restored }) => Some((*removed, *restored)),
            _ => None,
        });
        assert_eq!(reconciled, Some((left_out, 0)), "{fx:?}");
        (
            queries,
            busy,
            longest_query,
            (
                chunks,
                handover,
                longest,
                longest_lines,
                end,
                end_cpu,
                peak_extra,
            ),
        )
    });
    let (chunks, handover, longest, longest_lines, end, end_cpu, peak_extra) = measured;

    // The check: live again, the objects left out unclaimed, the rest claimed.
    assert_eq!(d.session.health(), Health::Live);
    let c = d.session.counters();
    assert_eq!(
        (c.reconciles_completed, c.objects),
        (1, (objects - left_out) as u64),
        "{c:?}"
    );
    for (page, claimed) in hashes.iter().zip(&claimed) {
        let hits = d
            .session
            .query(&Lookup::page_hashes(std::slice::from_ref(page)))
            .expect("the default layout answers");
        assert_eq!(hits.prefix_pages == 1, *claimed, "page {page:?}");
    }
    Row {
        name,
        objects,
        pages,
        removed: left_out,
        pages_unclaimed: claimed.iter().filter(|c| !**c).count(),
        session_bytes,
        fill,
        chunks,
        handover,
        longest: longest.0,
        longest_step: longest.1,
        longest_lines,
        end,
        end_cpu,
        peak_extra,
        queries,
        busy,
        longest_query,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

fn main() {
    let args = BenchArgs::from_env();
    // `RECONCILE_OBJECTS=16777216` measures other sizes (comma-separated; no figures written).
    let custom = std::env::var("RECONCILE_OBJECTS");
    let sizes: Vec<usize> = match &custom {
        Ok(list) => list
            .split(',')
            .map(|n| n.trim().parse().expect("RECONCILE_OBJECTS: object counts"))
            .collect(),
        Err(_) if args.quick => vec![1 << 12, 1 << 14],
        Err(_) => vec![100_000, 1_000_000],
    };
    let layouts = [("reconcile/tp8", workload::tp8()), ("reconcile/mla", mla())];
    assert_eq!(layouts[0].1.object_count(), 16);
    assert_eq!(layouts[1].1.object_count(), 1);
    println!(
        "reconcile: a key list lacking ~{:.0} % of the objects, handed over in chunks of {CHUNK_LINES} lines",
        GONE_PER_MILLE as f64 / 10.0
    );
    println!(
        "{:<14} {:>8} {:>8} {:>7} {:>7} {:>6} {:>6} {:>9} {:>24} {:>7} {:>9} {:>9} {:>9} {:>7} {:>20}",
        "layout",
        "objects",
        "pages",
        "removed",
        "unclaim",
        "MiB",
        "chunks",
        "handover",
        "longest handle",
        "Lines",
        "End",
        "End CPU",
        "peak +MiB",
        "fill",
        "reader n/busy/max",
    );
    let mut rows = Vec::new();
    for (name, layout) in &layouts {
        if !args.is_selected(name) {
            continue;
        }
        for &objects in &sizes {
            let r = run(name, layout, objects);
            println!(
                "{:<14} {:>8} {:>8} {:>7} {:>7} {:>6.1} {:>6} {:>7.1}ms {:>8.1}ms {:>13} {:>5.1}ms {:>7.1}ms {:>9} {:>9.1} {:>5.0}ms {:>9}/{}/{:.2}ms",
                r.name,
                r.objects,
                r.pages,
                r.removed,
                r.pages_unclaimed,
                mib(r.session_bytes),
                r.chunks,
                ms(r.handover),
                ms(r.longest),
                r.longest_step,
                ms(r.longest_lines),
                ms(r.end),
                r.end_cpu
                    .map_or_else(|| "-".to_owned(), |c| format!("{:.1}ms", ms(c))),
                mib(r.peak_extra),
                ms(r.fill),
                r.queries,
                r.busy,
                ms(r.longest_query),
            );
            rows.push(r);
        }
    }
    println!(
        "(MiB: the session after the fill; handover: SnapshotBegin to SnapshotEnd, wall; longest \
         handle: the longest single call (the writer's longest hold); Lines: the longest \
         SnapshotLines call; End: SnapshotEnd and the \
         slices after it, which apply the list (summed); End CPU: their thread CPU time; peak +MiB: the peak during the \
         handover above the bytes before it; fill: the events' ingest; reader: queries of {QUERY_PAGES} \
         pages that stay present, during the handover: count/Busy answers/longest)"
    );
    if !args.quick && custom.is_err() && !rows.is_empty() {
        let json: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "{{\"layout\":\"{}\",\"objects\":{},\"pages\":{},\"removed\":{},\"pages_unclaimed\":{},\"session_bytes\":{},\"chunks\":{},\"handover_ns\":{},\"longest_handle_ns\":{},\"longest_step\":\"{}\",\"longest_lines_ns\":{},\"end_ns\":{},\"end_cpu_ns\":{},\"peak_extra_bytes\":{},\"queries\":{},\"busy\":{},\"longest_query_ns\":{}}}",
                    r.name,
                    r.objects,
                    r.pages,
                    r.removed,
                    r.pages_unclaimed,
                    r.session_bytes,
                    r.chunks,
                    r.handover.as_nanos(),
                    r.longest.as_nanos(),
                    r.longest_step,
                    r.longest_lines.as_nanos(),
                    r.end.as_nanos(),
                    r.end_cpu.map_or_else(|| "null".to_owned(), |c| c.as_nanos().to_string()),
                    r.peak_extra,
                    r.queries,
                    r.busy,
                    r.longest_query.as_nanos(),
                )
            })
            .collect();
        perf::write_result("reconcile.json", &format!("[{}]\n", json.join(",")));
    }
}
