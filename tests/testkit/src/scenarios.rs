//! The scenarios, each generic over the runtime and the peer.

use std::time::{Duration, Instant};

use hicache_index::{
    BackoffConfig, Config, EventKind, Health, ModelLayout, ResyncConfig, Seq, SessionStatus,
    Timestamp, VerifyConfig, WorkerInfo,
};
use hicache_index_driver::{Control, QueryHandle, SubscriberConfig, SNAPSHOT_CHUNK_LINES};
use hicache_index_wire::{encode_payload, MasterFlavor, OwnedBatch, OwnedEvent};

use crate::{
    clears, layout, object_keys, page_hashes, prefix, tokens, wait_subscribed, wait_until,
    EmulatorPeer, Peer, Runtime, PATIENCE,
};

/// A subscriber configuration for the scenarios: fast backoff, and resync over `http` if given.
pub fn config(endpoint: Option<String>, http: Option<String>) -> SubscriberConfig {
    let session = Config {
        endpoint,
        layouts: vec![ModelLayout {
            model: None,
            layout: layout(),
        }],
        backoff: BackoffConfig {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(200),
            reset_after: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(2),
        },
        ..Config::default()
    };
    let mut config = SubscriberConfig::new(session);
    if let Some(http) = http {
        config = config.with_master_http(http);
        config.session.resync = Some(ResyncConfig {
            fetch_timeout: Duration::from_secs(3),
            retry_after: Duration::from_millis(100),
            ..ResyncConfig::default()
        });
        config.session.verify = None;
    }
    config.http.request_timeout = Duration::from_secs(2);
    config
}

/// The scenarios' configuration for following `peer` (resyncing over its HTTP side if `http`).
fn following<P: Peer>(peer: &P, http: bool) -> SubscriberConfig {
    config(Some(peer.event_endpoint()), http.then(|| peer.http_base()))
}

/// A payload that would remove `keys` if it were applied.
fn removal_payload(keys: &[String]) -> Vec<u8> {
    let batch = OwnedBatch {
        seq: Seq(0),
        timestamp: Timestamp::Millis(1_767_225_600_000),
        dp_rank: Some(0),
        events: keys
            .iter()
            .map(|k| OwnedEvent::new(EventKind::Removed, k.clone()))
            .collect(),
    };
    encode_payload(&batch, MasterFlavor::Upstream)
}

/// Starts a subscriber with `cfg` and waits until its subscription reached `peer`.
fn spawn_subscribed<R: Runtime, P: Peer>(
    peer: &P,
    cfg: SubscriberConfig,
) -> (QueryHandle, Control, R::Running) {
    let started = R::spawn(cfg);
    wait_subscribed(peer, &started.0);
    started
}

/// Stores every object of `tokens` at `peer` and waits until `q` reports all their pages (as
/// `what`); returns the keys.
fn store_until_hits<P: Peer>(peer: &P, q: &QueryHandle, what: &str, tokens: &[u32]) -> Vec<String> {
    let keys = object_keys(tokens);
    peer.store(&keys);
    let pages = page_hashes(tokens).len();
    wait_until(q, what, PATIENCE, || prefix(q, tokens) == pages);
    keys
}

/// Objects stored appear as hits; a removed object ends the prefix at its page.
pub fn live_ingest_and_removals_answer_correct_hits<R: Runtime, P: Peer>() {
    let peer = P::start();
    let (q, _control, running) = spawn_subscribed::<R, P>(&peer, following(&peer, false));
    let t = tokens(1, 3);
    let keys = store_until_hits(&peer, &q, "three pages", &t);
    assert_eq!(prefix(&q, &tokens(2, 3)), 0, "never stored");
    // The second page's `_1_v` object goes: only the first page is left whole.
    let gone = keys[4..8]
        .iter()
        .find(|k| k.ends_with("_1_v"))
        .expect("a _1_v key")
        .clone();
    peer.remove(&[gone]);
    wait_until(&q, "the prefix to end at page 1", PATIENCE, || {
        prefix(&q, &t) == 1
    });
    let c = q.counters();
    assert_eq!(
        (c.gaps, clears(&c), c.malformed_payload),
        (0, 0, 0),
        "{c:#?}"
    );
    assert!(c.stored >= 12 && c.removed == 1, "{c:#?}");
    assert_eq!(q.health(), Health::Live);
    R::shutdown(running);
}

