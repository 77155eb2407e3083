//! Following a Mooncake HA cluster's leader through the real `Session` (see
//! `hicache_index::leader`): a leader change is a new incarnation, the new leader is followed
//! only once it serves, and the old leader's late messages never reach the index.

use hicache_index::{
    ClearReason, Command, Config, Effect, EventsStatus, Health, LeaderConfig, LeaderRequest,
    LeaderStatus, LeaderView, SnapshotRequest, Watermark,
};
use hicache_index_shortcuts::Shortcuts;
use hicache_index_tests::{cleared, config, mha, page_hashes, resync, store_page, tokens, Harness};

const A: &str = "127.0.0.1:50051";
const B: &str = "127.0.0.2:50051";

fn ha() -> Config {
    Config {
        leader: Some(LeaderConfig::default()),
        ..resync(config(mha(1)))
    }
}

fn view(address: &str, version: u64) -> LeaderView {
    LeaderView::from_value(Some(address.as_bytes()), version)
}

fn serving(address: &str, view_version: u64) -> LeaderStatus {
    LeaderStatus {
        serving: true,
        leader_address: Some(address.into()),
        view_version: Some(view_version),
        events: EventsStatus::Enabled,
    }
}

fn check_request(fx: &[Effect]) -> Option<(LeaderRequest, String)> {
    fx.iter().find_map(|e| match e {
        Effect::Command(Command::CheckLeader { request, host }) => Some((*request, host.clone())),
        _ => None,
    })
}

fn fetch_request(fx: &[Effect]) -> Option<SnapshotRequest> {
    fx.iter().find_map(|e| match e {
        Effect::Command(Command::FetchSnapshot { request }) => Some(*request),
        _ => None,
    })
}

fn connect_endpoint(fx: &[Effect]) -> Option<String> {
    fx.iter().find_map(|e| match e {
        Effect::Command(Command::Connect { endpoint }) => Some(endpoint.clone()),
        _ => None,
    })
}

/// Discovery names `address` at `version`, it serves with `view_version`, the session connects
/// and resyncs from its (empty) key list: live, following it.
fn follow(h: &mut Harness, address: &str, version: u64, view_version: u64) {
    let fx = h.session.handle_leader_view(h.now, &view(address, version));
    let (request, _) = check_request(&fx).expect("a new leader is checked");
    let fx = h
        .session
        .handle_leader_status(h.now, request, &serving(address, view_version));
    assert!(
        connect_endpoint(&fx).is_some(),
        "a serving leader is followed: {fx:?}"
    );
    let fx = h.session.handle_connected(h.now);
    let fetch = fetch_request(&fx).expect("a new connection resyncs");
    let _ = h.session.handle_snapshot(
        h.now,
        fetch,
        Some(Watermark::from(hicache_index::Seq(0))),
        Vec::<&[u8]>::new(),
    );
    assert_eq!(h.health(), Health::Live);
}

/// A session following leader A with one page of its stream applied.
fn following_a_with_a_page() -> (Harness, Vec<u32>) {
    let layout = mha(1);
    let mut h = Harness::new(ha());
    follow(&mut h, A, 10, 10);
    let t = tokens(1);
    let _ = h.batch_at(1, store_page(&layout, &page_hashes(&layout, &t)[0]));
    assert_eq!(h.prefix(&t), 1);
    let info = h.status().leader.expect("HA is on");
    assert_eq!(
        info.last_failover, None,
        "following the first leader is no failover"
    );
    (h, t)
}

