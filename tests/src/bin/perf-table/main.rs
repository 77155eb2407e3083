//! Turns benchmark results into the performance table of `docs/performance.md` (markdown on
//! stdout).
//!
//! With `--write FILE` (`docs/performance.md`), the table replaces what stands between the
//! file's `<!-- perf-table -->` and `<!-- /perf-table -->` lines instead.
//!
//! Run `cargo bench` first: it leaves criterion's estimates under `<target>/criterion/` (rows 1,
//! 2 and 11) and the figures of the other benches under `<target>/perf/` (`memory.json`,
//! `e2e.json`, `sim.json`, `readside.json`, `reconcile.json`, `traces.json`, `scale.json`).
//! Rows whose results are missing are printed as "not run". Every goal's verdict is computed
//! from the numbers.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::path::PathBuf;

use hicache_index_bench::perf;
use serde_json::Value;
use thousands::Separable;

thread_local! {
    /// The table as it is written.
    static TABLE: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Writes one line of the table.
macro_rules! out {
    ($($arg:tt)*) => {
        TABLE.with(|t| {
            let _ = writeln!(t.borrow_mut(), $($arg)*);
        })
    };
}

mod reconcile;
mod scale;
mod traces;

/// The lines around the table in the file `--write` names.
const BEGIN: &str = "<!-- perf-table -->";
const END: &str = "<!-- /perf-table -->";

/// Puts `table` between the [`BEGIN`] and [`END`] lines of `doc`.
fn splice(doc: &str, table: &str) -> Result<String, String> {
    let begin = doc.find(BEGIN).ok_or_else(|| format!("no {BEGIN} line"))?;
    let end = doc[begin..]
        .find(END)
        .map(|e| begin + e)
        .ok_or_else(|| format!("no {END} line after {BEGIN}"))?;
    Ok(format!(
        "{}{BEGIN}\n\n{table}\n{}",
        &doc[..begin],
        &doc[end..]
    ))
}

/// Time per iteration of a criterion benchmark, in nanoseconds: the slope of its linear
/// regression (what criterion prints), else the mean.
fn mean_ns(group: &str, function: &str) -> Option<f64> {
    let path: PathBuf = perf::target_dir()
        .join("criterion")
        .join(group)
        .join(function)
        .join("new/estimates.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    v["slope"]["point_estimate"]
        .as_f64()
        .or_else(|| v["mean"]["point_estimate"].as_f64())
}

/// The figures a custom bench wrote under `<target>/perf/`.
fn figures(name: &str) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(perf::result_path(name)).ok()?).ok()
}