/// A restarted master lost its objects: the subscriber forgets them, reconnects, resyncs and
/// follows the new stream from sequence 1.
pub fn publisher_restart_forgets_lost_objects_and_follows_the_new_stream<R: Runtime, P: Peer>() {
    let peer = P::start();
    let (q, _control, running) = spawn_subscribed::<R, P>(&peer, following(&peer, true));
    let before = tokens(1, 2);
    store_until_hits(&peer, &q, "the first pages", &before);
    peer.restart();
    wait_until(&q, "the lost pages to go", PATIENCE, || {
        prefix(&q, &before) == 0
    });
    wait_subscribed(&peer, &q);
    wait_until(&q, "live again", PATIENCE, || q.health() == Health::Live);
    store_until_hits(&peer, &q, "the new pages", &tokens(2, 2));
    assert_eq!(
        prefix(&q, &before),
        0,
        "objects lost in the restart are misses"
    );
    let c = q.counters();
    assert!(c.disconnects + c.restarts >= 1, "{c:#?}");
    R::shutdown(running);
}

/// A new subscriber learns from the master's key list what was stored before it started.
pub fn subscriber_restart_bootstraps_objects_stored_while_away<R: Runtime, P: Peer>() {
    let peer = P::start();
    let first = tokens(1, 2);
    peer.store(&object_keys(&first));
    let cfg = || following(&peer, true);
    let (q, _control, running) = R::spawn(cfg());
    wait_until(&q, "the bootstrap", PATIENCE, || prefix(&q, &first) == 2);
    R::shutdown(running);
    assert_eq!(prefix(&q, &first), 0, "a stopped subscriber answers misses");

    let second = tokens(2, 3);
    peer.store(&object_keys(&second));
    let (q, _control, running) = R::spawn(cfg());
    wait_until(&q, "both sets", PATIENCE, || {
        prefix(&q, &first) == 2 && prefix(&q, &second) == 3
    });
    assert!(q.counters().snapshot_keys >= 20);
    assert_eq!(q.health(), Health::Live);
    R::shutdown(running);
}

/// Without a configured endpoint the subscriber follows what workers advertise; a new endpoint
/// means a new stream: forget, reconnect, and ignore the old one.
pub fn endpoint_change_follows_worker_metadata<R: Runtime, P: Peer>() {
    let (one, two) = (P::start(), P::start());
    let (q, control, running) = R::spawn(config(None, None));
    let advertise = |endpoint: String| WorkerInfo {
        event_endpoint: Some(endpoint),
        ..WorkerInfo::default()
    };
    assert!(control.report_worker("worker-0", Some(advertise(one.event_endpoint()))));
    wait_subscribed(&one, &q);
    let a = tokens(1, 2);
    store_until_hits(&one, &q, "pages from the first master", &a);

    assert!(control.report_worker("worker-0", Some(advertise(two.event_endpoint()))));
    wait_until(&q, "the change to clear", PATIENCE, || {
        q.counters().clears_endpoint == 1 && prefix(&q, &a) == 0
    });
    wait_subscribed(&two, &q);
    let (b, c) = (tokens(2, 2), tokens(3, 2));
    one.store(&object_keys(&c));
    two.store(&object_keys(&b));
    wait_until(&q, "pages from the second master", PATIENCE, || {
        prefix(&q, &b) == 2
    });
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(prefix(&q, &c), 0, "the old endpoint is not listened to");
    assert_eq!(q.endpoint(), Some(two.event_endpoint()));
    R::shutdown(running);
}