#[test]
fn nothing_connects_before_discovery_names_a_leader_that_serves() {
    let mut h = Harness::new(ha());
    let fx = h.session.handle_timeout(h.now);
    assert!(connect_endpoint(&fx).is_none(), "{fx:?}");
    let fx = h.session.handle_leader_view(
        h.now,
        &LeaderView::from_value(Some(b"__mooncake_service_warming__:2"), 4),
    );
    assert!(check_request(&fx).is_none(), "warming is no leader: {fx:?}");
    let fx = h.session.handle_leader_view(h.now, &view(B, 5));
    let (request, host) = check_request(&fx).expect("a named leader is checked");
    assert_eq!(host, "127.0.0.2");
    let not_yet = LeaderStatus {
        serving: false,
        events: EventsStatus::Inactive,
        ..serving(B, 5)
    };
    let fx = h.session.handle_leader_status(h.now, request, &not_yet);
    assert!(
        connect_endpoint(&fx).is_none(),
        "a warming leader is not followed: {fx:?}"
    );
    // Its status answers, yet `/health` does not say serving (still warming up): not yet.
    let fx = h.fire_timeout().expect("a retry is due");
    let (request, _) = check_request(&fx).expect("checked again");
    let warming = LeaderStatus {
        serving: false,
        ..serving(B, 5)
    };
    let fx = h.session.handle_leader_status(h.now, request, &warming);
    assert!(
        connect_endpoint(&fx).is_none(),
        "a leader not serving is not followed: {fx:?}"
    );
    // Checked again after the interval; then it serves.
    let fx = h.fire_timeout().expect("a retry is due");
    let (request, _) = check_request(&fx).expect("checked again");
    let fx = h
        .session
        .handle_leader_status(h.now, request, &serving(B, 5));
    assert!(
        fx.iter().any(
            |e| matches!(e, Effect::Command(Command::UseMaster { host }) if host == "127.0.0.2")
        ),
        "{fx:?}"
    );
    assert_eq!(
        connect_endpoint(&fx).as_deref(),
        Some("tcp://127.0.0.2:5557"),
        "the leader's host replaces the endpoint's, the port kept"
    );
    let info = h.status().leader.expect("HA is on");
    assert_eq!((info.address.as_deref(), info.version), (Some(B), Some(5)));
}

#[test]
fn a_leader_change_forgets_the_old_leaders_pages_at_once() {
    let (mut h, t) = following_a_with_a_page();
    let fx = h.session.handle_leader_view(h.now, &view(B, 11));
    assert_eq!(cleared(&fx), vec![ClearReason::LeaderChanged], "{fx:?}");
    assert!(fx.contains(&Effect::Command(Command::Disconnect)), "{fx:?}");
    assert_eq!(h.prefix(&t), 0, "the old leader's page is no hit");
    assert_ne!(h.health(), Health::Live);
}

#[test]
fn the_old_leaders_late_batches_are_fenced_until_the_new_leader_serves() {
    let layout = mha(1);
    let (mut h, t) = following_a_with_a_page();
    let _ = h.session.handle_leader_view(h.now, &view(B, 11));
    // A batch still queued from A's connection arrives after the change was seen.
    let _ = h.batch_at(2, store_page(&layout, &page_hashes(&layout, &t)[0]));
    assert_eq!(
        h.prefix(&t),
        0,
        "a late batch of the old leader is never applied"
    );
    assert_eq!(h.status().counters.fenced_batches, 1);
}

#[test]
fn an_old_leaders_health_answer_is_not_taken_for_the_new_leader() {
    let (mut h, _) = following_a_with_a_page();
    // Discovery names A again in a new view (a new election): a new incarnation. The master at
    // A still answers with the old master view version (10): it is the old one, not yet gone.
    let fx = h.session.handle_leader_view(h.now, &view(A, 12));
    let (request, _) = check_request(&fx).expect("checked");
    let fx = h
        .session
        .handle_leader_status(h.now, request, &serving(A, 10));
    assert!(
        connect_endpoint(&fx).is_none(),
        "an older view is refused: {fx:?}"
    );
    // A check answer of another request is stale.
    let fx = h.fire_timeout().expect("a retry is due");
    let (request, _) = check_request(&fx).expect("checked again");
    let fx = h
        .session
        .handle_leader_status(h.now, LeaderRequest(request.0 + 100), &serving(A, 12));
    assert!(
        connect_endpoint(&fx).is_none(),
        "an answer no longer awaited is refused: {fx:?}"
    );
    let fx = h
        .session
        .handle_leader_status(h.now, request, &serving(A, 12));
    assert!(connect_endpoint(&fx).is_some(), "{fx:?}");
}

