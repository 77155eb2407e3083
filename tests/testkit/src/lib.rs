//! Scenarios shared by the tokio and smol transports' tests, against real peers on loopback:
//! the emulated master ([`peer::EmulatorPeer`]) and a Python publisher ([`peer::PythonPeer`]).
//!
//! It sits above the transports it drives, so their tests that need it live here, in `tests/`
//! (`tokio_scenarios`, `smol_scenarios`, `observer`, `query_counters`, and `pynng` with the
//! feature `nng`). A runtime's test file expands [`scenario_tests!`] with its [`Runtime`] (in
//! [`runtimes`]):
//! ```ignore
//! hicache_index_testkit::scenario_tests!(hicache_index_testkit::runtimes::Tokio);
//! ```
//! Every scenario is synchronous: it drives the peer, polls the query handle until the expected
//! answer appears (or fails with the counters after a few seconds), and stops by itself.

pub mod bench;
pub mod peer;
pub mod process;
pub mod runtimes;
pub mod scenarios;

use std::time::{Duration, Instant};

use hicache_index::{Counters, Health, Layout, Lookup, PageHash, SglangParams};
use hicache_index_driver::{Control, QueryHandle, SubscriberConfig};

pub use peer::{EmulatorPeer, Peer, PythonPeer};

/// A runtime under test: how to start and stop a subscriber from synchronous code.
pub trait Runtime {
    /// A running subscriber (with whatever runtime it needs kept alive).
    type Running;
    /// Starts a subscriber.
    fn spawn(config: SubscriberConfig) -> (QueryHandle, Control, Self::Running);
    /// Stops it and waits until its loop ended; returns how long that took.
    fn shutdown(running: Self::Running) -> Duration;
    /// Drops the task handle without asking it to stop (the runtime stays up).
    fn drop_task(running: &mut Self::Running);
}

/// Expands every scenario as a `#[test]` for `$runtime`, against both peers.
#[macro_export]
macro_rules! scenario_tests {
    ($runtime:ty) => {
        $crate::scenario_tests!(@peer $runtime, emulator, $crate::peer::EmulatorPeer);
        $crate::scenario_tests!(@peer $runtime, python, $crate::peer::PythonPeer);
        #[test]
        fn silent_tcp_peer_times_out_and_is_retried() {
            $crate::scenarios::silent_tcp_peer_times_out_and_is_retried::<$runtime>();
        }
        #[test]
        fn live_batches_are_applied_while_a_large_snapshot_is_handed_over() {
            $crate::scenarios::live_batches_are_applied_while_a_large_snapshot_is_handed_over::<
                $runtime,
            >();
        }
    };
    (@peer $runtime:ty, $module:ident, $peer:ty) => {
        mod $module {
            $crate::scenario_tests!(@tests $runtime, $peer;
                live_ingest_and_removals_answer_correct_hits,
                publisher_restart_forgets_lost_objects_and_follows_the_new_stream,
                subscriber_restart_bootstraps_objects_stored_while_away,
                endpoint_change_follows_worker_metadata,
                stray_topic_on_the_same_endpoint_never_clears,
                malformed_messages_are_counted_and_an_undecodable_batch_is_loss,
                gap_then_resync_recovers_objects_from_before_the_gap_and_the_start,
                silent_removal_is_found_by_verification,
                shutdown_stops_within_100ms_and_leaves_misses,
                dropping_the_task_stops_within_100ms,
                publisher_started_late_is_reached_by_retrying,
                oversized_message_drops_the_connection_and_recovers
            );
        }
    };
    (@tests $runtime:ty, $peer:ty; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                $crate::scenarios::$name::<$runtime, $peer>();
            }
        )*
    };
}

/// The layout every scenario uses: page size 4, TP 2 (four objects a page), no key prefix.
pub fn layout() -> Layout {
    Layout::from_sglang(&SglangParams::new(4, 2)).expect("a valid layout")
}

/// `pages` full pages of tokens, distinct for each `seed`.
pub fn tokens(seed: u32, pages: usize) -> Vec<u32> {
    (0..pages as u32 * 4).map(|i| seed * 100_000 + i).collect()
}

/// The page hashes of `tokens`.
pub fn page_hashes(tokens: &[u32]) -> Vec<PageHash> {
    layout()
        .page_hashes(tokens, hicache_index::Namespace::NONE)
        .collect()
}

/// Every object key of every page of `tokens`.
pub fn object_keys(tokens: &[u32]) -> Vec<String> {
    let layout = layout();
    page_hashes(tokens)
        .iter()
        .flat_map(|p| layout.object_keys(p).collect::<Vec<_>>())
        .collect()
}

/// Leading pages of `tokens` the handle reports present.
pub fn prefix(q: &QueryHandle, tokens: &[u32]) -> usize {
    q.query(&Lookup::tokens(tokens))
        .expect("the default layout answers")
        .prefix_pages
}

/// Polls `f` every 5 ms until it holds; panics after `timeout` with `what` and the counters.
pub fn wait_until(q: &QueryHandle, what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        if start.elapsed() > timeout {
            panic!(
                "timed out after {timeout:?} waiting for {what}; health {:?}, counters {:#?}",
                q.health(),
                q.counters()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The default wait.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// Waits until the subscriber is connected and its subscription reached the publisher: ZeroMQ
/// drops what a PUB socket sends before the subscription arrives, so probe batches are sent
/// until one is applied.
pub fn wait_subscribed<P: Peer>(peer: &P, q: &QueryHandle) {
    wait_until(q, "a connection", PATIENCE, || {
        matches!(
            q.health(),
            Health::Live | Health::Recovering | Health::Reconciling
        )
    });
    let start = Instant::now();
    let mut probes = Vec::new();
    loop {
        let before = q.counters().batches;
        probes.push(format!("probe-{}", probes.len()));
        peer.store(&probes[probes.len() - 1..]);
        let probe = Instant::now();
        while probe.elapsed() < Duration::from_millis(100) {
            if q.counters().batches > before {
                // Probes are no page: gone (without events, which scenarios count), they cannot
                // make a later snapshot's lines odd.
                peer.remove_silently(&probes);
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(
            start.elapsed() < PATIENCE,
            "no probe batch arrived; counters {:#?}",
            q.counters()
        );
    }
}

/// The sum of every clear counter.
pub fn clears(c: &Counters) -> u64 {
    c.clears_gap
        + c.clears_restart
        + c.clears_disconnected
        + c.clears_endpoint
        + c.clears_unreadable_removal
        + c.clears_undecodable
        + c.clears_unproven
        + c.clears_store_changed
        + c.clears_requested
}
