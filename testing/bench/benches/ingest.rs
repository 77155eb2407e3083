//! Row 2: decode + apply of Mooncake batches (20-field event maps, 64 events a batch) into an
//! index already holding 1M pages at TP 8; ours against the reference (rmp-serde into owned
//! strings, a locked set of `String` keys). A pool of 1,024 batches (4,096 pages beyond the
//! preload, stored again on every cycle) is cycled; each batch gets fresh event ids before it
//! is fed again (ids that go back would be a publisher restart, which clears the index),
//! outside the timed part.
//!
//! Row 6: the same ingest with four models side by side (each its own key prefix, as SGLang puts
//! the served model name in it; pages and batches dealt round robin) against one model, both
//! into 1M pages: the models share one index, so a batch costs the same.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hicache_index::{Config, IndexConfig, Instant, Layout, ModelLayout, Session};
use hicache_index_bench::reference::ReferenceIndex;
use hicache_index_bench::workload;
use hicache_index_shortcuts::{Shortcuts, Untimed};
use hicache_index_wire::{EventIdSlots, FIXED_WIDTH_EVENT_ID};

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
    let layout = workload::tp8();
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
            .map(|i| workload::synthetic_page(i as u64))
            .collect();
        for payload in workload::payloads(&layout, &pages, event_id) {
            seq += 1;
            let fx = session.feed(Instant::ZERO, &[b"", &seq.to_be_bytes(), &payload]);
            assert!(fx.is_empty(), "{fx:?}");
        }
        event_id += (pages.len() * 16) as u64;
    }
    assert_eq!(session.counters().pages, preload as u64);
    let fresh: Vec<_> = (0..4096)
        .map(|i| workload::synthetic_page((preload + i) as u64))
        .collect();
    let payloads = workload::payloads(&layout, &fresh, event_id);
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
                for key in layout.object_keys(&workload::synthetic_page(i as u64)) {
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

/// A session of one model per layout, preloaded with `preload` pages dealt round robin over the
/// models; returns it with the last sequence and the next event id.
fn preloaded_session(layouts: &[Layout], preload: usize) -> (Session, u64, u64) {
    let mut session = Session::new(Config {
        layouts: layouts
            .iter()
            .enumerate()
            .map(|(i, layout)| ModelLayout {
                model: Some(format!("model-{i}")),
                layout: layout.clone(),
            })
            .collect(),
        index: IndexConfig {
            max_pages: preload + (1 << 16),
            ..IndexConfig::default()
        },
        ..Config::default()
    })
    .expect("a valid configuration");
    let mut seq = 0u64;
    let mut event_id = FIXED_WIDTH_EVENT_ID;
    for start in (0..preload).step_by(4096) {
        let end = (start + 4096).min(preload);
        for payload in dealt_payloads(layouts, start..end, &mut event_id) {
            seq += 1;
            let fx = session.feed(Instant::ZERO, &[b"", &seq.to_be_bytes(), &payload]);
            assert!(fx.is_empty(), "{fx:?}");
        }
    }
    assert_eq!(session.counters().pages, preload as u64);
    (session, seq, event_id)
}

/// The batches of `pages`, page `i` of model `i % models`, the models' batches interleaved and
/// numbered in that order from `event_id` (one stream: its event ids run on from batch to
/// batch), which is advanced past them.
fn dealt_payloads(
    layouts: &[Layout],
    pages: std::ops::Range<usize>,
    event_id: &mut u64,
) -> Vec<Vec<u8>> {
    let mut per_model: Vec<std::vec::IntoIter<Vec<u8>>> = Vec::new();
    for (m, layout) in layouts.iter().enumerate() {
        let mine: Vec<_> = pages
            .clone()
            .filter(|i| i % layouts.len() == m)
            .map(|i| workload::synthetic_page(i as u64))
            .collect();
        per_model.push(workload::payloads(layout, &mine, *event_id).into_iter());
    }
    let mut out = Vec::new();
    loop {
        let before = out.len();
        out.extend(per_model.iter_mut().filter_map(Iterator::next));
        if out.len() == before {
            break;
        }
    }
    for payload in &mut out {
        *event_id = EventIdSlots::find(payload).renumber(payload, *event_id);
    }
    out
}

fn ingest_models(c: &mut Criterion) {
    let preload = preloaded_pages();
    let mut g = c.benchmark_group("ingest_64_event_batches_models_side_by_side");
    g.throughput(Throughput::Elements(64));
    for (name, models) in [("one_model", 1usize), ("four_models", 4)] {
        let layouts: Vec<Layout> = (0..models).map(workload::tp8_of_model).collect();
        let (mut session, mut seq, event_id) = preloaded_session(&layouts, preload);
        // Numbered again from `event_id` before each use, as the stream goes on.
        let payloads = dealt_payloads(&layouts, preload..preload + 4096, &mut event_id.clone());
        let ids: Vec<EventIdSlots> = payloads.iter().map(|p| EventIdSlots::find(p)).collect();
        assert!(ids.iter().all(|slots| slots.len() == 64));
        let mut pool = Pool {
            payloads,
            ids,
            next: 0,
            event_id,
        };
        g.bench_function(name, |b| {
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
        let c = session.counters();
        assert_eq!((c.gaps, c.restarts), (0, 0), "{c:?}");
    }
    g.finish();
}

criterion_group!(benches, ingest, ingest_models);
criterion_main!(benches);
