//! hicache-index following a real Mooncake HA cluster (0.3.14 masters, Debian's etcd) through
//! etcd: two masters on 127.0.0.1 and 127.0.0.2, the real store client putting pages through the
//! leader, then the leader killed (SIGKILL). Run with `.ci/mooncake-run` (it adds 127.0.0.2 to
//! `lo` inside its private network namespace).
//!
//! Through the tokio library and through `serve` over HTTP: the old pages stop being hits as
//! soon as the failover is seen, no page is ever claimed that the serving leader does not hold,
//! pages put through the new leader become hits, and the index reports the new leader. Each run
//! prints the time from the kill to live again and from the new leader serving to live again.

use std::time::{Duration, Instant};

use hicache_index::Health;
use hicache_index_mooncake_tests::ha::{cluster_ports, Etcd, HaIndex, HaMaster};
use hicache_index_mooncake_tests::process::{MasterPorts, StoreClient, Venvs};
use hicache_index_mooncake_tests::{report, TestLayout};
use serde_json::json;

/// The longest a leader election (lease 5 s, then warm-up) or a resync may take here.
const ELECTION: Duration = Duration::from_secs(60);

fn tokens(id: u32, pages: u32) -> Vec<u32> {
    (0..pages * 4).map(|i| id * 100_000 + i + 1).collect()
}

