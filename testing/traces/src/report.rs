//! What a replay measured and checked, printed as a table and written as JSON.

use std::fmt;
use std::time::Duration;

use hicache_index::Layout;
use serde_json::{json, Value};

use crate::trace::Trace;

/// One kind of query of one follower: how many, how long, how many answers were wrong.
#[derive(Clone, Debug, Default)]
pub struct QueryFigures {
    /// Queries timed (each the first of its request, see [`crate::replay()`]).
    pub count: u64,
    /// Their time, added up.
    pub total: Duration,
    /// Answers whose prefix differed from the store's (of every query, timed or not).
    pub wrong: u64,
    /// The median latency, in nanoseconds.
    pub p50_ns: u64,
    /// The 99th percentile latency, in nanoseconds.
    pub p99_ns: u64,
}

impl QueryFigures {
    /// Counts one timed query that took `spent`.
    pub fn add(&mut self, spent: Duration) {
        self.count += 1;
        self.total += spent;
    }

    /// Returns queries a second on one core (0 for none).
    pub fn per_second(&self) -> f64 {
        per_second(self.count, self.total)
    }

    /// Returns the figures as JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "count": self.count,
            "seconds": self.total.as_secs_f64(),
            "per_second": self.per_second(),
            "wrong": self.wrong,
            "p50_ns": self.p50_ns,
            "p99_ns": self.p99_ns,
        })
    }
}

fn per_second(n: u64, spent: Duration) -> f64 {
    if spent.is_zero() {
        0.0
    } else {
        n as f64 / spent.as_secs_f64()
    }
}

/// What one follower did over the whole replay.
#[derive(Clone, Debug)]
pub struct FollowerFigures {
    /// Its name.
    pub name: &'static str,
    /// Time spent applying the master's messages.
    pub ingest: Duration,
    /// Queries given page hashes.
    pub by_hashes: QueryFigures,
    /// Queries given tokens.
    pub by_tokens: QueryFigures,
    /// The most bytes it held after a request's messages (0 when not counted).
    pub peak_bytes: usize,
}

impl FollowerFigures {
    /// Starts the figures of follower `name`.
    pub fn new(name: &'static str) -> FollowerFigures {
        FollowerFigures {
            name,
            ingest: Duration::ZERO,
            by_hashes: QueryFigures::default(),
            by_tokens: QueryFigures::default(),
            peak_bytes: 0,
        }
    }
}

/// What one replay measured and checked.
#[derive(Clone, Debug)]
pub struct Replayed {
    /// The trace's name.
    pub trace: String,
    /// The layout's name (`tp8`, `mla`).
    pub model: &'static str,
    /// Objects a page.
    pub objects_per_page: usize,
    /// The store's capacity as a fraction of the trace's distinct blocks.
    pub capacity_fraction: f64,
    /// The trace's distinct blocks.
    pub distinct_blocks: usize,
    /// The store's capacity in objects, and in whole pages.
    pub capacity_objects: usize,
    /// The store's capacity in whole pages.
    pub capacity_pages: usize,
    /// The real time the trace spans, in milliseconds.
    pub span_ms: u64,
    /// Requests replayed.
    pub requests: u64,
    /// Their full pages.
    pub pages: u64,
    /// Leading pages present at arrival (the store's truth), added up.
    pub hit_pages: u64,
    /// Leading pages an unbounded store would have held, added up.
    pub ideal_pages: u64,
    /// Messages the master sent.
    pub messages: u64,
    /// `stored` events.
    pub stored: u64,
    /// `removed` events.
    pub removed: u64,
    /// Pages ours claimed that the store did not hold whole (every page of every request).
    pub claimed_absent: u64,
    /// Pages the store held whole that ours did not claim.
    pub present_missed: u64,
    /// Answers of ours given while not live.
    pub not_live: u64,
    /// Commands ours asked for after connecting.
    pub unexpected_commands: u64,
    /// Gaps ours saw.
    pub ours_gaps: u64,
    /// Times ours forgot its index (gap, restart, undecodable batch).
    pub ours_clears: u64,
    /// Pages ours evicted on its own (its capacity).
    pub ours_index_evictions: u64,
    /// Pages in ours at the end.
    pub ours_pages_at_end: u64,
    /// Objects the store evicted.
    pub store_evictions: u64,
    /// The most pages holding at least one object at once.
    pub peak_pages_held: usize,
    /// Time spent in the store model, the blocks' hashes and encoding (not any follower's).
    pub model_time: Duration,
    /// The replay's whole wall time (every follower, the model, the checks).
    pub wall: Duration,
    /// Each follower's figures, ours first.
    pub followers: Vec<FollowerFigures>,
}