#[test]
fn a_leader_restarted_at_the_same_address_is_a_new_incarnation() {
    let (mut h, t) = following_a_with_a_page();
    // The same value in the same view changes nothing.
    let fx = h.session.handle_leader_view(h.now, &view(A, 10));
    assert!(fx.is_empty(), "{fx:?}");
    assert_eq!(h.prefix(&t), 1);
    // Its lease expired (no key), then it was elected again: the same address, a new view.
    let fx = h.session.handle_leader_view(h.now, &LeaderView::Absent);
    assert_eq!(cleared(&fx), vec![ClearReason::LeaderChanged], "{fx:?}");
    let fx = h.session.handle_leader_view(h.now, &view(A, 13));
    assert!(
        check_request(&fx).is_some(),
        "the new incarnation is checked: {fx:?}"
    );
    assert_eq!(h.prefix(&t), 0);
    assert_eq!(
        h.status().leader.map(|l| l.changes),
        Some(1),
        "one change: A to A again"
    );
}

#[test]
fn a_new_view_at_the_same_address_forgets_even_without_a_gap_in_discovery() {
    let (mut h, t) = following_a_with_a_page();
    let fx = h.session.handle_leader_view(h.now, &view(A, 14));
    assert_eq!(cleared(&fx), vec![ClearReason::LeaderChanged], "{fx:?}");
    assert_eq!(h.prefix(&t), 0);
}

#[test]
fn a_leader_whose_publisher_is_off_is_a_health_state_not_an_empty_index() {
    let mut h = Harness::new(ha());
    let fx = h.session.handle_leader_view(h.now, &view(B, 5));
    let (request, _) = check_request(&fx).expect("checked");
    let off = LeaderStatus {
        events: EventsStatus::Disabled,
        ..serving(B, 5)
    };
    let fx = h.session.handle_leader_status(h.now, request, &off);
    assert!(connect_endpoint(&fx).is_none(), "{fx:?}");
    assert_eq!(h.health(), Health::EventsDisabled);
    assert_eq!(h.status().counters.events_disabled, 1);
}

#[test]
fn a_fixed_master_whose_status_says_disabled_is_a_health_state() {
    let mut h = Harness::connected(resync(config(mha(1))));
    let fetch = fetch_request(&h.log).expect("the connection resyncs");
    let fx = h.session.handle_events_disabled(h.now, fetch);
    assert_eq!(h.health(), Health::EventsDisabled, "{fx:?}");
    // The retry's status answers: the health follows it.
    let fx = h.fire_timeout().expect("the fetch is retried");
    let fetch = fetch_request(&fx).expect("fetched again");
    let _ = h.session.handle_snapshot(
        h.now,
        fetch,
        Some(Watermark::from(hicache_index::Seq(0))),
        Vec::<&[u8]>::new(),
    );
    assert_eq!(h.health(), Health::Live);
}

#[test]
fn the_last_failover_is_timed_from_the_change_and_from_serving() {
    let (mut h, _) = following_a_with_a_page();
    let _ = h.session.handle_leader_view(h.now, &LeaderView::Absent);
    h.advance(5_000);
    let fx = h.session.handle_leader_view(h.now, &view(B, 20));
    let (request, _) = check_request(&fx).expect("checked");
    h.advance(3_000);
    let fx = h
        .session
        .handle_leader_status(h.now, request, &serving(B, 20));
    assert!(connect_endpoint(&fx).is_some());
    h.advance(40);
    let fx = h.session.handle_connected(h.now);
    let fetch = fetch_request(&fx).expect("resync from the new leader");
    h.advance(10);
    let _ = h.session.handle_snapshot(
        h.now,
        fetch,
        Some(Watermark::from(hicache_index::Seq(0))),
        Vec::<&[u8]>::new(),
    );
    assert_eq!(h.health(), Health::Live);
    let c = h.status().counters;
    assert_eq!(c.last_failover_ms, 8_050);
    assert_eq!(c.last_failover_after_serving_ms, 50);
    assert_eq!(c.leader_view_version, 20);
    assert_eq!(c.leader_changes, 1);
}
