//! The lock-free read side beside a batch: what a query on [`hicache_index::Reader`] may see
//! while the session applies a batch on another thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hicache_index::{Config, EventKind, IndexConfig, Lookup, Pages, QueryError};
use hicache_index_sim::encode::OwnedEvent;
use hicache_index_tests::{config, mha, page_hashes, store_page, tokens, Harness};

/// Batches the writer applies before the test gives up finding the doubted hit.
const BATCHES: usize = 1_000;

/// A `removed` event without an object key: it may have removed any object, so the session
/// forgets everything (once the batch is applied).
fn unreadable_removal() -> OwnedEvent {
    OwnedEvent {
        object_key: None,
        ..OwnedEvent::new(EventKind::Removed, "")
    }
}

#[test]
fn no_query_hits_a_page_after_an_unreadable_removal_was_applied() {
    // Each batch stores page A, then carries an unreadable removal (A may be gone again), then
    // stores page B and more. Under the session's lock no query ever saw A and B together
    // (the batch ends with a clear); a query that sees B saw the removal applied, so A is
    // doubted: claiming A with B is a hit on a page the session already knows may be gone.
    let layout = mha(2);
    let pages = page_hashes(&layout, &tokens(2));
    let (a, b) = (pages[0], pages[1]);
    let fillers: Vec<_> = page_hashes(&layout, &tokens(40))[2..]
        .iter()
        .flat_map(|p| store_page(&layout, p))
        .collect();
    // A small table: every clear empties it whole, so keep the clears cheap.
    let mut h = Harness::connected(Config {
        index: IndexConfig {
            max_pages: 1024,
            ..IndexConfig::default()
        },
        ..config(layout.clone())
    });
    let reader = h.session.reader();
    let done = Arc::new(AtomicBool::new(false));
    let query = {
        let (reader, done) = (Arc::clone(&reader), Arc::clone(&done));
        std::thread::spawn(move || {
            let hashes = [a, b];
            let lookup = Lookup {
                tenant: "default",
                model: None,
                pages: Pages::Hashes(&hashes),
            };
            let mut doubted_hits = 0usize;
            while !done.load(Ordering::Relaxed) && doubted_hits == 0 {
                match reader.query(&lookup) {
                    Ok(hits) if hits.prefix_pages == 2 => doubted_hits += 1,
                    // Busy: the writer kept changing the index; the query claimed nothing.
                    Ok(_) | Err(QueryError::Busy) => {}
                    Err(e) => panic!("the default layout answers: {e}"),
                }
            }
            doubted_hits
        })
    };
    for _ in 0..BATCHES {
        let mut events = store_page(&layout, &a);
        events.push(unreadable_removal());
        events.extend(store_page(&layout, &b));
        events.extend(fillers.iter().cloned());
        let _ = h.batch(events);
        if query.is_finished() {
            break;
        }
    }
    done.store(true, Ordering::Relaxed);
    let doubted_hits = query.join().expect("the query thread ends");
    assert_eq!(
        doubted_hits, 0,
        "a query claimed page A while page B, stored after the unreadable removal, was in"
    );
    assert_eq!(
        h.prefix(&tokens(2)),
        0,
        "between batches the index is empty"
    );
}