impl Replayed {
    /// Starts the figures of a replay of `trace` at `model` (its name) with a store of
    /// `capacity_fraction` of the distinct blocks.
    pub fn new(
        trace: &Trace,
        model: &'static str,
        capacity_fraction: f64,
        layout: &Layout,
        distinct_blocks: usize,
        capacity_objects: usize,
        capacity_pages: usize,
    ) -> Replayed {
        Replayed {
            trace: trace.name.clone(),
            model,
            objects_per_page: layout.object_count(),
            capacity_fraction,
            distinct_blocks,
            capacity_objects,
            capacity_pages,
            span_ms: trace.span_ms(),
            requests: 0,
            pages: 0,
            hit_pages: 0,
            ideal_pages: 0,
            messages: 0,
            stored: 0,
            removed: 0,
            claimed_absent: 0,
            present_missed: 0,
            not_live: 0,
            unexpected_commands: 0,
            ours_gaps: 0,
            ours_clears: 0,
            ours_index_evictions: 0,
            ours_pages_at_end: 0,
            store_evictions: 0,
            peak_pages_held: 0,
            model_time: Duration::ZERO,
            wall: Duration::ZERO,
            followers: Vec::new(),
        }
    }

    /// Returns the events the master sent.
    pub fn events(&self) -> u64 {
        self.stored + self.removed
    }

    /// Returns every wrong answer: ours page by page, and every follower's prefixes.
    pub fn wrong_answers(&self) -> u64 {
        self.claimed_absent
            + self.present_missed
            + self
                .followers
                .iter()
                .map(|f| f.by_hashes.wrong + f.by_tokens.wrong)
                .sum::<u64>()
    }

    /// Returns the hit rate: leading pages present at arrival over full pages.
    pub fn hit_rate(&self) -> f64 {
        ratio(self.hit_pages, self.pages)
    }

    /// Returns the ideal prefix reuse: the hit rate of an unbounded store.
    pub fn ideal_rate(&self) -> f64 {
        ratio(self.ideal_pages, self.pages)
    }

    /// Returns the time of `follower`'s whole replay: every message applied, and every request
    /// asked once by tokens, as a router would (the mean of the timed token queries times the
    /// requests: only every other request's token query is timed).
    pub fn replay_time(&self, follower: &FollowerFigures) -> Duration {
        let q = &follower.by_tokens;
        let queries = if q.count == 0 {
            Duration::ZERO
        } else {
            q.total.mul_f64(self.requests as f64 / q.count as f64)
        };
        follower.ingest + queries
    }

    /// Returns how many times faster than the trace's real time `follower` replays it.
    pub fn speedup(&self, follower: &FollowerFigures) -> f64 {
        let spent = self.replay_time(follower).as_secs_f64();
        if spent == 0.0 {
            0.0
        } else {
            self.span_ms as f64 / 1000.0 / spent
        }
    }

