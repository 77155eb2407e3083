//! Measurements over loopback (run them in release mode; nothing here asserts a time):
//! ingest rate with zero gaps, and query latency while ingesting at full speed. The `e2e`
//! bench of this crate runs them (`cargo bench -p hicache-index-testkit --bench e2e`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use hicache_index::{Config, EventKind, Layout, Lookup, ModelLayout, SglangParams};
use hicache_index_driver::{QueryHandle, SubscriberConfig};
use hicache_index_emulator::{Emulator, EmulatorConfig};
use hicache_index_shortcuts::Shortcuts;
use hicache_index_wire::{EventIdSlots, FIXED_WIDTH_EVENT_ID};

use crate::{wait_subscribed, EmulatorPeer, Runtime};

/// What an ingest run measured.
#[derive(Clone, Copy, Debug)]
pub struct IngestReport {
    /// Events applied during the timed part.
    pub events: u64,
    /// Batches applied during the timed part.
    pub batches: u64,
    /// Seconds from the first batch sent to the last one applied.
    pub seconds: f64,
    /// Gaps the subscriber saw (must be 0 for the figure to count).
    pub gaps: u64,
    /// Publisher restarts the subscriber saw (must be 0: each one clears the index).
    pub restarts: u64,
    /// Messages dropped as malformed or stray (must be 0).
    pub dropped: u64,
}

impl IngestReport {
    /// Events per second.
    pub fn events_per_second(&self) -> f64 {
        self.events as f64 / self.seconds
    }
}

/// What a query-latency run measured.
#[derive(Clone, Debug)]
pub struct LatencyReport {
    /// Queries answered.
    pub queries: usize,
    /// Latency percentiles (p50, p90, p99, p99.9) and the maximum.
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// 99.9th percentile.
    pub p999: Duration,
    /// Slowest query.
    pub max: Duration,
    /// Events per second ingested meanwhile (0 when not ingesting).
    pub ingest_events_per_second: f64,
    /// Prefix pages of every answer (the request is fully present: must equal the pages asked).
    pub prefix_pages: usize,
    /// Gaps the subscriber saw meanwhile (must be 0).
    pub gaps: u64,
    /// Publisher restarts the subscriber saw meanwhile (must be 0).
    pub restarts: u64,
}

/// The benchmark's layout: page size 64, TP 8 (16 objects a page, 4 pages a 64-event batch).
pub fn bench_layout() -> Layout {
    Layout::from_sglang(&SglangParams::new(64, 8)).expect("a valid layout")
}

/// Pre-encoded batches: `pairs` batches storing 4 fresh pages each, then `pairs` batches
/// removing them, so the index stays bounded however long the stream runs. Before each send a
/// batch's event ids are renumbered to follow the last ones sent: the batches are cycled, and
/// event ids that go back would be taken for a publisher restart (which clears the index).
struct Churn {
    payloads: Vec<Vec<u8>>,
    /// Where each payload's event ids are.
    ids: Vec<EventIdSlots>,
    /// The next event id to send.
    next_id: u64,
    /// The next payload to send.
    next: usize,
}

impl Churn {
    fn new(emulator: &Emulator, layout: &Layout, pairs: usize) -> Churn {
        let pages: Vec<Vec<String>> = (0..pairs as u32)
            .map(|b| {
                let tokens: Vec<u32> = (0..4 * 64).map(|i| 1_000_000 + b * 1024 + i).collect();
                let keys: Vec<String> = layout
                    .page_hashes(&tokens, hicache_index::Namespace::NONE)
                    .flat_map(|p| layout.object_keys(&p).collect::<Vec<_>>())
                    .collect();
                assert_eq!(keys.len(), 64);
                keys
            })
            .collect();
        let batches = pages
            .iter()
            .map(|keys| (EventKind::Stored, keys))
            .chain(pages.iter().map(|keys| (EventKind::Removed, keys)));
        let mut payloads = Vec::with_capacity(2 * pairs);
        let mut ids = Vec::with_capacity(2 * pairs);
        for (i, (kind, keys)) in batches.enumerate() {
            let first = FIXED_WIDTH_EVENT_ID + (i * keys.len()) as u64;
            let payload = emulator.encode_batch_with_ids(kind, keys, first);
            let slots = EventIdSlots::find(&payload);
            assert_eq!(slots.len(), keys.len(), "every event id can be renumbered");
            payloads.push(payload);
            ids.push(slots);
        }
        Churn {
            payloads,
            ids,
            next_id: FIXED_WIDTH_EVENT_ID,
            next: 0,
        }
    }

