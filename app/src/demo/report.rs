//! What the demo shows: the live progress line and the report at the end, with whether the demo
//! failed.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hicache_index::Health;

use crate::plumbing::thousands;

use super::args::DemoArgs;
use super::world::{lock, World, MODEL, PAGE, TP};

/// The live progress line.
pub(super) fn progress(world: &World, elapsed: Duration) -> String {
    let c = world.index.counters();
    let secs = elapsed.as_secs_f64().max(1e-3);
    let asked = world.pages_asked.load(Ordering::Relaxed).max(1);
    format!(
        "{:5.1} s  events {} ({}/s)  queries {}  hit rate {:.1}%  p99 {}  {}  gaps {}  restarts {}  false hits {}",
        secs,
        thousands(c.events),
        thousands((c.events as f64 / secs) as u64),
        thousands(world.queries.load(Ordering::Relaxed)),
        100.0 * world.pages_hit.load(Ordering::Relaxed) as f64 / asked as f64,
        micros(world.latency.quantile(0.99)),
        world.index.health().as_str(),
        c.gaps,
        c.restarts + c.disconnects,
        world.false_hits.load(Ordering::Relaxed),
    )
}

/// The report and whether the demo failed.
pub(super) struct Report {
    pub(super) text: String,
    pub(super) failure: Option<String>,
}