/// Messages of another topic on the same socket are counted and ignored, even ones that would
/// remove present objects with a sequence far ahead.
pub fn stray_topic_on_the_same_endpoint_never_clears<R: Runtime, P: Peer>() {
    let peer = P::start();
    let (q, _control, running) = spawn_subscribed::<R, P>(&peer, following(&peer, false));
    let a = tokens(1, 2);
    let keys = store_until_hits(&peer, &q, "the pages", &a);
    for topic in [&b"kv-events"[..], b"\x00"] {
        peer.send_frames(&[
            topic.to_vec(),
            1_000_000u64.to_be_bytes().to_vec(),
            removal_payload(&keys),
        ]);
    }
    wait_until(&q, "two strays", PATIENCE, || q.counters().stray_topic == 2);
    assert_eq!(prefix(&q, &a), 2, "a stray publisher removes nothing");
    store_until_hits(&peer, &q, "the stream to go on", &tokens(2, 1));
    let c = q.counters();
    assert_eq!((c.gaps, clears(&c), c.removed), (0, 0, 0), "{c:#?}");
    R::shutdown(running);
}

/// Messages that cannot be read are counted by kind; those that cannot be placed in the stream
/// (a bad sequence frame, a wrong frame count) are dropped, while a batch of the stream whose
/// payload cannot be decoded is loss: the index forgets, and the stream carries on.
pub fn malformed_messages_are_counted_and_an_undecodable_batch_is_loss<R: Runtime, P: Peer>() {
    let peer = P::start();
    let (q, _control, running) = spawn_subscribed::<R, P>(&peer, following(&peer, false));
    let a = tokens(1, 2);
    let keys = store_until_hits(&peer, &q, "the pages", &a);
    let removal = removal_payload(&keys);
    peer.send_frames(&[vec![], vec![0, 0, 0, 0, 0, 0, 9], removal.clone()]);
    peer.send_frames(&[vec![], u64::MAX.to_be_bytes().to_vec(), vec![0xc1, 0x93]]);
    peer.send_frames(&[vec![], 7u64.to_be_bytes().to_vec()]);
    peer.send_frames(&[vec![], 7u64.to_be_bytes().to_vec(), removal, vec![1]]);
    wait_until(&q, "every bad message counted", PATIENCE, || {
        let c = q.counters();
        c.malformed_seq == 1 && c.malformed_payload == 1 && c.stray_frame_count == 2
    });
    assert_eq!(
        prefix(&q, &a),
        0,
        "what the undecodable batch changed is unknown"
    );
    store_until_hits(&peer, &q, "the stream to go on", &tokens(2, 1));
    let c = q.counters();
    assert_eq!(
        (c.gaps, clears(&c), c.clears_undecodable, c.removed),
        (0, 1, 1, 0),
        "{c:#?}"
    );
    R::shutdown(running);
}

/// After lost sequences the subscriber forgets and resynchronises from the key list: objects
/// stored before it started, before the gap and in the lost batches are all hits again.
pub fn gap_then_resync_recovers_objects_from_before_the_gap_and_the_start<R: Runtime, P: Peer>() {
    let peer = P::start();
    let (before_start, before_gap, lost, after) =
        (tokens(1, 2), tokens(2, 2), tokens(3, 2), tokens(4, 2));
    peer.store(&object_keys(&before_start));
    let (q, _control, running) = R::spawn(following(&peer, true));
    wait_until(&q, "the bootstrap", PATIENCE, || {
        prefix(&q, &before_start) == 2
    });
    wait_subscribed(&peer, &q);
    store_until_hits(&peer, &q, "live pages", &before_gap);
    let started = q.counters().resyncs_completed;
    peer.store_unpublished(&object_keys(&lost));
    peer.store(&object_keys(&after));
    wait_until(&q, "a resync after the gap", PATIENCE, || {
        let c = q.counters();
        c.gaps == 1 && c.resyncs_completed > started && q.health() == Health::Live
    });
    for (name, t) in [
        ("before start", &before_start),
        ("before gap", &before_gap),
        ("lost", &lost),
        ("after", &after),
    ] {
        wait_until(&q, name, PATIENCE, || prefix(&q, t) == 2);
    }
    assert_eq!(q.counters().clears_gap, 1);
    R::shutdown(running);
}

