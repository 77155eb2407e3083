//! Row 4: end to end over loopback ZeroMQ, for both transports. Events per second a subscriber
//! ingests from the emulated master with zero gaps (batches of 64 events, flow-controlled so
//! that nothing is dropped), and the latency of a 256-page query (page size 64, TP 8, all hits)
//! from 4 threads idle and from 1, 2 and 4 threads while the subscriber ingests at full speed.
//! The core fed the same batches from memory is the ceiling. Writes `<target>/perf/e2e.json`.
//!
//! ```text
//! cargo bench -p hicache-index-testkit --bench e2e [-- e2e/core|e2e/tokio|e2e/smol]
//! ```
//! `cargo bench -- --test` runs a tiny load once and checks it (no gap, nothing dropped, every
//! query answered in full) without writing figures. Figures are written only when every part
//! ran.

use std::time::Duration;

use hicache_index_bench::perf::{self, BenchArgs};
use hicache_index_testkit::bench::{
    core_feed_rate, ingest_throughput, query_latency, IngestReport, LatencyReport,
};
use hicache_index_testkit::runtimes::{Smol, Tokio};
use hicache_index_testkit::Runtime;
use serde_json::{json, Value};

/// Pages of the queried request.
const PAGES: usize = 256;

/// How much work one run does.
struct Load {
    /// Events ingested for the rate (and fed to the core alone).
    events: u64,
    /// How long each latency run queries.
    duration: Duration,
    /// Whether to measure latency without ingest too (4 threads).
    idle: bool,
    /// Query threads of the latency runs while ingesting.
    threads: &'static [usize],
}

const FULL: Load = Load {
    events: 10_000_000,
    duration: Duration::from_secs(5),
    idle: true,
    threads: &[1, 2, 4],
};

const QUICK: Load = Load {
    events: 64 * 1024,
    duration: Duration::from_millis(200),
    idle: false,
    threads: &[4],
};

fn main() {
    let args = BenchArgs::from_env();
    let load = if args.quick { QUICK } else { FULL };
    let mut figures = serde_json::Map::new();
    let mut every_part = true;
    if args.is_selected("e2e/core") {
        let r = core_feed_rate(load.events);
        print_ingest("core alone (no IO)", &r);
        check_ingest("core", &r, true);
        figures.insert(
            "core_events_per_second".into(),
            r.events_per_second().into(),
        );
    } else {
        every_part = false;
    }
    let mut runtimes = serde_json::Map::new();
    for name in ["tokio", "smol"] {
        if !args.is_selected(&format!("e2e/{name}")) {
            every_part = false;
            continue;
        }
        let figures = match name {
            "tokio" => measure::<Tokio>(name, &load, args.quick),
            _ => measure::<Smol>(name, &load, args.quick),
        };
        runtimes.insert(name.into(), figures);
    }
    figures.insert("pages".into(), PAGES.into());
    figures.insert("runtimes".into(), runtimes.into());
    if !args.quick && every_part {
        perf::write_result("e2e.json", &format!("{}\n", Value::Object(figures)));
    }
}

/// Ingest rate, then query latency: idle, then while ingesting from each thread count.
fn measure<R: Runtime>(name: &str, load: &Load, quick: bool) -> Value {
    let r = ingest_throughput::<R>(load.events);
    print_ingest(&format!("{name}: ingest"), &r);
    check_ingest(name, &r, quick);
    let mut latency = Vec::new();
    let runs = load
        .idle
        .then_some((4, false))
        .into_iter()
        .chain(load.threads.iter().map(|&t| (t, true)));
    for (threads, ingest) in runs {
        let l = query_latency::<R>(threads, PAGES, load.duration, ingest);
        print_latency(name, threads, ingest, &l);
        check_latency(name, &l, quick);
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        latency.push(json!({
            "threads": threads,
            "ingesting": ingest,
            "queries": l.queries,
            "p50_us": us(l.p50),
            "p90_us": us(l.p90),
            "p99_us": us(l.p99),
            "p999_us": us(l.p999),
            "max_us": us(l.max),
            "ingest_events_per_second": l.ingest_events_per_second,
            "gaps": l.gaps,
            "restarts": l.restarts,
        }));
    }
    json!({
        "events": r.events,
        "seconds": r.seconds,
        "events_per_second": r.events_per_second(),
        "gaps": r.gaps,
        "restarts": r.restarts,
        "dropped": r.dropped,
        "latency": latency,
    })
}

/// Panics when a run went wrong: always when nothing was ingested, and in quick mode (the CI
/// smoke) on any gap, restart or dropped message too.
fn check_ingest(name: &str, r: &IngestReport, strict: bool) {
    assert!(r.events > 0 && r.batches > 0, "{name}: nothing ingested");
    if strict {
        assert_eq!(
            (r.gaps, r.restarts, r.dropped),
            (0, 0, 0),
            "{name}: gaps, restarts or drops: {r:?}"
        );
    }
}

/// Panics when a query answered less than the whole request (the pages are all present), and
/// in quick mode on a gap or restart too.
fn check_latency(name: &str, l: &LatencyReport, strict: bool) {
    assert!(l.queries > 0, "{name}: no query answered");
    assert_eq!(l.prefix_pages, PAGES, "{name}: a query missed pages");
    if strict {
        assert_eq!(
            (l.gaps, l.restarts),
            (0, 0),
            "{name}: gaps or restarts while querying"
        );
    }
}

fn print_ingest(what: &str, r: &IngestReport) {
    println!(
        "{what}: {} events in {} batches in {:.3} s = {:.0} events/s, gaps {}, restarts {}, \
         dropped {}",
        r.events,
        r.batches,
        r.seconds,
        r.events_per_second(),
        r.gaps,
        r.restarts,
        r.dropped
    );
}

fn print_latency(name: &str, threads: usize, ingest: bool, l: &LatencyReport) {
    println!(
        "{name}: {PAGES}-page queries from {threads} threads {}: {} queries, p50 {:?} p90 {:?} \
         p99 {:?} p99.9 {:?} max {:?}, ingest {:.0} events/s, gaps {}, restarts {}",
        if ingest { "while ingesting" } else { "idle" },
        l.queries,
        l.p50,
        l.p90,
        l.p99,
        l.p999,
        l.max,
        l.ingest_events_per_second,
        l.gaps,
        l.restarts
    );
}
