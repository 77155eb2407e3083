//! The replay with one writer and one query thread: the writer runs the store model and feeds
//! ours the master's messages; meanwhile a query thread asks ours, through its lock-free
//! `Reader`, about the requests that arrived last, by page hashes and by tokens in turn.
//!
//! Answers are not checked here (the store moves under them; [`crate::replay()`] checks every
//! answer on one thread): this measures what each side does beside the other.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use hicache_index::{Instant, Lookup, QueryError};

use crate::blocks::{Blocks, RequestPages};
use crate::followers::{Follower, Ours};
use crate::master::Message;
use crate::replay::{ReplayConfig, Stage};
use crate::report::QueryFigures;
use crate::store::Change;
use crate::trace::Trace;

/// The requests the query thread cycles through: the latest this many that arrived.
const RECENT: usize = 64;

/// What the two threads did beside each other.
#[derive(Clone, Debug, Default)]
pub struct Concurrent {
    /// Events the writer applied.
    pub events: u64,
    /// The writer's time in `Session::handle`.
    pub ingest: Duration,
    /// Queries given page hashes.
    pub by_hashes: QueryFigures,
    /// Queries given tokens.
    pub by_tokens: QueryFigures,
    /// Queries answered `Busy` (the writer kept changing what they read).
    pub busy: u64,
}

impl Concurrent {
    /// Returns the writer's events a second.
    pub fn events_per_second(&self) -> f64 {
        if self.ingest.is_zero() {
            0.0
        } else {
            self.events as f64 / self.ingest.as_secs_f64()
        }
    }
}

/// Reads the wall clock: it measures the bench and never reaches a session.
#[allow(clippy::disallowed_methods)]
fn wall() -> std::time::Instant {
    std::time::Instant::now()
}

/// Replays `trace` into ours on this thread while one more thread queries it.
///
/// # Panics
/// If the trace is empty or ours fails to read the master's messages.
pub fn replay_concurrent(trace: &Trace, config: &ReplayConfig) -> Concurrent {
    let Stage {
        layout,
        mut master,
        capacity_pages,
        mut store,
        mut blocks,
        ..
    } = Stage::new(trace, config);
    let mut ours = Ours::new(&layout, Stage::max_pages(capacity_pages));
    let reader = ours.reader();
    let arrived = AtomicUsize::new(0);
    let done = AtomicBool::new(false);
    let mut out = Concurrent::default();
    std::thread::scope(|scope| {
        let asker = scope.spawn(|| ask_recent(trace, &reader, &arrived, &done));
        let mut pages = RequestPages::default();
        let mut changes: Vec<Change> = Vec::new();
        let mut messages: Vec<Message> = Vec::new();
        for (i, request) in trace.requests.iter().enumerate() {
            blocks.request(request, &mut pages);
            let truth = store.present_prefix(&pages.pages);
            store.load(&pages.pages[..truth]);
            changes.clear();
            store.put(&pages.pages, &mut changes);
            let filled = master.publish(request.timestamp, &changes, &blocks, &mut messages);
            let now = Instant::from_millis(request.timestamp);
            let t = wall();
            for message in &messages[..filled] {
                ours.apply(now, &message.frames());
            }
            out.ingest += t.elapsed();
            out.events += changes.len() as u64;
            arrived.store(i + 1, Ordering::Release);
        }
        done.store(true, Ordering::Release);
        let (by_hashes, by_tokens, busy) = asker.join().expect("the query thread ends");
        out.by_hashes = by_hashes;
        out.by_tokens = by_tokens;
        out.busy = busy;
    });
    out
}

/// The query thread: asks about the latest [`RECENT`] arrivals in turn until `done`.
fn ask_recent(
    trace: &Trace,
    reader: &hicache_index::Reader,
    arrived: &AtomicUsize,
    done: &AtomicBool,
) -> (QueryFigures, QueryFigures, u64) {
    let mut blocks = Blocks::new(trace);
    let mut pages = RequestPages::default();
    let mut figures = [QueryFigures::default(), QueryFigures::default()];
    let mut histograms =
        [0, 1].map(|_| Histogram::<u64>::new_with_max(100_000_000_000, 3).expect("valid bounds"));
    let mut busy = 0;
    let mut asked = 0usize;
    while !done.load(Ordering::Acquire) {
        let n = arrived.load(Ordering::Acquire);
        if n == 0 {
            std::thread::yield_now();
            continue;
        }
        let i = n - 1 - asked % n.min(RECENT);
        blocks.request(&trace.requests[i], &mut pages);
        let by_tokens = asked % 2;
        let lookup = if by_tokens == 1 {
            Lookup::tokens(&pages.tokens)
        } else {
            Lookup::page_hashes(&pages.hashes)
        };
        let t = wall();
        let answer = reader.query(&lookup);
        let spent = t.elapsed();
        match answer {
            Err(QueryError::Busy) => busy += 1,
            Err(e) => panic!("one layout answers: {e:?}"),
            Ok(_) => {
                figures[by_tokens].add(spent);
                histograms[by_tokens].saturating_record(spent.as_nanos() as u64);
            }
        }
        asked += 1;
    }
    for (f, h) in figures.iter_mut().zip(&histograms) {
        f.p50_ns = h.value_at_quantile(0.5);
        f.p99_ns = h.value_at_quantile(0.99);
    }
    let [by_hashes, by_tokens] = figures;
    (by_hashes, by_tokens, busy)
}