/// An object removed without an event is found by verification over `/batch_query_keys`.
pub fn silent_removal_is_found_by_verification<R: Runtime, P: Peer>() {
    let peer = P::start();
    let mut cfg = following(&peer, true);
    cfg.session.verify = Some(VerifyConfig {
        interval: Duration::from_millis(100),
        timeout: Duration::from_secs(2),
        ..VerifyConfig::default()
    });
    let (q, _control, running) = spawn_subscribed::<R, P>(&peer, cfg);
    let a = tokens(1, 2);
    let keys = store_until_hits(&peer, &q, "the pages", &a);
    peer.remove_silently(&keys[..1]);
    wait_until(&q, "verification to catch it", PATIENCE, || {
        prefix(&q, &a) == 0
    });
    assert!(q.counters().stale_keys_found >= 1);
    R::shutdown(running);
}

/// Stopping ends the loop within 100 ms; the stopped index answers misses, untrusted.
pub fn shutdown_stops_within_100ms_and_leaves_misses<R: Runtime, P: Peer>() {
    let peer = P::start();
    let (q, control, running) = spawn_subscribed::<R, P>(&peer, following(&peer, true));
    let a = tokens(1, 2);
    store_until_hits(&peer, &q, "the pages", &a);
    let took = R::shutdown(running);
    assert!(took < Duration::from_millis(100), "shutdown took {took:?}");
    assert!(!q.is_running());
    assert_eq!(q.health(), Health::Disconnected);
    assert_eq!(prefix(&q, &a), 0);
    assert!(!control.clear(), "a stopped subscriber takes no requests");
}

/// Dropping the task handle stops the loop within 100 ms too.
pub fn dropping_the_task_stops_within_100ms<R: Runtime, P: Peer>() {
    let peer = P::start();
    let (q, _control, mut running) = spawn_subscribed::<R, P>(&peer, following(&peer, false));
    let start = Instant::now();
    R::drop_task(&mut running);
    wait_until(&q, "the loop to end", Duration::from_secs(1), || {
        !q.is_running()
    });
    let took = start.elapsed();
    assert!(took < Duration::from_millis(100), "stopping took {took:?}");
    assert_eq!(q.health(), Health::Disconnected);
    drop(running);
}

/// A free TCP port on loopback (nothing listens on it when this returns).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A subscriber started before its publisher keeps trying (refused connections are
/// disconnections, retried on the core's schedule with fresh sockets) and connects once the
/// publisher is there.
pub fn publisher_started_late_is_reached_by_retrying<R: Runtime, P: Peer>() {
    let port = free_port();
    let (q, _control, running) = R::spawn(config(Some(format!("tcp://127.0.0.1:{port}")), None));
    wait_until(&q, "refused attempts", PATIENCE, || {
        q.counters().disconnects >= 2
    });
    assert_eq!(q.health(), Health::Disconnected);
    let peer = P::start_on(port);
    wait_subscribed(&peer, &q);
    store_until_hits(&peer, &q, "the pages", &tokens(1, 2));
    R::shutdown(running);
}

/// A frame larger than the socket's limit drops the connection instead of filling memory; the
/// subscriber forgets, reconnects and resynchronises.
pub fn oversized_message_drops_the_connection_and_recovers<R: Runtime, P: Peer>() {
    let peer = P::start();
    let mut cfg = following(&peer, true);
    cfg.socket.max_message_bytes = 64 << 10;
    let (q, _control, running) = spawn_subscribed::<R, P>(&peer, cfg);
    let a = tokens(1, 2);
    store_until_hits(&peer, &q, "the pages", &a);
    let connects = q.counters().connects;
    peer.send_frames(&[vec![], 1u64.to_be_bytes().to_vec(), vec![0x90; 100 << 10]]);
    wait_until(&q, "a new connection", PATIENCE, || {
        let c = q.counters();
        c.connects > connects && c.clears_disconnected >= 1
    });
    wait_until(&q, "live again with the pages", PATIENCE, || {
        q.health() == Health::Live && prefix(&q, &a) == 2
    });
    let c = q.counters();
    assert_eq!(c.malformed_payload + c.malformed_seq, 0, "{c:#?}");
    R::shutdown(running);
}

