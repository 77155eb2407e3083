//! A clear's cost against what the index holds: an index sized for 1M pages holding 1K, 8K, 64K
//! or all 1M of them (one object a page: a clear's cost is per page), cleared. Each sample stores
//! the pages again outside the timed part. `cargo bench -- --test` runs it small.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use hicache_index::{Index, IndexConfig, Medium};
use hicache_index_bench::workload;

/// The index's capacity (smaller under `cargo bench -- --test`).
fn capacity() -> usize {
    if std::env::args().any(|a| a == "--test") {
        1 << 12
    } else {
        1 << 20
    }
}

/// The object key of page `i` (one object a page, MLA-style `__k`).
fn key(i: usize) -> String {
    let mut key = String::with_capacity(68);
    for b in workload::synthetic_page(i as u64).0 {
        key.push_str(&format!("{b:02x}"));
    }
    key.push_str("__k");
    key
}

fn clear(c: &mut Criterion) {
    let capacity = capacity();
    let keys: Vec<String> = (0..capacity).map(key).collect();
    let mut index = Index::standalone(IndexConfig {
        max_pages: capacity,
        ..IndexConfig::default()
    });
    let mut group = c.benchmark_group("clear");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    for held in [capacity >> 10, capacity >> 7, capacity >> 4, capacity] {
        group.bench_with_input(BenchmarkId::new("held", held), &held, |b, &held| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    for key in &keys[..held] {
                        index.store_object("default", key, Some(Medium::Cpu));
                    }
                    assert_eq!(index.page_count(), held);
                    // Wall time measures the bench; it never reaches the core.
                    #[allow(clippy::disallowed_methods)]
                    let start = std::time::Instant::now();
                    black_box(index.clear_all());
                    spent += start.elapsed();
                }
                spent
            });
        });
    }
    group.finish();
}

criterion_group!(benches, clear);
criterion_main!(benches);
