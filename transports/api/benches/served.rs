//! Row 1, the served query (issue 29): the server's time for a query, excluding the body's
//! parse, from the checked request to the encoded JSON answer, at page size 4 (TP 2): a 1-page
//! query that hits, against a 16,384-token query (4,096 pages) whose first page misses, by
//! default (prefix only: one page hashed) and with `"page_map": true` (every page hashed and
//! probed, as every query was before). The parse of the long body is measured apart.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use hicache_index::{
    Config, EventKind, Instant, Layout, ModelLayout, Namespace, Seq, Session, SglangParams,
    Timestamp,
};
use hicache_index_api::{answer_front, Limits, QueryRequest};
use hicache_index_shortcuts::Shortcuts;
use hicache_index_wire::{encode_message, MasterFlavor, OwnedBatch, OwnedEvent};

fn served(c: &mut Criterion) {
    let layout = Layout::from_sglang(&SglangParams::new(4, 2)).expect("a layout");
    let mut session = Session::new(Config {
        layouts: vec![ModelLayout {
            model: None,
            layout: layout.clone(),
        }],
        ..Config::default()
    })
    .expect("a valid configuration");
    let stored: Vec<u32> = (1..=4).collect();
    let page = layout.page_hashes(&stored, Namespace::NONE).next().unwrap();
    let batch = OwnedBatch {
        seq: Seq(1),
        timestamp: Timestamp::Millis(1),
        dp_rank: Some(0),
        events: layout
            .object_keys(&page)
            .map(|k| OwnedEvent::new(EventKind::Stored, k))
            .collect(),
    };
    let frames = encode_message(b"", &batch, MasterFlavor::Upstream);
    let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let _ = session.feed(Instant::ZERO, &refs);
    let limits = Limits::default();
    let body = |tokens: &[u32], map: bool| {
        serde_json::json!({ "tokens": tokens, "page_map": map }).to_string()
    };
    let absent: Vec<u32> = (1_000_000..1_016_384).collect();
    let one = QueryRequest::from_json(body(&stored, false).as_bytes(), &limits).unwrap();
    let long_body = body(&absent, false);
    let long = QueryRequest::from_json(long_body.as_bytes(), &limits).unwrap();
    let long_map = QueryRequest::from_json(body(&absent, true).as_bytes(), &limits).unwrap();
    assert_eq!(answer_front(&session, &one).unwrap().prefix_pages, 1);
    let a = answer_front(&session, &long).unwrap();
    assert_eq!((a.prefix_pages, a.total_pages, a.pages.len()), (0, 4096, 1));
    assert_eq!(answer_front(&session, &long_map).unwrap().pages.len(), 4096);

    let mut g = c.benchmark_group("served_query_page_size_4");
    g.bench_function("one_page_hit", |b| {
        b.iter(|| answer_front(&session, black_box(&one)).unwrap().to_json())
    });
    g.bench_function("miss_at_page_1_of_16384_tokens", |b| {
        b.iter(|| answer_front(&session, black_box(&long)).unwrap().to_json())
    });
    g.bench_function("miss_at_page_1_of_16384_tokens_page_map", |b| {
        b.iter(|| {
            answer_front(&session, black_box(&long_map))
                .unwrap()
                .to_json()
        })
    });
    g.bench_function("parse_16384_tokens", |b| {
        b.iter(|| QueryRequest::from_json(black_box(long_body.as_bytes()), &limits).unwrap())
    });
    g.finish();
}

criterion_group!(benches, served);
criterion_main!(benches);