/// Puts probe keys through `client` until the index has applied one more batch: the ZeroMQ
/// subscription then carries events (a PUB drops what it sends before the subscription is in).
fn wait_subscribed(index: &HaIndex, client: &mut StoreClient) {
    let before = index.state().batches;
    let started = Instant::now();
    for n in 0.. {
        client.call(json!({"op": "put", "keys": [format!("probe-ha-{}-{n}", std::process::id())]}));
        let round = Instant::now();
        while round.elapsed() < Duration::from_millis(300) {
            if index.state().batches > before {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{}: no event reached the index within 20 s: {:?}",
            index.via(),
            index.state()
        );
    }
}

/// Asserts the rule above all at one instant: every page `index` claims of `keys`' request is
/// held by the master that serves now (a dead or standby master serves nothing).
fn assert_no_false_hit(
    index: &HaIndex,
    layout: &TestLayout,
    tokens: &[u32],
    masters: &[&HaMaster],
    when: &str,
) -> usize {
    let claimed = index.prefix(layout, tokens);
    if claimed > 0 {
        let keys = layout.object_keys(&tokens[..claimed * 4]);
        let held = masters.iter().any(|m| m.is_serving() && m.holds(&keys));
        assert!(
            held,
            "{}: {when}: {claimed} pages claimed that no serving leader holds: {:?}",
            index.via(),
            index.state()
        );
    }
    claimed
}

fn start_index(
    via: &str,
    venvs: &Venvs,
    layout: &TestLayout,
    ports: MasterPorts,
    etcd: &Etcd,
) -> HaIndex {
    match via {
        "tokio" => HaIndex::tokio(layout, ports, etcd),
        _ => HaIndex::serve(venvs, layout, ports, etcd),
    }
}

fn failover(via: &str) {
    let venvs = Venvs::from_env();
    let etcd = Etcd::start(&venvs);
    let ports = cluster_ports();
    let mut a = HaMaster::start(&venvs, 1, ports, &etcd);
    let elected = a.wait_serving(ELECTION);
    let b = HaMaster::start(&venvs, 2, ports, &etcd);
    let layout = TestLayout::mha(4, 2, None);
    let index = start_index(via, &venvs, &layout, ports, &etcd);
    index.wait("live on leader A", ELECTION, |i| i.is_live_on(&a));
    let before = index.state();
    assert_eq!(
        before.view_version,
        a.health()["view_version"].as_u64(),
        "{before:?}"
    );

    let mut client = StoreClient::start(&venvs);
    client.setup(&a.rpc_address());
    wait_subscribed(&index, &mut client);
    let old = tokens(1, 4);
    client.put_pages(&old, &layout.py, None);
    index.wait("A's pages as hits", Duration::from_secs(20), |i| {
        i.prefix(&layout, &old) == 4
    });

    let killed = Instant::now();
    a.kill();
    let mut seen = None;
    let mut serving = None;
    let mut polls = 0u64;
    let mut window = (0u64, Duration::ZERO);
    let live = loop {
        polls += 1;
        let (claimed, trust) = index.ask(&layout, &old);
        if seen.is_none() && trust != Health::Live.as_str() {
            seen = Some(killed.elapsed());
        }
        // Until the index sees the kill (its connection drops), it cannot know: answers
        // trusted `live` in that window are the detection delay, counted and reported; once it
        // was seen, every old page claimed must be held by the serving leader.
        if claimed > 0 && seen.is_none() {
            window = (window.0 + 1, killed.elapsed());
        } else if claimed > 0 {
            let keys = layout.object_keys(&old[..claimed * 4]);
            assert!(
                b.is_serving() && b.holds(&keys),
                "{via}: {claimed} old pages claimed (trust {trust}) after the failover was seen \
                 that the serving leader does not hold: {:?}",
                index.state()
            );
        }
        let state = index.state();
        if serving.is_none() && b.is_serving() {
            serving = Some(killed.elapsed());
        }
        if index.is_live_on(&b) {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < ELECTION,
            "{via}: not live on B within {ELECTION:?}: {state:?}, B: {}",
            b.health()
        );
        std::thread::sleep(Duration::from_millis(25));
    };
    let serving = serving.unwrap_or(live);
    let after = index.state();
    assert_eq!(
        after.address,
        Some(b.rpc_address()),
        "the index reports the new leader"
    );
    assert_eq!(
        after.view_version,
        b.health()["view_version"].as_u64(),
        "{after:?}"
    );
    assert!(
        after.view_version > before.view_version,
        "{before:?} -> {after:?}"
    );
    assert!(after.changes >= 1, "{after:?}");
    // What B holds of A's pages (it restores metadata, not the dead master's data) decides.
    let old_now = assert_no_false_hit(&index, &layout, &old, &[&b], "live on B");

    let mut client_b = StoreClient::start(&venvs);
    client_b.setup(&b.rpc_address());
    wait_subscribed(&index, &mut client_b);
    let new = tokens(2, 4);
    client_b.put_pages(&new, &layout.py, None);
    index.wait("B's pages as hits", Duration::from_secs(20), |i| {
        i.prefix(&layout, &new) == 4
    });
    assert_no_false_hit(&index, &layout, &new, &[&b], "after B's puts");
    report(
        &format!("ha failover ({via})"),
        format_args!(
            "A elected in {:.1} s; kill -> index saw it {:.2} s, B serving {:.1} s (our 25 ms \
             poll), index live on B {:.2} s: serving -> live {} ms (index's own figures: \
             {:?} ms from the change seen, {:?} ms from serving); {polls} polls, none with a \
             false hit once the kill was seen ({} answered live before it, the last {} ms \
             after the kill); A's pages hits after: {old_now} of 4; view {:?} -> {:?}",
            elapsed_s(elapsed_ms(elected)),
            elapsed_s(elapsed_ms(seen.unwrap_or(live))),
            elapsed_s(elapsed_ms(serving)),
            elapsed_s(elapsed_ms(live)),
            elapsed_ms(live.saturating_sub(serving)),
            after.last_failover_ms,
            after.last_failover_after_serving_ms,
            window.0,
            elapsed_ms(window.1),
            before.view_version,
            after.view_version,
        ),
    );
}

fn elapsed_ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

fn elapsed_s(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

#[test]
#[ignore = "needs the real Mooncake master: run .ci/mooncake-run"]
fn failover_tokio() {
    failover("tokio");
}

#[test]
#[ignore = "needs the real Mooncake master: run .ci/mooncake-run"]
fn failover_serve() {
    failover("serve");
}

/// The only master is killed and started again at the same address: etcd's key is created anew
/// (a new view version), so the index takes it for a new incarnation, forgets, and resyncs.
fn restart_in_place(via: &str) {
    let venvs = Venvs::from_env();
    let etcd = Etcd::start(&venvs);
    let ports = cluster_ports();
    let mut a = HaMaster::start(&venvs, 1, ports, &etcd);
    a.wait_serving(ELECTION);
    let layout = TestLayout::mha(4, 1, None);
    let index = start_index(via, &venvs, &layout, ports, &etcd);
    index.wait("live on A", ELECTION, |i| i.is_live_on(&a));
    let before = index.state();
    let mut client = StoreClient::start(&venvs);
    client.setup(&a.rpc_address());
    wait_subscribed(&index, &mut client);
    let old = tokens(3, 2);
    client.put_pages(&old, &layout.py, None);
    index.wait("A's pages", Duration::from_secs(20), |i| {
        i.prefix(&layout, &old) == 2
    });
    drop(client);

    let killed = Instant::now();
    a.kill();
    a.start_again();
    let mut seen = false;
    let live = loop {
        // As in the failover: answers trusted `live` before the index saw the kill are its
        // detection delay; after that, nothing the restarted master does not hold.
        let (claimed, trust) = index.ask(&layout, &old);
        seen |= trust != Health::Live.as_str();
        if seen && claimed > 0 {
            assert_no_false_hit(&index, &layout, &old, &[&a], "during the restart");
        }
        let s = index.state();
        if s.view_version != before.view_version && index.is_live_on(&a) {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < ELECTION,
            "{via}: not live again: {s:?}, A: {}",
            a.health()
        );
        std::thread::sleep(Duration::from_millis(25));
    };
    let after = index.state();
    assert_eq!(after.address, before.address, "the same address");
    assert!(
        after.view_version > before.view_version,
        "{before:?} -> {after:?}"
    );
    assert_eq!(
        after.changes,
        before.changes + 1,
        "one new incarnation: {after:?}"
    );
    assert_eq!(
        index.prefix(&layout, &old),
        0,
        "the restarted master holds none of them"
    );
    let mut client = StoreClient::start(&venvs);
    client.setup(&a.rpc_address());
    wait_subscribed(&index, &mut client);
    let new = tokens(4, 2);
    client.put_pages(&new, &layout.py, None);
    index.wait("the new run's pages", Duration::from_secs(20), |i| {
        i.prefix(&layout, &new) == 2
    });
    report(
        &format!("ha restart in place ({via})"),
        format_args!(
            "kill + start again -> live on the new incarnation {:.2} s; view {:?} -> {:?}",
            elapsed_s(elapsed_ms(live)),
            before.view_version,
            after.view_version
        ),
    );
}

#[test]
#[ignore = "needs the real Mooncake master: run .ci/mooncake-run"]
fn restart_in_place_tokio() {
    restart_in_place("tokio");
}

#[test]
#[ignore = "needs the real Mooncake master: run .ci/mooncake-run"]
fn restart_in_place_serve() {
    restart_in_place("serve");
}

/// The watcher reads the key, watches it, and when etcd goes away reads it again every poll
/// interval until etcd is back: a value set while it was down is seen. No master runs here
/// (the addresses are nobody's): the index checks the named leader and, as it never serves,
/// follows nobody and claims nothing.
#[test]
#[ignore = "needs the real Mooncake master: run .ci/mooncake-run"]
fn etcd_watch_falls_back_to_polling_and_sees_every_value() {
    let venvs = Venvs::from_env();
    let mut etcd = Etcd::start(&venvs);
    let key = "mooncake-store/mooncake_cluster/master_view";
    etcd.put(key, "127.0.0.9:50051");
    let ports = cluster_ports();
    let layout = TestLayout::mha(4, 1, None);
    let index = HaIndex::tokio(&layout, ports, &etcd);
    let candidate =
        |want: &'static str| move |i: &HaIndex| i.state().candidate.as_deref() == Some(want);
    index.wait(
        "the first value read",
        Duration::from_secs(10),
        candidate("127.0.0.9:50051"),
    );
    etcd.put(key, "127.0.0.8:50051");
    let watched = index.wait(
        "a value watched",
        Duration::from_secs(10),
        candidate("127.0.0.8:50051"),
    );
    etcd.kill();
    std::thread::sleep(Duration::from_secs(1));
    etcd.start_again();
    etcd.put(key, "127.0.0.7:50051");
    let polled = index.wait(
        "the value set around etcd's restart",
        Duration::from_secs(20),
        candidate("127.0.0.7:50051"),
    );
    let state = index.state();
    assert_eq!(state.address, None, "no leader served: {state:?}");
    assert_ne!(state.health, Health::Live.as_str());
    assert_eq!(index.prefix(&layout, &tokens(5, 2)), 0);
    report(
        "ha etcd fallback (tokio)",
        format_args!(
            "a put seen through the watch in {} ms; after etcd was killed for 1 s and started \
             again, a put seen in {} ms",
            elapsed_ms(watched),
            elapsed_ms(polled)
        ),
    );
}
