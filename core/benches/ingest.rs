//! Row 2: decode + apply of Mooncake batches (20-field event maps, 64 events a batch) into an
//! index already holding 1M pages at TP 8; ours against the reference (rmp-serde into owned
//! strings, a locked set of `String` keys). A pool of 1,024 batches (4,096 fresh pages) is
//! cycled; each batch gets fresh event ids before it is fed again (ids that go back would be a
//! publisher restart, which clears the index), outside the timed part.

mod common;

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hicache_index::{Config, IndexConfig, Instant, ModelLayout, Session};
use hicache_index_sim::encode::{EventIdSlots, FIXED_WIDTH_EVENT_ID};
use hicache_index_sim::reference::ReferenceIndex;

/// Pages already in the index (smaller under `cargo bench -- --test`).
fn preloaded_pages() -> usize {
    if std::env::args().any(|a| a == "--test") {
        1 << 12
    } else {
        1 << 20
    }
}

/// Batches fed in a row between two readings of the clock.
const CHUNK: usize = 256;

/// The cycled batches, with where their event ids are.
struct Pool {
    payloads: Vec<Vec<u8>>,
    ids: Vec<EventIdSlots>,
    /// The next batch to feed.
    next: usize,
    /// The next event id to hand out.
    event_id: u64,
}

impl Pool {
    /// Hands the next `iters` batches to `apply` and returns the time spent in `apply` only:
    /// before each chunk of [`CHUNK`] batches is timed, its batches get fresh event ids.
    fn timed(&mut self, iters: u64, mut apply: impl FnMut(&[u8])) -> Duration {
        let len = self.payloads.len();
        let mut spent = Duration::ZERO;
        let mut left = iters;
        while left > 0 {
            let n = (left as usize).min(CHUNK);
            for k in 0..n {
                let i = (self.next + k) % len;
                self.event_id = self.ids[i].renumber(&mut self.payloads[i], self.event_id);
            }
            // Wall time measures the bench; it never reaches the core.
            #[allow(clippy::disallowed_methods)]
            let start = std::time::Instant::now();
            for k in 0..n {
                apply(&self.payloads[(self.next + k) % len]);
            }
            spent += start.elapsed();
            self.next = (self.next + n) % len;
            left -= n as u64;
        }
        spent
    }
}

fn ingest(c: &mut Criterion) {
    let layout = common::tp8();
    let preload = preloaded_pages();
    let mut session = Session::new(Config {
        layouts: vec![ModelLayout {
            model: None,
            layout: layout.clone(),
        }],
        index: IndexConfig {
            max_pages: preload + (1 << 16),
            ..IndexConfig::default()
        },
        ..Config::default()
    })
    .expect("a valid configuration");
    let mut seq = 0u64;
    let mut event_id = FIXED_WIDTH_EVENT_ID;
    // Preload in chunks so the encoded bytes never pile up.
    for start in (0..preload).step_by(4096) {
        let pages: Vec<_> = (start..(start + 4096).min(preload))
            .map(|i| common::synthetic_page(i as u64))
            .collect();
        for payload in common::payloads(&layout, &pages, event_id) {
            seq += 1;
            let fx = session.feed(Instant::ZERO, &[b"", &seq.to_be_bytes(), &payload]);
            assert!(fx.is_empty(), "{fx:?}");
        }
        event_id += (pages.len() * 16) as u64;
    }
    assert_eq!(session.counters().pages, preload as u64);
    let fresh: Vec<_> = (0..4096)
        .map(|i| common::synthetic_page((preload + i) as u64))
        .collect();
    let payloads = common::payloads(&layout, &fresh, event_id);
    let ids: Vec<EventIdSlots> = payloads.iter().map(|p| EventIdSlots::find(p)).collect();
    assert!(ids.iter().all(|slots| slots.len() == 64));
    let mut pool = Pool {
        payloads,
        ids,
        next: 0,
        event_id,
    };

    let mut g = c.benchmark_group("ingest_64_event_batches_into_1m_pages");
    g.throughput(Throughput::Elements(64));
    g.bench_function("ours", |b| {
        b.iter_custom(|iters| {
            pool.timed(iters, |payload| {
                seq += 1;
                let fx = session.feed(
                    Instant::ZERO,
                    black_box(&[b"", &seq.to_be_bytes(), payload]),
                );
                debug_assert!(fx.is_empty());
                drop(black_box(fx));
            })
        })
    });
    // Built on first use only (filtering on "ours" skips it), and once: criterion calls the
    // closure again for every warm-up round and sample.
    let mut reference: Option<ReferenceIndex> = None;
    g.bench_function("reference", |b| {
        let reference = reference.get_or_insert_with(|| {
            let reference = ReferenceIndex::new();
            for i in 0..preload {
                for key in layout.object_keys(&common::synthetic_page(i as u64)) {
                    reference.store(key);
                }
            }
            reference
        });
        b.iter_custom(|iters| {
            pool.timed(iters, |payload| {
                let applied = reference
                    .apply_payload(black_box(payload))
                    .expect("a valid payload");
                black_box(applied);
            })
        })
    });
    g.finish();
    let c = session.counters();
    assert_eq!((c.gaps, c.restarts), (0, 0), "{c:?}");
}

criterion_group!(benches, ingest);
criterion_main!(benches);