/// The runs a bench left in `<target>/perf/{name}` (a JSON array), or none after printing the
/// row `label` as not run.
fn runs(name: &str, label: &str) -> Vec<Value> {
    match figures(name) {
        Some(Value::Array(runs)) => runs,
        _ => {
            not_run(label);
            Vec::new()
        }
    }
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
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

/// An integer with thousands separators (`1,048,576`).
fn count(v: &Value) -> String {
    v.as_u64()
        .map_or_else(|| v.to_string(), |n| n.separate_with_commas())
}

fn rate(per_second: f64) -> String {
    format!("{:.2} M", per_second / 1e6)
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

fn not_run(label: &str) {
    out!("| {label} | not run | | | | |");
}

fn query_rows() {
    for (group, label) in [
        (
            "query_256_pages_tp8",
            "1. query, 256 pages at TP 8, all hits",
        ),
        ("query_miss_at_page_8", "1. query, miss at page 8"),
    ] {
        let (Some(ours), Some(reference), Some(limit)) = (
            mean_ns(group, "ours"),
            mean_ns(group, "reference"),
            mean_ns(group, "limit_sha256"),
        ) else {
            not_run(label);
            continue;
        };
        let probe = mean_ns(group, "limit_hashbrown_probe").map_or(String::new(), |p| {
            format!(" (a hashbrown probe per page: {})", time(p))
        });
        let (vs_limit, vs_ref) = (ours / limit, reference / ours);
        out!(
            "| {label} | {} | {} | SHA-256 only: {}{probe} | {vs_limit:.2}x the limit; {vs_ref:.1}x faster than the reference | ≤ 1.3x the limit: {} (≥ 8x faster than the reference: retired, SHA-256 bounds both) |",
            time(ours),
            time(reference),
            time(limit),
            verdict(vs_limit <= 1.3),
        );
    }
}

fn memo_row() {
    let group = "query_256_pages_tp8_memo";
    let label = "1. query, 256 pages at TP 8, all hits, every page in the prefix memo";
    let (Some(ours), Some(cold), Some(limit)) = (
        mean_ns(group, "ours_in_memo"),
        mean_ns(group, "ours_cold"),
        mean_ns(group, "limit_sha256"),
    ) else {
        not_run(label);
        return;
    };
    let memo_only = mean_ns(group, "memo_hashes_only").map_or(String::new(), |m| {
        format!(" (the memo's digests alone: {})", time(m))
    });
    let vs_limit = ours / limit;
    out!(
        "| {label} | {}{memo_only} | the same query cold (plan, hash, probe): {} | SHA-256 only: {} | {vs_limit:.2}x the limit | ≤ 0.35x the limit: {} |",
        time(ours),
        time(cold),
        time(limit),
        verdict(vs_limit <= 0.35)
    );
}

fn served_row() {
    let group = "served_query_page_size_4";
    let label = "1. served query (page size 4): a miss at page 1 of 16,384 tokens, without the body's parse";
    let (Some(miss), Some(one), Some(map)) = (
        mean_ns(group, "miss_at_page_1_of_16384_tokens"),
        mean_ns(group, "one_page_hit"),
        mean_ns(group, "miss_at_page_1_of_16384_tokens_page_map"),
    ) else {
        not_run(label);
        return;
    };
    let parse = mean_ns(group, "parse_16384_tokens").map_or(String::new(), |p| {
        format!(" (the body's parse apart: {})", time(p))
    });
    let ratio = miss / one;
    out!(
        "| {label} | {}{parse} | with \"page_map\": true (every page hashed): {} | a 1-page query: {} | {ratio:.2}x the 1-page query | ≤ 2x: {} |",
        time(miss),
        time(map),
        time(one),
        verdict(ratio <= 2.0)
    );
}

fn ingest_row() {
    let group = "ingest_64_event_batches_into_1m_pages";
    let label = "2. ingest: decode + apply, 64-event Mooncake batches into 1M pages, one core";
    let (Some(ours), Some(reference)) = (mean_ns(group, "ours"), mean_ns(group, "reference"))
    else {
        not_run(label);
        return;
    };
    let (eps, ref_eps) = (64.0 / ours * 1e9, 64.0 / reference * 1e9);
    out!(
        "| {label} | {} events/s | {} events/s | | {:.1}x the reference | ≥ 8x the reference: {} |",
        rate(eps),
        rate(ref_eps),
        eps / ref_eps,
        verdict(eps / ref_eps >= 8.0)
    );
}

fn memory_row() {
    let label = "3. memory at 1M pages, TP 8 (16 objects a page), counting allocator";
    let Some(m) = figures("memory.json") else {
        not_run(label);
        return;
    };
    let (pages, objects) = (num(&m["pages"]), num(&m["objects"]));
    let (ours, reference) = (num(&m["ours_bytes"]), num(&m["reference_bytes"]));
    out!(
        "| 3. memory at {} pages, TP 8 ({} objects), counting allocator | {:.1} B/page, {:.2} B/object | {:.0} B/page, {:.1} B/object | | {:.1}x less | ≤ 64 B/page: {}; ≥ 10x less: {} |",
        count(&m["pages"]),
        count(&m["objects"]),
        ours / pages,
        ours / objects,
        reference / pages,
        reference / objects,
        reference / ours,
        verdict(ours / pages <= 64.0),
        verdict(reference / ours >= 10.0)
    );
}

fn e2e_rows() {
    let label = "4. end to end over loopback ZeroMQ";
    let Some(e) = figures("e2e.json") else {
        not_run(label);
        return;
    };
    let core = num(&e["core_events_per_second"]);
    let pages = &e["pages"];
    for name in ["tokio", "smol"] {
        let r = &e["runtimes"][name];
        if r.is_null() {
            not_run(&format!("{label} ({name})"));
            continue;
        }
        let eps = num(&r["events_per_second"]);
        let lost = ["gaps", "restarts", "dropped"].map(|k| r[k].as_u64().unwrap_or(u64::MAX));
        out!(
            "| {label} ({name}): ingest | {} events/s, {} gaps, {} restarts, {} dropped | | the core alone (no IO): {} events/s | {:.2}x the core alone | ≥ 1M/s with 0 gaps: {} |",
            rate(eps),
            lost[0],
            lost[1],
            lost[2],
            rate(core),
            eps / core,
            verdict(eps >= 1e6 && lost == [0, 0, 0])
        );
        let runs = r["latency"].as_array().map_or(&[][..], Vec::as_slice);
        let at = |threads: u64, ingesting: bool| {
            runs.iter().find(|l| {
                l["threads"].as_u64() == Some(threads)
                    && l["ingesting"].as_bool() == Some(ingesting)
            })
        };
        let Some(main) = at(4, true) else {
            not_run(&format!("4. {name}: p99 query latency"));
            continue;
        };
        let us = |v: &Value| time(num(v) * 1e3);
        let mut others: Vec<String> = [(1, true), (2, true), (4, false)]
            .into_iter()
            .filter_map(|(t, ingesting)| {
                let l = at(t, ingesting)?;
                let threads = if t == 1 {
                    "1 thread".to_owned()
                } else {
                    format!("{t} threads")
                };
                let when = if ingesting { "ingesting" } else { "no ingest" };
                Some(format!("{threads}, {when}: {}", us(&l["p99_us"])))
            })
            .collect();
        others.insert(0, format!("its p50 {}", us(&main["p50_us"])));
        out!(
            "| 4. ({name}) p99 latency of a {pages}-page query from 4 threads while ingesting ({} events/s meanwhile) | {} ({}; p99 with {}) | | | | (< 50 µs: retired, a token query's SHA-256 alone costs more) |",
            rate(num(&main["ingest_events_per_second"])),
            us(&main["p99_us"]),
            others[0],
            others[1..].join("; "),
        );
    }
}

fn sim_row() {
    let label = "5. simulator";
    let Some(s) = figures("sim.json") else {
        not_run(label);
        return;
    };
    let (one, all) = (&s["one_thread"], &s["all_threads"]);
    let (one_eps, all_eps) = (
        num(&one["events_per_second"]),
        num(&all["events_per_second"]),
    );
    let jobs = &all["jobs"];
    out!(
        "| {label}: {} seeds x {} events, every check on | {} simulated events/s on {jobs} threads; {} on 1 | | | | ≥ 1M/s: {} on {jobs} threads, {} on 1 |",
        count(&s["seeds"]),
        count(&s["events_per_seed"]),
        rate(all_eps),
        rate(one_eps),
        verdict(all_eps >= 1e6),
        verdict(one_eps >= 1e6)
    );
}

fn models_row() {
    let label = "6. four models side by side against one (each its own key prefix, 1M pages, TP 8)";
    let group = "ingest_64_event_batches_models_side_by_side";
    let (Some(one), Some(four)) = (mean_ns(group, "one_model"), mean_ns(group, "four_models"))
    else {
        not_run(label);
        return;
    };
    let Some(m) = figures("memory.json").filter(|m| !m["four_models_bytes"].is_null()) else {
        not_run(label);
        return;
    };
    let pages = num(&m["pages"]);
    let (one_b, four_b) = (
        num(&m["one_model_bytes"]) / pages,
        num(&m["four_models_bytes"]) / pages,
    );
    let (one_eps, four_eps) = (64.0 / one * 1e9, 64.0 / four * 1e9);
    out!(
        "| {label} | four models: {} events/s, {four_b:.1} B/page | one model: {} events/s, {one_b:.1} B/page | | rate {:.2}x, bytes {:.2}x one model's | one index: rate ≥ 0.9x: {}; bytes ≤ 1.1x: {} |",
        rate(four_eps),
        rate(one_eps),
        four_eps / one_eps,
        four_b / one_b,
        verdict(four_eps / one_eps >= 0.9),
        verdict(four_b / one_b <= 1.1)
    );
}

/// The median over the interleaved slices of a query's p99 while ingesting against its p99
/// alone (`None` from a bench that kept no slices).
fn median_slice_ratio(r: &Value, side: &str, kind: &str) -> Option<f64> {
    let slices = |when: &str| -> Vec<Option<u64>> {
        r[format!("{side}_{kind}")][when]["slices_p99_ns"]
            .as_array()
            .map(|a| a.iter().map(Value::as_u64).collect())
            .unwrap_or_default()
    };
    perf::median_ratio(&slices("ingesting"), &slices("alone"))
}

/// The slice-by-slice ratio, for a row's ratio column.
fn slice_ratio(r: &Value, side: &str, kind: &str) -> String {
    median_slice_ratio(r, side, kind).map_or(String::new(), |x| {
        format!("; its p99 while ingesting over its p99 alone, the median of the slices: {x:.2}x")
    })
}

/// The read side's goal (issue 31): that median at most 1.2x.
fn tail_goal(r: &Value, side: &str, kind: &str) -> String {
    match median_slice_ratio(r, side, kind) {
        Some(x) => format!(
            "p99 beside a writer ≤ 1.2x alone (median of the slices): {}",
            verdict(x <= 1.2)
        ),
        None => "p99 beside a writer ≤ 1.2x alone: not run (no slices)".to_owned(),
    }
}

/// Row 7: the read side under ingest (`readside.json`), busy threads ≤ cores: one writer
/// feeding pre-encoded batches from memory, one query thread; the session's `RwLock` (`lock`)
/// against its lock-free [`hicache_index::Reader`] (`reader`), in the same run.
fn readside_rows() {
    let label = "7. read side under ingest";
    let Some(r) = figures("readside.json") else {
        not_run(label);
        return;
    };
    let cores = count(&r["cores"]);
    let alone_rate = num(&r["ingest_alone"]["events_per_s"]);
    for side in ["lock", "reader"] {
        let phase =
            |kind: &str, when: &str, what: &str| num(&r[format!("{side}_{kind}")][when][what]);
        if phase("hashes", "alone", "p50_ns").is_nan() {
            not_run(&format!("{label} ({side})"));
            continue;
        }
        let (p50, p99_busy) = (
            phase("hashes", "alone", "p50_ns"),
            phase("hashes", "ingesting", "p99_ns"),
        );
        let busy_rate = phase("hashes", "ingesting", "events_per_s");
        // The writer's rate alone from the slices interleaved with the hash query's (the same
        // minutes of the machine), or, from an older bench, the one phase before all others.
        let alone_rate = Some(phase("hashes", "ingest_alone", "events_per_s"))
            .filter(|r| !r.is_nan())
            .unwrap_or(alone_rate);
        // The goal (issue 31): the writer adds nothing to a reader's tail, judged slice by
        // slice (each slice's two phases ran in the same seconds); the lock carries no goal.
        let tail = tail_goal(&r, side, "hashes");
        let goals = if side == "reader" {
            format!(
                "{tail}; ≤ 20 µs: {}; writer ≥ 1M events/s: {}",
                verdict(p99_busy <= 20_000.0),
                verdict(busy_rate >= 1e6)
            )
        } else {
            "(no goal: the lock's figures, beside the reader's)".to_owned()
        };
        out!(
            "| 7. ({side}) p99 of a 256-page query given page hashes while 1 writer thread ingests ({} events/s), 1 query thread, {cores} cores | {} (p50 {}{}) | | its p50 with no ingest: {} (p99: {}{}{}) | {:.1}x that p50 (with no ingest at all, its p99 is {:.1}x its p50){} | {goals} |",
            rate(busy_rate),
            time(p99_busy),
            time(phase("hashes", "ingesting", "p50_ns")),
            undisturbed(&r[format!("{side}_hashes_switches")]["ingesting"]),
            time(p50),
            time(phase("hashes", "alone", "p99_ns")),
            undisturbed(&r[format!("{side}_hashes_switches")]["alone"]),
            cached(&r[format!("{side}_same_hashes")]),
            p99_busy / p50,
            phase("hashes", "alone", "p99_ns") / p50,
            slice_ratio(&r, side, "hashes"),
        );
        let (t50, t99_busy) = (
            phase("tokens", "alone", "p50_ns"),
            phase("tokens", "ingesting", "p99_ns"),
        );
        let goals = if side == "reader" {
            tail_goal(&r, side, "tokens")
        } else {
            "(no goal)".to_owned()
        };
        out!(
            "| 7. ({side}) p99 of a cold 256-page token query while ingesting ({} events/s) | {} (p50 {}) | | its p50 with no ingest: {} (p99: {}) | {:.2}x that p50 (with no ingest at all, its p99 is {:.2}x its p50){} | {goals} |",
            rate(phase("tokens", "ingesting", "events_per_s")),
            time(t99_busy),
            time(phase("tokens", "ingesting", "p50_ns")),
            time(t50),
            time(phase("tokens", "alone", "p99_ns")),
            t99_busy / t50,
            phase("tokens", "alone", "p99_ns") / t50,
            slice_ratio(&r, side, "tokens"),
        );
        out!(
            "| 7. ({side}) ingest with 1 query thread (hash queries) | {} events/s | | no queries: {} events/s | {:.0} % | {} |",
            rate(busy_rate),
            rate(alone_rate),
            100.0 * busy_rate / alone_rate,
            if side == "reader" {
                format!("≥ 90 %: {}", verdict(busy_rate >= 0.9 * alone_rate))
            } else {
                "(no goal)".to_owned()
            }
        );
    }
    // The memo's tail while ingesting, against row 1's SHA-256-only bound.
    let memo = |when: &str, what: &str| num(&r["reader_memo"][when][what]);
    let limit = mean_ns("query_256_pages_tp8_memo", "limit_sha256");
    if !memo("ingesting", "p99_ns").is_nan() {
        let (m50, m99) = (memo("alone", "p50_ns"), memo("ingesting", "p99_ns"));
        // The goal (≤ 0.35x the limit) is row 1's, on criterion's mean; this row reports the
        // tail beside the writer.
        let vs = limit.map_or(String::new(), |l| {
            format!(
                "p50 with no ingest {:.2}x, p99 while ingesting {:.2}x the limit (reported; the goal is row 1's memo row)",
                m50 / l,
                m99 / l
            )
        });
        out!(
            "| 7. (reader) p99 of a 256-page token query, every page in the prefix memo, while ingesting ({} events/s) | {} (p50 {}) | | its p50 with no ingest: {}; SHA-256 only: {} | {:.1}x that p50 | {vs} |",
            rate(memo("ingesting", "events_per_s")),
            time(m99),
            time(memo("ingesting", "p50_ns")),
            time(m50),
            limit.map_or("-".into(), time),
            m99 / m50,
        );
    }
    // Every other batch removing: a query overlapping one reads again, then asks under the lock.
    let removing_rate = num(&r["removing_alone"]["events_per_s"]);
    for side in ["lock", "reader"] {
        let row = &r[format!("{side}_hashes_removing")];
        let p99 = num(&row["ingesting"]["p99_ns"]);
        if p99.is_nan() {
            continue;
        }
        let p50 = num(&r[format!("{side}_hashes")]["alone"]["p50_ns"]);
        let queries = num(&row["ingesting"]["queries"]);
        let busy = num(&row["busy"]);
        let fell_back = if side == "reader" {
            format!(
                "; {} of {} queries asked under the lock ({:.1} %)",
                busy,
                queries,
                100.0 * busy / queries.max(1.0)
            )
        } else {
            String::new()
        };
        out!(
            "| 7. ({side}) p99 of a 256-page hash query while the writer ingests batches every other of which removes ({} events/s; {} alone){fell_back} | {} (p50 {}) | | its p50 with no ingest: {} | {:.1}x that p50 | {} |",
            rate(num(&row["ingesting"]["events_per_s"])),
            rate(removing_rate),
            time(p99),
            time(num(&row["ingesting"]["p50_ns"])),
            time(p50),
            p99 / p50,
            if side == "reader" {
                format!("≤ 20 µs: {}", verdict(p99 <= 20_000.0))
            } else {
                "(no goal)".to_owned()
            }
        );
    }
}

/// From the bench's profiling phases (`<side>_hashes_switches` in `readside.json`): the p99 of
/// the queries no context switch interrupted, how many were interrupted and the queries' own
/// CPU time, as a clause of the row's figures; empty where those phases did not run or the
/// kernel does not show them.
fn undisturbed(phase: &Value) -> String {
    let (p99, switched, queries) = (
        num(&phase["p99_undisturbed_ns"]),
        num(&phase["switched"]),
        num(&phase["queries"]),
    );
    if p99.is_nan() || switched.is_nan() {
        return String::new();
    }
    let cpu = (num(&phase["cpu_p50_ns"]), num(&phase["cpu_p99_ns"]));
    let cpu = if cpu.0.is_nan() || cpu.1.is_nan() {
        String::new()
    } else {
        format!(
            "; the queries' own CPU time (without steal or time switched out; interrupts and the clock reads in it): p50 {}, p99 {}",
            time(cpu.0),
            time(cpu.1)
        )
    };
    format!(
        "; in the profiling phase, not switched out: p99 {}, {} of {} queries switched out{cpu}",
        time(p99),
        (switched as u64).separate_with_commas(),
        (queries as u64).separate_with_commas()
    )
}

/// From the bench's phases that ask the same pages every query, in turn with cold queries
/// (`<side>_same_hashes` in `readside.json`): both p50s and p99s, as a clause of the row's
/// figures; empty where they did not run.
fn cached(phases: &Value) -> String {
    let figure = |phase: &str, what: &str| num(&phases[phase][what]);
    let (p50, p99) = (figure("alone", "p50_ns"), figure("alone", "p99_ns"));
    if p50.is_nan() || p99.is_nan() {
        return String::new();
    }
    let cold = (figure("cold", "p50_ns"), figure("cold", "p99_ns"));
    let cold = if cold.0.is_nan() || cold.1.is_nan() {
        String::new()
    } else {
        format!(
            " (cold, in turn with it: p50 {}, p99 {})",
            time(cold.0),
            time(cold.1)
        )
    };
    format!(
        "; the same 256 pages every query, their memory cached: p50 {}, p99 {}{cold}",
        time(p50),
        time(p99)
    )
}

fn main() {
    out!("Machine: {}.\n", cpu());
    out!("| row | ours | reference | limit | ratios | goal |");
    out!("|---|---|---|---|---|---|");
    query_rows();
    memo_row();
    served_row();
    ingest_row();
    memory_row();
    e2e_rows();
    sim_row();
    models_row();
    readside_rows();
    reconcile::reconcile_rows();
    traces::traces_rows();
    scale::scale_rows();
    scale::clear_row();
    let table = TABLE.with(|t| t.take());
    let mut args = std::env::args().skip(1);
    match (args.next().as_deref(), args.next()) {
        (None, _) => print!("{table}"),
        (Some("--write"), Some(path)) => {
            let written = std::fs::read_to_string(&path)
                .map_err(|e| format!("{path}: {e}"))
                .and_then(|doc| splice(&doc, &table))
                .and_then(|doc| std::fs::write(&path, doc).map_err(|e| format!("{path}: {e}")));
            if let Err(e) = written {
                eprintln!("perf-table: {e}");
                std::process::exit(1);
            }
            println!("wrote the table into {path}");
        }
        _ => {
            eprintln!("usage: perf-table [--write docs/performance.md]");
            std::process::exit(2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_replaces_only_what_stands_between_the_lines() {
        let doc = "intro\n<!-- perf-table -->\nold table\n<!-- /perf-table -->\nnotes\n";
        let out = splice(doc, "| new |\n").expect("both lines");
        assert_eq!(
            out,
            "intro\n<!-- perf-table -->\n\n| new |\n\n<!-- /perf-table -->\nnotes\n"
        );
        assert!(splice("no lines", "x").is_err());
    }
}
