//! Row 1, the prefix memo: a 256-page token query at TP 8 whose pages are all in the memo
//! (hashed through [`PrefixMemo`] outside any lock as the probe reaches them), against the SHA-256-only
//! bound of the same pages measured in the same run.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use hicache_index::{
    Config, DigestMemo, Instant, Lookup, MapCover, ModelLayout, Namespace, NoMemo, PageHash,
    Session,
};
use hicache_index_bench::workload;
use hicache_index_driver::{PrefixMemo, DEFAULT_MEMO_BYTES};
use hicache_index_shortcuts::Shortcuts;

const PAGES: usize = 256;

/// Asks the session's reader, hashing through `memo` as the probe reaches each page and
/// keeping the hashes in `out`, as the query handle does.
fn query(
    session: &Session,
    memo: &impl DigestMemo,
    tokens: &[u32],
    out: &mut Vec<PageHash>,
) -> usize {
    let lookup = Lookup::tokens(tokens);
    let reader = session.reader();
    let mut query = reader.ask(&lookup, memo, Some(out), None, MapCover::UntilMiss);
    query.answer().unwrap().prefix_pages
}

fn memo(c: &mut Criterion) {
    let layout = workload::tp8();
    let mut session = Session::new(Config {
        layouts: vec![ModelLayout {
            model: None,
            layout: layout.clone(),
        }],
        ..Config::default()
    })
    .expect("a valid configuration");
    let tokens = workload::tokens(PAGES, 1);
    let pages = workload::hashes(&layout, &tokens);
    for (i, payload) in workload::payloads(&layout, &pages, 1).iter().enumerate() {
        let seq = (i as u64 + 1).to_be_bytes();
        let fx = session.feed(Instant::ZERO, &[b"", &seq, payload]);
        assert!(fx.is_empty(), "{fx:?}");
    }
    let memo = PrefixMemo::new(DEFAULT_MEMO_BYTES);
    let mut out = Vec::with_capacity(PAGES);
    assert_eq!(query(&session, &memo, &tokens, &mut out), PAGES);
    assert_eq!(query(&session, &NoMemo, &tokens, &mut out), PAGES);
    assert_eq!(memo.stats().entries, PAGES, "every page is in the memo");

    let mut g = c.benchmark_group("query_256_pages_tp8_memo");
    g.bench_function("ours_in_memo", |b| {
        b.iter(|| query(&session, &memo, black_box(&tokens), &mut out))
    });
    g.bench_function("ours_cold", |b| {
        b.iter(|| query(&session, &NoMemo, black_box(&tokens), &mut out))
    });
    g.bench_function("memo_hashes_only", |b| {
        b.iter(|| {
            let mut pages =
                hicache_index::PageHashes::new(black_box(&tokens[..]), 64, false, Namespace::NONE);
            let mut x = 0u8;
            while let Some(h) = pages.next_with(&memo) {
                x ^= h.0[0];
            }
            x
        })
    });
    g.bench_function("probe_only", |b| {
        let hashes = workload::hashes(&layout, &tokens);
        b.iter(|| {
            session
                .query(&Lookup::page_hashes(black_box(&hashes)))
                .unwrap()
                .prefix_pages
        })
    });
    g.bench_function("limit_sha256", |b| {
        b.iter(|| {
            hicache_index::PageHashes::new(black_box(&tokens[..]), 64, false, Namespace::NONE)
                .fold(0u8, |a, h| a ^ h.0[0])
        })
    });
    g.finish();
}

criterion_group!(benches, memo);
criterion_main!(benches);