    /// Renumbers the next `n` batches (at most all of them) to follow the event ids handed out
    /// so far, and returns them in order.
    fn take(&mut self, n: usize) -> impl Iterator<Item = &[u8]> {
        let len = self.payloads.len();
        let (first, n) = (self.next, n.min(len));
        for k in 0..n {
            let i = (first + k) % len;
            self.next_id = self.ids[i].renumber(&mut self.payloads[i], self.next_id);
        }
        self.next = (first + n) % len;
        let payloads = &self.payloads;
        (0..n).map(move |k| payloads[(first + k) % len].as_slice())
    }
}

fn subscriber_config(endpoint: String) -> SubscriberConfig {
    let mut config = SubscriberConfig::new(Config {
        endpoint: Some(endpoint),
        layouts: vec![ModelLayout {
            model: None,
            layout: bench_layout(),
        }],
        ..Config::default()
    });
    config.metrics_interval = Duration::from_secs(1);
    config
}

/// Starts an emulated master (its send queue unbounded) and a subscriber on `R` whose
/// subscription carries events, with the churn of batches that feeds it.
fn subscribed<R: Runtime>() -> (EmulatorPeer, Churn, QueryHandle, R::Running) {
    let emulator = Emulator::start(EmulatorConfig {
        send_hwm: 0,
        ..EmulatorConfig::default()
    })
    .expect("the emulator starts");
    let mut churn = Churn::new(&emulator, &bench_layout(), 2048);
    // The probes of `wait_subscribed` are the emulator's own batches: their event ids run on
    // into the churn's (a break in event ids is a publisher restart, which clears the index).
    emulator.set_next_event_id(FIXED_WIDTH_EVENT_ID);
    let peer = EmulatorPeer(emulator);
    let (q, _control, running) = R::spawn(subscriber_config(peer.0.event_endpoint()));
    wait_subscribed(&peer, &q);
    churn.next_id = peer.0.next_event_id();
    (peer, churn, q, running)
}

