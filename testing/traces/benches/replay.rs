//! The trace replay (issue 31, item 1): Mooncake's FAST'25 conversation and synthetic traces
//! through a store of 25 % of each trace's distinct blocks with per-object LRU eviction, at
//! TP 8 MHA and MLA, page size 64; ours, the reference and a plain exact-key set follow the
//! master's messages on one core in one run, every answer checked against the store.
//!
//! `cargo bench -p hicache-index-traces --bench replay` replays both whole traces and writes
//! `<target>/perf/traces.json`; `-- --quick` (or `-- --test`, as CI runs every bench) replays a
//! slice of each and writes nothing; words filter (`conversation`, `synthetic`, `tp8`, `mla`).
//! Fails (exit 1) on any wrong answer.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

use hicache_index_bench::perf::{self, BenchArgs};
use hicache_index_traces::{
    replay, replay_concurrent, Meter, Model, ReplayConfig, Trace, TraceName,
};

/// The store's capacity: a quarter of each trace's distinct blocks.
const CAPACITY: f64 = 0.25;
/// Requests of each trace in quick mode.
const QUICK_REQUESTS: [(TraceName, usize); 2] =
    [(TraceName::Conversation, 400), (TraceName::Synthetic, 150)];

const ACCOUNTS: usize = 3;
const NONE: usize = usize::MAX;
static CURRENT: AtomicUsize = AtomicUsize::new(NONE);
static LIVE: [AtomicIsize; ACCOUNTS] = [const { AtomicIsize::new(0) }; ACCOUNTS];

/// Adds every allocation and removal to the account entered last (the replay is one thread).
struct Counting;

fn count(delta: isize) {
    let account = CURRENT.load(Ordering::Relaxed);
    if account < ACCOUNTS {
        LIVE[account].fetch_add(delta, Ordering::Relaxed);
    }
}

// SAFETY: forwards every call to the system allocator unchanged and only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: AllocLayout) -> *mut u8 {
        count(layout.size() as isize);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: AllocLayout) {
        count(-(layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: AllocLayout) -> *mut u8 {
        count(layout.size() as isize);
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: AllocLayout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The bench's meter: the counting allocator's accounts, zeroed per replay.
struct Accounts;

impl Meter for Accounts {
    fn enter(&self, account: usize) {
        CURRENT.store(account, Ordering::Relaxed);
    }

    fn leave(&self) {
        CURRENT.store(NONE, Ordering::Relaxed);
    }

    fn live(&self, account: usize) -> Option<usize> {
        Some(LIVE[account].load(Ordering::Relaxed).max(0) as usize)
    }
}

fn main() {
    let args = BenchArgs::from_env();
    let quick = args.quick || std::env::args().any(|a| a == "--quick");
    let mut results = Vec::new();
    let mut wrong = 0;
    for name in TraceName::ALL {
        let selected = |model: Model| {
            args.is_selected(&format!("replay/{}/{}", name.as_str(), model.as_str()))
        };
        if !Model::ALL.into_iter().any(selected) {
            continue;
        }
        let mut trace = Trace::load(name);
        if quick {
            let n = QUICK_REQUESTS.iter().find(|(t, _)| *t == name).map(|q| q.1);
            trace = trace.slice(n.expect("a quick slice of every trace"));
        }
        for model in Model::ALL.into_iter().filter(|m| selected(*m)) {
            for live in &LIVE {
                live.store(0, Ordering::Relaxed);
            }
            let config = ReplayConfig::new(model, CAPACITY);
            let replayed = replay(&trace, &config, &Accounts);
            println!("{replayed}");
            wrong += replayed.wrong_answers();
            let beside = replay_concurrent(&trace, &config);
            let q = |f: &hicache_index_traces::QueryFigures| {
                format!(
                    "{:.0}/s (p50 {:.1} µs, p99 {:.1} µs)",
                    f.per_second(),
                    f.p50_ns as f64 / 1e3,
                    f.p99_ns as f64 / 1e3
                )
            };
            println!(
                "  one writer and one query thread (ours): writer {:.2} M events/s; by hashes {}; \
                 by tokens {}; {} of {} queries answered Busy\n",
                beside.events_per_second() / 1e6,
                q(&beside.by_hashes),
                q(&beside.by_tokens),
                beside.busy,
                beside.busy + beside.by_hashes.count + beside.by_tokens.count,
            );
            let mut json = replayed.to_json();
            json["one_writer_one_query_thread"] = serde_json::json!({
                "events_per_second": beside.events_per_second(),
                "by_hashes": beside.by_hashes.to_json(),
                "by_tokens": beside.by_tokens.to_json(),
                "busy": beside.busy,
            });
            results.push(json);
        }
    }
    if wrong > 0 {
        eprintln!("{wrong} wrong answers");
        std::process::exit(1);
    }
    if !quick && args.filters.is_empty() {
        let json = serde_json::to_string_pretty(&results).expect("figures serialise");
        perf::write_result("traces.json", &json);
    }
}
