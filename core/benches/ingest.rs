//! Row 2: decode + apply of Mooncake batches (20-field event maps, 64 events a batch) into an
//! index already holding 1M pages at TP 8; ours against the reference (rmp-serde into owned
//! strings, a locked set of `String` keys).

mod common;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hicache_index::{Config, IndexConfig, Instant, ModelLayout, Session};
use hicache_index_sim::reference::ReferenceIndex;

/// Pages already in the index (smaller under `cargo bench -- --test`).
fn preloaded_pages() -> usize {
    if std::env::args().any(|a| a == "--test") {
        1 << 12
    } else {
        1 << 20
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
    // Preload in chunks so the encoded bytes never pile up.
    for start in (0..preload).step_by(4096) {
        let pages: Vec<_> = (start..(start + 4096).min(preload))
            .map(|i| common::synthetic_page(i as u64))
            .collect();
        for payload in common::payloads(&layout, &pages) {
            seq += 1;
            let _ = session.feed(Instant::ZERO, &[b"", &seq.to_be_bytes(), &payload]);
        }
    }
    assert_eq!(session.counters().pages, preload as u64);
    let fresh: Vec<_> = (0..4096)
        .map(|i| common::synthetic_page((preload + i) as u64))
        .collect();
    let pool = common::payloads(&layout, &fresh);

    let mut g = c.benchmark_group("ingest_64_event_batches_into_1m_pages");
    g.throughput(Throughput::Elements(64));
    let mut i = 0usize;
    g.bench_function("ours", |b| {
        b.iter(|| {
            seq += 1;
            i = (i + 1) % pool.len();
            let fx = session.feed(
                Instant::ZERO,
                black_box(&[b"", &seq.to_be_bytes(), &pool[i]]),
            );
            debug_assert!(fx.is_empty());
            fx
        })
    });
    g.bench_function("reference", |b| {
        // Built only when this benchmark runs (filtering on "ours" skips it).
        let reference = ReferenceIndex::new();
        for i in 0..preload {
            for key in layout.object_keys(&common::synthetic_page(i as u64)) {
                reference.store(key);
            }
        }
        b.iter(|| {
            i = (i + 1) % pool.len();
            reference
                .apply_payload(black_box(&pool[i]))
                .expect("a valid payload")
        })
    });
    g.finish();
    assert_eq!(session.counters().gaps, 0);
}

criterion_group!(benches, ingest);
criterion_main!(benches);