    /// Returns the figures as JSON (for `<target>/perf/traces.json`).
    pub fn to_json(&self) -> Value {
        let followers: Vec<Value> = self
            .followers
            .iter()
            .map(|f| {
                json!({
                    "name": f.name,
                    "ingest_seconds": f.ingest.as_secs_f64(),
                    "events_per_second": per_second(self.events(), f.ingest),
                    "replay_seconds": self.replay_time(f).as_secs_f64(),
                    "times_real_time": self.speedup(f),
                    "by_hashes": f.by_hashes.to_json(),
                    "by_tokens": f.by_tokens.to_json(),
                    "peak_bytes": f.peak_bytes,
                })
            })
            .collect();
        json!({
            "trace": self.trace,
            "model": self.model,
            "objects_per_page": self.objects_per_page,
            "capacity_fraction": self.capacity_fraction,
            "distinct_blocks": self.distinct_blocks,
            "capacity_objects": self.capacity_objects,
            "capacity_pages": self.capacity_pages,
            "span_ms": self.span_ms,
            "requests": self.requests,
            "pages": self.pages,
            "hit_rate": self.hit_rate(),
            "ideal_rate": self.ideal_rate(),
            "messages": self.messages,
            "stored": self.stored,
            "removed": self.removed,
            "claimed_absent": self.claimed_absent,
            "present_missed": self.present_missed,
            "wrong_answers": self.wrong_answers(),
            "not_live": self.not_live,
            "ours_gaps": self.ours_gaps,
            "ours_clears": self.ours_clears,
            "ours_index_evictions": self.ours_index_evictions,
            "store_evictions": self.store_evictions,
            "peak_pages_held": self.peak_pages_held,
            "model_seconds": self.model_time.as_secs_f64(),
            "wall_seconds": self.wall.as_secs_f64(),
            "followers": followers,
        })
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

impl fmt::Display for Replayed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} / {} ({} objects a page): {} requests over {:.1} s of trace time; store {:.0} % \
             of {} distinct blocks = {} objects ({} pages)",
            self.trace,
            self.model,
            self.objects_per_page,
            self.requests,
            self.span_ms as f64 / 1000.0,
            self.capacity_fraction * 100.0,
            self.distinct_blocks,
            self.capacity_objects,
            self.capacity_pages,
        )?;
        writeln!(
            f,
            "  hit rate {:.1} % of {} full pages (ideal prefix reuse, unbounded store: {:.1} %); \
             {} events in {} messages ({} stored, {} removed; {} objects evicted; peak {} pages \
             held)",
            self.hit_rate() * 100.0,
            self.pages,
            self.ideal_rate() * 100.0,
            self.events(),
            self.messages,
            self.stored,
            self.removed,
            self.store_evictions,
            self.peak_pages_held,
        )?;
        writeln!(
            f,
            "  correctness: {} wrong answers ({} pages claimed absent, {} present pages missed, \
             page by page); not live {}, gaps {}, clears {}, index evictions {}, unexpected \
             commands {}",
            self.wrong_answers(),
            self.claimed_absent,
            self.present_missed,
            self.not_live,
            self.ours_gaps,
            self.ours_clears,
            self.ours_index_evictions,
            self.unexpected_commands,
        )?;
        writeln!(
            f,
            "  | follower | x real time | events/s | by hashes /s (p50, p99 µs) | by tokens /s \
             (p50, p99 µs) | peak MiB | wrong |"
        )?;
        for fl in &self.followers {
            writeln!(
                f,
                "  | {} | {:.0}x | {:.2} M | {:.0} ({:.1}, {:.1}) | {:.0} ({:.1}, {:.1}) | {:.1} | \
                 {} |",
                fl.name,
                self.speedup(fl),
                per_second(self.events(), fl.ingest) / 1e6,
                fl.by_hashes.per_second(),
                fl.by_hashes.p50_ns as f64 / 1e3,
                fl.by_hashes.p99_ns as f64 / 1e3,
                fl.by_tokens.per_second(),
                fl.by_tokens.p50_ns as f64 / 1e3,
                fl.by_tokens.p99_ns as f64 / 1e3,
                mib(fl.peak_bytes),
                fl.by_hashes.wrong + fl.by_tokens.wrong,
            )?;
        }
        write!(
            f,
            "  model (store, hashes of blocks, encoding) {:.2} s; whole replay {:.2} s wall",
            self.model_time.as_secs_f64(),
            self.wall.as_secs_f64()
        )
    }
}