/// A TCP peer that accepts but never speaks ZeroMQ is given up on after the core's connect
/// timeout, and tried again later; the subscriber never claims to be connected.
pub fn silent_tcp_peer_times_out_and_is_retried<R: Runtime>() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
    let port = listener.local_addr().expect("an address").port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(stream);
            if held.len() >= 3 {
                break;
            }
        }
        std::thread::sleep(Duration::from_secs(2));
    });
    let mut cfg = config(Some(format!("tcp://127.0.0.1:{port}")), None);
    cfg.session.backoff.connect_timeout = Duration::from_millis(200);
    let (q, _control, running) = R::spawn(cfg);
    wait_until(&q, "two timed-out attempts", PATIENCE, || {
        accepted.load(std::sync::atomic::Ordering::SeqCst) >= 2 && q.counters().disconnects >= 1
    });
    assert_ne!(q.health(), Health::Live);
    R::shutdown(running);
}

/// A large key list is handed to the session in chunks, with the live stream fed in between:
/// a batch published while the snapshot is being applied is applied before the snapshot is
/// finished, and queries see the snapshot grow chunk by chunk instead of waiting for all of it.
pub fn live_batches_are_applied_while_a_large_snapshot_is_handed_over<R: Runtime>() {
    let peer = EmulatorPeer::start();
    let mut cfg = following(&peer, true);
    if let Some(resync) = &mut cfg.session.resync {
        // Unoptimised builds take seconds for this key list.
        resync.fetch_timeout = Duration::from_secs(60);
    }
    cfg.http.request_timeout = Duration::from_secs(30);
    let (q, _control, running) = spawn_subscribed::<R, _>(&peer, cfg);
    wait_until(&q, "live", PATIENCE, || q.health() == Health::Live);
    // 100,000 objects stored with their events lost: the next batch shows a gap, and the
    // resync after it reads them all from the key list (in chunks of SNAPSHOT_CHUNK_LINES).
    let bulk = tokens(7, 25_000);
    let bulk_keys = object_keys(&bulk);
    let resyncs = q.counters().resyncs_completed;
    peer.store_unpublished(&bulk_keys);
    peer.store(&object_keys(&tokens(8, 1)));
    let half_applied = |s: SessionStatus| {
        let c = s.counters;
        c.resyncs_completed == resyncs
            && c.objects >= SNAPSHOT_CHUNK_LINES as u64
            && c.objects < bulk_keys.len() as u64
    };
    let start = Instant::now();
    while q.status().map(half_applied) != Some(true) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the snapshot was never seen partly applied; counters {:#?}",
            q.counters()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    let live = tokens(9, 1);
    let published = peer
        .0
        .store(object_keys(&live))
        .expect("a batch was published");
    let (applied, finished) = loop {
        let seen = q.status().map(|s| {
            let applied = s.last_applied_seq.is_some_and(|seq| seq >= published.seq);
            (applied, s.counters.resyncs_completed > resyncs)
        });
        match seen {
            Some((true, finished)) => break (true, finished),
            Some((false, true)) | None => break (false, true),
            Some((false, false)) => std::thread::sleep(Duration::from_micros(200)),
        }
    };
    assert!(
        applied && !finished,
        "the batch published during the handover was applied only after it; counters {:#?}",
        q.counters()
    );
    wait_until(&q, "the resync to finish", Duration::from_secs(60), || {
        q.counters().resyncs_completed > resyncs && q.health() == Health::Live
    });
    assert_eq!(prefix(&q, &bulk), 25_000, "every page of the key list");
    assert_eq!(prefix(&q, &live), 1, "the page of the live batch");
    R::shutdown(running);
}
