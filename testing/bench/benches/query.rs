//! Row 1: a 256-page request at TP 8 (16 objects a page, 64-token pages), all hits, and a miss at
//! page 8; ours against the reference (the first implementation's exact-key set) and against the
//! limits: SHA-256 of the pages alone, and a plain hashbrown probe per page.

use std::collections::HashSet;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use hicache_index::{Config, Instant, Lookup, ModelLayout, Namespace, PageHashes, Session};
use hicache_index_bench::reference::ReferenceIndex;
use hicache_index_bench::workload;
use hicache_index_shortcuts::Shortcuts;

const PAGES: usize = 256;

struct World {
    session: Session,
    reference: ReferenceIndex,
    hits: Vec<u32>,
    miss_at_8: Vec<u32>,
}

fn world() -> World {
    let layout = workload::tp8();
    let mut session = Session::new(Config {
        layouts: vec![ModelLayout {
            model: None,
            layout: layout.clone(),
        }],
        ..Config::default()
    })
    .expect("a valid configuration");
    let reference = ReferenceIndex::new();
    let hits = workload::tokens(PAGES, 1);
    let miss_at_8 = workload::tokens(PAGES, 2);
    let mut pages = workload::hashes(&layout, &hits);
    pages.extend(workload::hashes(&layout, &miss_at_8).into_iter().take(8));
    for (i, payload) in workload::payloads(&layout, &pages, 1).iter().enumerate() {
        let seq = (i as u64 + 1).to_be_bytes();
        let fx = session.feed(Instant::ZERO, &[b"", &seq, payload]);
        assert!(fx.is_empty(), "{fx:?}");
        reference.apply_payload(payload).expect("a valid payload");
    }
    World {
        session,
        reference,
        hits,
        miss_at_8,
    }
}

fn query(c: &mut Criterion) {
    let w = world();
    let layout = workload::tp8();
    assert_eq!(
        w.session
            .query(&Lookup::tokens(&w.hits))
            .unwrap()
            .prefix_pages,
        PAGES
    );
    assert_eq!(w.reference.query(&layout, &w.hits), PAGES);
    assert_eq!(
        w.session
            .query(&Lookup::tokens(&w.miss_at_8))
            .unwrap()
            .prefix_pages,
        8
    );
    assert_eq!(w.reference.query(&layout, &w.miss_at_8), 8);
    let precomputed: Vec<[u8; 32]> = workload::hashes(&layout, &w.hits)
        .iter()
        .map(|h| h.0)
        .collect();
    let set: HashSet<[u8; 32]> = precomputed.iter().copied().collect();

    let mut g = c.benchmark_group("query_256_pages_tp8");
    g.bench_function("ours", |b| {
        b.iter(|| {
            w.session
                .query(black_box(&Lookup::tokens(&w.hits)))
                .unwrap()
        })
    });
    g.bench_function("reference", |b| {
        b.iter(|| w.reference.query(&layout, black_box(&w.hits)))
    });
    g.bench_function("limit_sha256", |b| {
        b.iter(|| {
            PageHashes::new(black_box(&w.hits[..]), 64, false, Namespace::NONE)
                .fold(0u8, |a, h| a ^ h.0[0])
        })
    });
    g.bench_function("limit_hashbrown_probe", |b| {
        b.iter(|| {
            black_box(&precomputed)
                .iter()
                .filter(|h| set.contains(*h))
                .count()
        })
    });
    g.finish();

    let mut g = c.benchmark_group("query_miss_at_page_8");
    g.bench_function("ours", |b| {
        b.iter(|| {
            w.session
                .query(black_box(&Lookup::tokens(&w.miss_at_8)))
                .unwrap()
        })
    });
    g.bench_function("reference", |b| {
        b.iter(|| w.reference.query(&layout, black_box(&w.miss_at_8)))
    });
    g.bench_function("limit_sha256", |b| {
        b.iter(|| {
            PageHashes::new(black_box(&w.miss_at_8[..]), 64, false, Namespace::NONE)
                .take(9)
                .fold(0u8, |a, h| a ^ h.0[0])
        })
    });
    g.finish();
}

criterion_group!(benches, query);
criterion_main!(benches);
