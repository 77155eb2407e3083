//! Loopback measurements of both transports (run in release mode):
//!
//! ```text
//! cargo run --release -p hicache-index-testkit --example bench -- [tokio|smol|both|core] [EVENTS] [SECONDS] [THREADS]
//! ```
//! - core alone: the same batches fed to a session from memory, the ceiling for a transport;
//! - ingest: EVENTS events (default 5,000,000) in batches of 64 from the emulated master,
//!   flow-controlled so none is dropped; prints events/s and the gaps seen (must be 0);
//! - query latency: THREADS threads (default 4) asking for a fully present 256-page request
//!   (page size 64) for SECONDS (default 5), first idle, then while ingesting at full speed;
//!   prints percentiles.

use std::time::Duration;

use hicache_index_testkit::bench::{
    core_feed_rate, ingest_throughput, query_latency, LatencyReport,
};
use hicache_index_testkit::runtimes::{Smol, Tokio};
use hicache_index_testkit::Runtime;

fn run<R: Runtime>(name: &str, events: u64, seconds: u64, threads: usize) {
    let r = ingest_throughput::<R>(events);
    println!(
        "{name}: ingest {} events in {} batches in {:.3} s = {:.0} events/s ({:.0} batches/s), gaps {}, dropped {}",
        r.events,
        r.batches,
        r.seconds,
        r.events_per_second(),
        r.batches as f64 / r.seconds,
        r.gaps,
        r.dropped
    );
    let duration = Duration::from_secs(seconds);
    for ingest in [false, true] {
        let l = query_latency::<R>(threads, 256, duration, ingest);
        print_latency(name, threads, ingest, &l);
    }
}

fn print_latency(name: &str, threads: usize, ingest: bool, l: &LatencyReport) {
    println!(
        "{name}: 256-page queries from {threads} threads {}: {} queries, p50 {:?} p90 {:?} p99 {:?} p99.9 {:?} max {:?}, prefix {} pages, ingest {:.0} events/s",
        if ingest { "while ingesting" } else { "idle" },
        l.queries,
        l.p50,
        l.p90,
        l.p99,
        l.p999,
        l.max,
        l.prefix_pages,
        l.ingest_events_per_second
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let which = args.first().map_or("both", String::as_str);
    let events = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5_000_000);
    let seconds = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5);
    let threads = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(4);
    let core = core_feed_rate(events);
    println!(
        "core alone (no IO): {} events in {:.3} s = {:.0} events/s, gaps {}",
        core.events,
        core.seconds,
        core.events_per_second(),
        core.gaps
    );
    if matches!(which, "tokio" | "both") {
        run::<Tokio>("tokio", events, seconds, threads);
    }
    if matches!(which, "smol" | "both") {
        run::<Smol>("smol", events, seconds, threads);
    }
}
