//! The lock-free read side beside other changes: what a query on [`hicache_index::Reader`]
//! may answer while the session, on another thread, changes what the query depends on besides
//! the page table.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;

use hicache_index::{Config, IndexConfig, Lookup, QueryError, WorkerInfo};
use hicache_index_shortcuts::Shortcuts;
use hicache_index_tests::{mha, page_hashes, removed, store_page, tokens, Harness, ENDPOINT};

/// Pages the query probes before the one the writer stores: enough that the query is still
/// probing when the writer's two inputs are done.
const LEADING_PAGES: u32 = 20_000;

/// Rounds of (query, conflict + store) before the test gives up finding the mixed answer.
const ROUNDS: usize = 20;

fn advertises(model: &str, tp: u32) -> WorkerInfo {
    WorkerInfo {
        model: Some(model.into()),
        layout: Some(mha(tp)),
        ..WorkerInfo::default()
    }
}

#[test]
fn a_query_never_claims_a_page_stored_after_its_layout_was_put_in_doubt() {
    // Worker w1 advertises TP 2 for model "m"; the index holds pages 0..N of it, page N not.
    // Each round, while a query of pages 0..=N runs: worker w2 advertises TP 4 for "m" (the
    // layout is in doubt: `Session::query` answers LayoutConflict from then on), then page N
    // is stored. Between two inputs the session answers N (before the conflict) or
    // LayoutConflict (after it), never N + 1: a query that claims N + 1 used the layout of
    // before the conflict with a page of after it (the reader's layout snapshot is taken
    // outside the state word that its page reads are checked against).
    let layout = mha(2);
    let mut h = Harness::connected(Config {
        endpoint: Some(ENDPOINT.into()),
        layouts: Vec::new(),
        index: IndexConfig {
            max_pages: 2 * LEADING_PAGES as usize,
            ..IndexConfig::default()
        },
        ..Config::default()
    });
    let _ = h
        .session
        .handle_worker(h.now, "w1", Some(advertises("m", 2)));
    let pages = page_hashes(&layout, &tokens(LEADING_PAGES + 1));
    let last = pages[LEADING_PAGES as usize];
    for chunk in pages[..LEADING_PAGES as usize].chunks(500) {
        let _ = h.batch(chunk.iter().flat_map(|p| store_page(&layout, p)).collect());
    }
    let lookup = Lookup::page_hashes(&pages).with_model("m");
    assert_eq!(
        h.session.query(&lookup).unwrap().prefix_pages,
        LEADING_PAGES as usize
    );
    let reader = h.session.reader();
    let mut mixed = Vec::new();
    for round in 0..ROUNDS {
        let barrier = Barrier::new(2);
        let started = AtomicBool::new(false);
        let answer = std::thread::scope(|s| {
            let query = s.spawn(|| {
                barrier.wait();
                started.store(true, Ordering::Release);
                reader.query(&lookup)
            });
            barrier.wait();
            while !started.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            let _ = h
                .session
                .handle_worker(h.now, "w2", Some(advertises("m", 4)));
            let _ = h.batch(store_page(&layout, &last));
            query.join().expect("the query thread ends")
        });
        assert!(matches!(
            h.session.query(&lookup),
            Err(QueryError::LayoutConflict { .. })
        ));
        if let Ok(hits) = &answer {
            if hits.prefix_pages > LEADING_PAGES as usize {
                mixed.push((round, hits.prefix_pages));
            }
        }
        // Back to the start: page N goes, then w2 (the layout is agreed again without it).
        let _ = h.batch(layout.object_keys(&last).map(removed).collect());
        let _ = h.session.handle_worker(h.now, "w2", None);
        assert_eq!(
            h.session.query(&lookup).unwrap().prefix_pages,
            LEADING_PAGES as usize
        );
        if !mixed.is_empty() {
            break;
        }
    }
    assert!(
        mixed.is_empty(),
        "(round, pages claimed) of queries that claimed page N under the layout a conflict \
         replaced before page N was stored: {mixed:?}"
    );
}