/// Publishes the churn batches cyclically until `stop`, never more than `window` batches ahead
/// of the subscriber (flow control, so nothing is dropped); returns batches sent.
fn publish(
    emulator: &Emulator,
    q: &QueryHandle,
    churn: &mut Churn,
    total_batches: u64,
    window: u64,
    stop: &dyn Fn() -> bool,
) -> u64 {
    let base = q.counters().batches;
    // Run on from whatever the emulator published itself since (pages stored for queries).
    churn.next_id = emulator.next_event_id();
    let mut sent = 0u64;
    while sent < total_batches && !stop() {
        let applied = q.counters().batches - base;
        if sent - applied >= window / 2 {
            // Ahead enough: let the subscriber work (a spinning publisher steals its core).
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        let n = (window - (sent - applied))
            .min(256)
            .min(total_batches - sent) as usize;
        emulator.send_payloads(churn.take(n));
        // The emulator's own next batch (a probe, say) runs on from the churn's event ids.
        emulator.set_next_event_id(churn.next_id);
        sent += n as u64;
    }
    sent
}

/// Measures how fast a subscriber applies `total_events` published over loopback in batches of
/// 64 events.
pub fn ingest_throughput<R: Runtime>(total_events: u64) -> IngestReport {
    let (peer, mut churn, q, running) = subscribed::<R>();
    let before = q.counters();
    let total_batches = total_events / 64;
    let start = Instant::now();
    publish(&peer.0, &q, &mut churn, total_batches, 4096, &|| false);
    while q.counters().batches - before.batches < total_batches {
        std::thread::sleep(Duration::from_micros(200));
    }
    let seconds = start.elapsed().as_secs_f64();
    let after = q.counters();
    R::shutdown(running);
    IngestReport {
        events: after.events - before.events,
        batches: after.batches - before.batches,
        seconds,
        gaps: after.gaps - before.gaps,
        restarts: after.restarts - before.restarts,
        dropped: after.malformed_payload + after.malformed_seq + after.stray_topic
            - before.malformed_payload
            - before.malformed_seq
            - before.stray_topic,
    }
}

/// Measures the latency of queries for a fully present request of `pages` pages from `threads`
/// threads for `duration`, while the subscriber ingests at full speed (`ingest`) or not.
pub fn query_latency<R: Runtime>(
    threads: usize,
    pages: usize,
    duration: Duration,
    ingest: bool,
) -> LatencyReport {
    let (peer, mut churn, q, running) = subscribed::<R>();
    let layout = bench_layout();
    let tokens: Arc<Vec<u32>> = Arc::new((0..(pages * 64) as u32).collect());
    let hashes: Vec<_> = layout
        .page_hashes(&tokens[..], hicache_index::Namespace::NONE)
        .collect();
    peer.0.store_pages(&layout, &hashes);
    crate::wait_until(&q, "the queried pages", crate::PATIENCE, || {
        crate::prefix(&q, &tokens) == pages
    });

    let stop = Arc::new(AtomicBool::new(false));
    let before = q.counters();
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (q, tokens, stop) = (q.clone(), tokens.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut samples = latency_histogram();
                let mut prefix = usize::MAX;
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let hits = q.query(&Lookup::tokens(&tokens)).expect("a layout");
                    let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
                    samples.saturating_record(ns.max(1));
                    prefix = prefix.min(hits.prefix_pages);
                }
                (samples, prefix)
            })
        })
        .collect();
    if ingest {
        let done = || start.elapsed() >= duration;
        publish(&peer.0, &q, &mut churn, u64::MAX, 4096, &done);
    } else {
        std::thread::sleep(duration);
    }
    stop.store(true, Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    let mut samples = latency_histogram();
    let mut prefix = usize::MAX;
    for w in workers {
        let (s, p) = w.join().expect("a query thread");
        samples
            .add(&s)
            .expect("histograms of the same bounds add up");
        prefix = prefix.min(p);
    }
    let after = q.counters();
    R::shutdown(running);
    assert!(!samples.is_empty(), "some queries");
    let at = |q: f64| Duration::from_nanos(samples.value_at_quantile(q));
    LatencyReport {
        queries: usize::try_from(samples.len()).unwrap_or(usize::MAX),
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        p999: at(0.999),
        max: Duration::from_nanos(samples.max()),
        ingest_events_per_second: (after.events - before.events) as f64 / elapsed,
        prefix_pages: prefix,
        gaps: after.gaps - before.gaps,
        restarts: after.restarts - before.restarts,
    }
}

/// A histogram of query latencies in nanoseconds (1 ns to about 18 minutes, 3 significant
/// digits: figures within 0.1 %).
fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 1 << 40, 3).expect("valid bounds")
}

/// Measures the core alone (no IO): how fast one session applies the benchmark's batches fed
/// from memory, for comparison with [`ingest_throughput`]. Renumbering each batch's event ids
/// (as the publisher does) is inside the timed loop: a few percent.
pub fn core_feed_rate(total_events: u64) -> IngestReport {
    let emulator = Emulator::start(EmulatorConfig::default()).expect("the emulator starts");
    let mut churn = Churn::new(&emulator, &bench_layout(), 2048);
    let mut config = subscriber_config(emulator.event_endpoint()).session;
    config.endpoint = None;
    let mut session = hicache_index::Session::new(config).expect("a valid configuration");
    let batches = total_events / 64;
    let start = Instant::now();
    let now = hicache_index::Instant::ZERO;
    for seq in 1..=batches {
        let payload = churn.take(1).next().expect("a batch");
        let fx = session.feed(now, &[b"", &seq.to_be_bytes(), payload]);
        debug_assert!(fx.is_empty(), "{fx:?}");
    }
    let seconds = start.elapsed().as_secs_f64();
    let c = session.status(now).counters;
    IngestReport {
        events: c.events,
        batches: c.batches,
        seconds,
        gaps: c.gaps,
        restarts: c.restarts,
        dropped: c.malformed_payload + c.malformed_seq + c.stray_topic,
    }
}