pub(super) fn report(
    world: &World,
    c: &hicache_index::Counters,
    health: Health,
    elapsed: Duration,
    args: &DemoArgs,
) -> Report {
    let f = lock(world);
    let secs = elapsed.as_secs_f64();
    let per_second = |n: u64| thousands((n as f64 / secs) as u64);
    let queries = world.queries.load(Ordering::Relaxed);
    let asked = world.pages_asked.load(Ordering::Relaxed);
    let hit = world.pages_hit.load(Ordering::Relaxed);
    let false_hits = world.false_hits.load(Ordering::Relaxed);
    let mut failures = Vec::new();
    let mut t = format!(
        "hicache-index demo: {secs:.1} s against an emulated Mooncake master (loopback, real ZeroMQ and HTTP)\n"
    );
    let over = elapsed.saturating_sub(args.duration);
    if over >= Duration::from_millis(500) {
        let _ = writeln!(
            t,
            "  ({:.1} s past --duration, waiting for an injected fault's recovery)",
            over.as_secs_f64()
        );
    }
    let mut row = |label: &str, text: String| {
        let _ = writeln!(t, "  {label:<19}{text}");
    };
    row(
        "layout",
        format!(
            "{MODEL}, TP {TP} MHA, {PAGE} tokens a page, 16 objects a page; store cap {} pages",
            thousands(args.store_pages as u64)
        ),
    );
    row(
        "events ingested",
        format!(
            "{} ({}/s) in {} batches",
            thousands(c.events),
            per_second(c.events),
            thousands(c.batches)
        ),
    );
    row(
        "from snapshots",
        format!(
            "{} keys in {} of {} resyncs ({} failed)",
            thousands(c.snapshot_keys),
            c.resyncs_completed,
            c.resyncs_started,
            c.resyncs_failed
        ),
    );
    row(
        "verification",
        format!(
            "{} rounds, {} keys checked, {} stale",
            c.verify_rounds,
            thousands(c.verified_keys),
            c.stale_keys_found
        ),
    );
    row(
        "index at the end",
        format!(
            "{} pages, {} objects, health {}",
            thousands(c.pages),
            thousands(c.objects),
            health.as_str()
        ),
    );
    match f.gap_at {
        Some(at) => {
            let seen = if c.gaps > 0 {
                format!(
                    "seen ({} gap, {} sequences missing)",
                    c.gaps, c.missing_sequences
                )
            } else {
                failures.push("the gap was not seen");
                "NOT SEEN".into()
            };
            let recovered = match f.gap_recovered {
                Some(r) => format!(
                    "recovered in {} ms (its {} pages are hits again, by resync)",
                    r.saturating_sub(at).as_millis(),
                    f.gap_pages
                ),
                None => {
                    failures.push("the gap was not recovered from");
                    "NOT RECOVERED".into()
                }
            };
            row(
                &format!("gap at {:.1} s", at.as_secs_f64()),
                format!(
                    "{} events lost in the master's queue: {seen}, {recovered}",
                    f.gap_pages * 16
                ),
            );
        }
        None => {
            failures.push("the gap was not injected");
            row("gap", "NOT INJECTED (no traffic)".into());
        }
    }
    match f.restart_at {
        Some(at) => {
            let forgotten = match f.restart_forgotten {
                Some(r) => format!(
                    "lost objects forgotten in {} ms",
                    r.saturating_sub(at).as_millis()
                ),
                None => "lost objects NOT forgotten".into(),
            };
            let recovered = match f.restart_recovered {
                Some(r) => format!(
                    "live with new pages in {} ms",
                    r.saturating_sub(at).as_millis()
                ),
                None => {
                    failures.push("the restart was not recovered from");
                    "NOT RECOVERED".into()
                }
            };
            row(
                &format!("restart at {:.1} s", at.as_secs_f64()),
                format!(
                    "seen ({} disconnects, {} sequence restarts), {forgotten}, {recovered}",
                    c.disconnects, c.restarts
                ),
            );
        }
        None => {
            failures.push("the restart was not injected");
            row("restart", "NOT INJECTED (the run ended first)".into());
        }
    }
    row(
        "removals",
        format!(
            "{} pages removed with events ({} waits for the index timed out)",
            thousands(f.removals),
            f.removal_waits_timed_out
        ),
    );
    if f.removal_waits_timed_out > 0 {
        failures.push("removals not applied by the index within 10 s");
    }
    let lag = &world.removal_lag;
    row(
        "removal lag",
        format!(
            "p50 {} / p99 {} / max {} over {} batches (the master removing to the index applying the batch)",
            millis(lag.quantile(0.5)),
            millis(lag.quantile(0.99)),
            millis(lag.max()),
            thousands(lag.count())
        ),
    );
    row(
        "queries",
        format!(
            "{} ({}/s) from {} router threads",
            thousands(queries),
            per_second(queries),
            args.routers
        ),
    );
    row(
        "latency p50 / p99",
        format!(
            "{} / {} (in process: hashing and probes)",
            micros(world.latency.quantile(0.5)),
            micros(world.latency.quantile(0.99))
        ),
    );
    row(
        "slowest query",
        format!(
            "{} (hashing, probes and, for a query asked again under the lock, its wait; on a busy CPU also the query thread descheduled)",
            millis(world.latency.max())
        ),
    );
    let locks = world.index.lock_times();
    row(
        "write-lock holds",
        format!(
            "longest: one batch {}, one key-list chunk ({} lines) {}, any other call {}",
            micros(Some(locks.batch_hold)),
            hicache_index_tokio::SNAPSHOT_CHUNK_LINES,
            micros(Some(locks.snapshot_chunk_hold)),
            micros(Some(locks.other_hold))
        ),
    );
    row(
        "queries blocked",
        format!(
            "{} asked again under the lock (the writer kept changing what they read), longest wait {}; every other query took no lock",
            thousands(locks.fallbacks),
            micros(Some(locks.fallback_wait))
        ),
    );
    row(
        "read-lock wait",
        format!(
            "longest {} (the demo's own reads of the session, e.g. the sequence applied; a read waits for one hold, on a busy CPU also while the writer is descheduled)",
            micros(Some(locks.read_wait))
        ),
    );
    row(
        "hit rate",
        format!(
            "{:.1}% of pages ({} of {})",
            100.0 * hit as f64 / asked.max(1) as f64,
            thousands(hit),
            thousands(asked)
        ),
    );
    row(
        "removals racing",
        format!(
            "{} pages claimed by queries begun before the index applied their removal (not false hits)",
            thousands(world.in_flight_claims.load(Ordering::Relaxed))
        ),
    );
    row(
        "false hits",
        format!("{false_hits} (every hit page's 16 objects checked against the master's keys)"),
    );
    if false_hits > 0 {
        let first = world
            .first_false_hit
            .lock()
            .map(|g| g.clone().unwrap_or_default())
            .unwrap_or_default();
        failures.push("false hits");
        row("first false hit", first);
    }
    Report {
        text: t.trim_end().to_owned(),
        failure: (!failures.is_empty()).then(|| format!("demo failed: {}", failures.join(", "))),
    }
}

fn millis(d: Option<Duration>) -> String {
    match d {
        Some(d) => format!("{:.1} ms", d.as_secs_f64() * 1e3),
        None => "-".into(),
    }
}

fn micros(d: Option<Duration>) -> String {
    match d {
        Some(d) => format!("{:.1} µs", d.as_secs_f64() * 1e6),
        None => "-".into(),
    }
}
