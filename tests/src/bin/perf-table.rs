//! Turns benchmark results into the README's performance table (markdown on stdout).
//!
//! Reads criterion's estimates under `target/criterion/` (run `cargo bench -p hicache-index`
//! first) and the JSON figures the custom benches write under `target/perf/`; rows whose results
//! are missing are printed as "not run".

use std::path::{Path, PathBuf};

use serde_json::Value;

fn target() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// Mean time of a criterion benchmark, in nanoseconds.
fn mean_ns(group: &str, function: &str) -> Option<f64> {
    let path = target()
        .join("criterion")
        .join(group)
        .join(function)
        .join("new/estimates.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    v["mean"]["point_estimate"].as_f64()
}

fn perf(name: &str) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(target().join("perf").join(name)).ok()?).ok()
}

fn time(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**missed**"
    }
}

fn cpu() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = info
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{model}, {cores} cores")
}

fn main() {
    println!("Machine: {}.\n", cpu());
    println!("| row | ours | reference | limit | ratios | goal |");
    println!("|---|---|---|---|---|---|");
    for (group, label, limit_fn) in [
        (
            "query_256_pages_tp8",
            "1. query, 256 pages at TP 8, all hits",
            "limit_sha256",
        ),
        (
            "query_miss_at_page_8",
            "1. query, miss at page 8",
            "limit_sha256",
        ),
    ] {
        match (
            mean_ns(group, "ours"),
            mean_ns(group, "reference"),
            mean_ns(group, limit_fn),
        ) {
            (Some(ours), Some(reference), Some(limit)) => {
                let probe = mean_ns(group, "limit_hashbrown_probe")
                    .map_or(String::new(), |p| format!(" (+ probe {})", time(p)));
                let (vs_limit, vs_ref) = (ours / limit, reference / ours);
                println!(
                    "| {label} | {} | {} | SHA-256 only {}{probe} | {vs_limit:.2}x the limit, {vs_ref:.1}x faster than the reference | ≤ 1.3x limit: {}; ≥ 8x reference: {} |",
                    time(ours),
                    time(reference),
                    time(limit),
                    verdict(vs_limit <= 1.3),
                    verdict(vs_ref >= 8.0)
                );
            }
            _ => println!("| {label} | not run | | | | |"),
        }
    }
    let group = "ingest_64_event_batches_into_1m_pages";
    match (mean_ns(group, "ours"), mean_ns(group, "reference")) {
        (Some(ours), Some(reference)) => {
            let (eps, ref_eps) = (64.0 / ours * 1e9, 64.0 / reference * 1e9);
            println!(
                "| 2. ingest, decode + apply, 64-event batches into 1M pages | {:.2} M events/s | {:.2} M events/s | | {:.1}x the reference | ≥ 4M/s: {}; ≥ 10x: {} |",
                eps / 1e6,
                ref_eps / 1e6,
                eps / ref_eps,
                verdict(eps >= 4e6),
                verdict(eps / ref_eps >= 10.0)
            );
        }
        _ => println!("| 2. ingest | not run | | | | |"),
    }
    match perf("memory.json") {
        Some(m) => {
            let pages = m["pages"].as_f64().unwrap_or(1.0);
            let objects = m["objects"].as_f64().unwrap_or(1.0);
            let ours = m["ours_bytes"].as_f64().unwrap_or(0.0);
            let reference = m["reference_bytes"].as_f64().unwrap_or(0.0);
            println!(
                "| 3. memory at {pages} pages, TP 8 | {:.1} B/page, {:.2} B/object | {:.0} B/page, {:.1} B/object | | {:.1}x less | ≤ 128 B/page: {}; ≥ 10x less: {} |",
                ours / pages,
                ours / objects,
                reference / pages,
                reference / objects,
                reference / ours,
                verdict(ours / pages <= 128.0),
                verdict(reference / ours >= 10.0)
            );
        }
        None => println!("| 3. memory | not run | | | | |"),
    }
    match perf("e2e.json") {
        Some(e) => println!(
            "| 4. end to end over loopback ZeroMQ | {:.2} M events/s, {} gaps; p99 query {:.1} µs from 4 threads | | | | ≥ 1M/s: {}; p99 < 50 µs: {} |",
            e["events_per_second"].as_f64().unwrap_or(0.0) / 1e6,
            e["gaps"],
            e["p99_query_us"].as_f64().unwrap_or(f64::NAN),
            verdict(e["events_per_second"].as_f64().unwrap_or(0.0) >= 1e6),
            verdict(e["p99_query_us"].as_f64().is_some_and(|p| p < 50.0))
        ),
        None => println!("| 4. end to end over loopback ZeroMQ | not run | | | | |"),
    }
    match perf("sim.json") {
        Some(s) => println!(
            "| 5. simulator | {:.2} M simulated events/s | | | | ≥ 1M/s: {} |",
            s["events_per_second"].as_f64().unwrap_or(0.0) / 1e6,
            verdict(s["events_per_second"].as_f64().unwrap_or(0.0) >= 1e6)
        ),
        None => println!("| 5. simulator | not run | | | | |"),
    }
}
