//! The review of the query handle (issue 15): one query counts once, whatever blocks it hashes
//! and probes in (against the emulated master on loopback).

use hicache_index_testkit::runtimes::Tokio;
use hicache_index_testkit::scenarios::config;
use hicache_index_testkit::{
    object_keys, prefix, tokens, wait_subscribed, wait_until, EmulatorPeer, Peer, Runtime, PATIENCE,
};

#[test]
fn one_token_query_counts_one_query_and_its_prefix_pages_once() {
    let peer = EmulatorPeer::start();
    let (q, _control, running) = Tokio::spawn(config(Some(peer.event_endpoint()), None));
    wait_subscribed(&peer, &q);
    // 100 pages: the handle hashes and probes them in blocks of 8, then 64, then the rest.
    let t = tokens(1, 100);
    peer.store(&object_keys(&t));
    wait_until(&q, "100 pages", PATIENCE, || prefix(&q, &t) == 100);
    let before = q.counters();
    assert_eq!(prefix(&q, &t), 100);
    let after = q.counters();
    assert_eq!(
        (
            after.queries - before.queries,
            after.hit_pages - before.hit_pages
        ),
        (1, 100),
        "one query of 100 pages, all hits"
    );
    Tokio::shutdown(running);
}
