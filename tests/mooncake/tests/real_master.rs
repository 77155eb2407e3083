//! hicache-index against a real Mooncake master (0.3.14, KV events on) and a real store client.
//!
//! Run with `.ci/mooncake-run` (one test at a time, in a private network namespace, output
//! shown): each scenario starts its own master on free loopback ports and its own store client,
//! and prints what it measured on lines starting with `[mooncake]`.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use hicache_index::{ClearReason, Effect, Health, PageHash, ResyncConfig, VerifyConfig};
use hicache_index_mooncake_tests::driver::IndexDriver;
use hicache_index_mooncake_tests::process::{strings, Master, MasterConfig, StoreClient, Venvs};
use hicache_index_mooncake_tests::{
    config, is_probe, report, run_all_until, wait_subscribed, TestLayout,
};

/// The longest any single wait of these tests lasts.
const WAIT: Duration = Duration::from_secs(20);

/// Tokens of request `id`: `len` distinct values, so every request has its own page chain.
fn tokens(id: u32, len: u32) -> Vec<u32> {
    (0..len).map(|i| id * 100_000 + i + 1).collect()
}

/// Starts a master, a connected store client and one live driver on it.
fn start(
    venvs: &Venvs,
    name: &str,
    cfg: impl FnOnce(&Master) -> hicache_index::Config,
) -> (Master, StoreClient, IndexDriver) {
    let master = Master::start(venvs, MasterConfig::new(name));
    let mut client = StoreClient::connect(venvs, &master);
    let mut driver = IndexDriver::new(cfg(&master), master.http_addr());
    driver
        .run_until("the index to be live", WAIT, |d| {
            d.session().health() == Health::Live
        })
        .unwrap();
    wait_subscribed(&mut [&mut driver], &mut client);
    (master, client, driver)
}

/// The objects the session has applied so far (stored events, live or replayed).
fn stored(d: &IndexDriver) -> u64 {
    d.session().counters().stored
}

#[test]
fn live_ingest_hits_put_pages_and_misses_partial_and_removed_ones() {
    let venvs = Venvs::from_env();
    let layout = TestLayout::mha(4, 2, None);
    let (master, mut client, mut driver) = start(&venvs, "live-ingest", |m| config(m, &[&layout]));
    let toks = tokens(1, 16); // four full pages

    // Three of four pages, put for real one object at a time.
    let before = stored(&driver);
    let put_at = Instant::now();
    let pages = client.put_pages(&toks, &layout.py, Some(3));
    assert_eq!(
        pages.keys,
        layout.object_keys(&toks)[..12],
        "Python and core keys agree"
    );
    let took = driver
        .run_until("three pages to hit", WAIT, |d| layout.prefix(d, &toks) == 3)
        .unwrap();
    report(
        "live ingest",
        format!(
            "12 objects put one by one in {:?}; prefix 3 reached {took:?} after the last put",
            put_at.elapsed() - took
        ),
    );
    assert_eq!(stored(&driver) - before, 12);
    let hits = driver.session().query(&layout.lookup(&toks)).unwrap();
    assert_eq!(
        (hits.prefix_pages, hits.total_pages, hits.trust),
        (3, 4, Health::Live)
    );
    assert_eq!(hits.memory_pages, 3, "Mooncake reported medium cpu");

    // Putting an object that exists succeeds at the client and publishes nothing.
    let messages = driver.stream().messages;
    client.put(&pages.keys[..1]);
    wait_subscribed(&mut [&mut driver], &mut client);
    assert_eq!(
        driver.stream().messages,
        messages + 1,
        "only the probe was published"
    );
    let before = before + 1; // the probe's own stored event
    assert_eq!(stored(&driver) - before, 12);

    // Half of the fourth page: still three.
    let page4 = layout.object_keys(&toks)[12..].to_vec();
    client.put(&page4[..2]);
    driver
        .run_until("two more objects", WAIT, |d| stored(d) - before == 14)
        .unwrap();
    let mut map = [false; 4];
    let hits = driver
        .session()
        .query_map(&layout.lookup(&toks), &mut map)
        .unwrap();
    assert_eq!(hits.prefix_pages, 3, "a partially put page is not a hit");
    assert_eq!(map, [true, true, true, false]);

    // A forced remove of one object of page 2 (rank 1's V).
    let victim = layout.object_keys(&toks)[7].clone();
    assert!(victim.ends_with("_1_v"));
    client.remove(std::slice::from_ref(&victim));
    driver
        .run_until("the removal", WAIT, |d| d.session().counters().removed == 1)
        .unwrap();
    let hits = driver
        .session()
        .query_map(&layout.lookup(&toks), &mut map)
        .unwrap();
    assert_eq!(hits.prefix_pages, 1, "a page missing one object is a miss");
    assert_eq!(map, [true, false, true, false]);

    // The rest of page 4: it is complete, but the prefix stops at page 2.
    client.put(&page4[2..]);
    driver
        .run_until("page 4 complete", WAIT, |d| stored(d) - before == 16)
        .unwrap();
    let hits = driver
        .session()
        .query_map(&layout.lookup(&toks), &mut map)
        .unwrap();
    assert_eq!((hits.prefix_pages, map), (1, [true, false, true, true]));

    // The master agrees with every page the index calls complete.
    let all: HashSet<String> = master.all_keys().into_iter().collect();
    for (i, h) in layout.page_hashes(&toks).iter().enumerate() {
        let present = layout.core.object_keys(h).all(|k| all.contains(&k));
        assert_eq!(map[i], present, "page {i}: index and master agree");
    }
    let c = driver.session().counters();
    assert_eq!((c.gaps, c.restarts, c.malformed_payload), (0, 0, 0));
    assert_eq!(driver.stream().first_seq, Some(1), "the master starts at 1");
    report(
        "live ingest",
        format!(
            "{} batches, max {} events per batch, objects {}, pages {}",
            c.batches,
            driver.stream().max_batch_events,
            c.objects,
            c.pages
        ),
    );
}

#[test]
fn layouts_mha_tp2_mla_and_model_prefix_agree_with_the_real_client() {
    let venvs = Venvs::from_env();
    let mha = TestLayout::mha(4, 2, None);
    let mla = TestLayout::mla(4, "mla-model");
    let prefixed = TestLayout::mha(4, 2, Some("Qwen/Qwen3-8B"));
    let (_master, mut client, mut driver) =
        start(&venvs, "layouts", |m| config(m, &[&mha, &mla, &prefixed]));

    let cases = [
        (&mha, tokens(10, 13)),
        (&mla, tokens(11, 13)),
        (&prefixed, tokens(12, 13)),
    ];
    let mut expected_objects = 0;
    for (layout, toks) in &cases {
        let before = stored(&driver);
        let pages = client.put_pages(toks, &layout.py, None);
        let core_hashes: Vec<String> = layout
            .page_hashes(toks)
            .iter()
            .map(|h| h.to_string())
            .collect();
        assert_eq!(
            pages.hashes, core_hashes,
            "page hashes: Python and core agree"
        );
        assert_eq!(
            pages.keys,
            layout.object_keys(toks),
            "object keys: Python and core agree"
        );
        expected_objects += pages.keys.len() as u64;
        let n = pages.keys.len() as u64;
        driver
            .run_until("the pages' objects", WAIT, |d| stored(d) - before == n)
            .unwrap();
        let hits = driver.session().query(&layout.lookup(toks)).unwrap();
        assert_eq!(
            (hits.prefix_pages, hits.total_pages),
            (3, 3),
            "{:?}",
            layout.py
        );
        report(
            "layouts",
            format!(
                "{:?}: first key {}, 3 of 3 pages hit",
                layout.py, pages.keys[0]
            ),
        );
    }
    // Objects of one layout never make a page of another: the MLA pages have no `_r_k/_r_v`,
    // the prefixed pages live under their prefix.
    assert_eq!(
        mha.prefix(&driver, &cases[1].1),
        0,
        "MLA objects are no MHA page"
    );
    assert_eq!(
        mla.prefix(&driver, &cases[0].1),
        0,
        "MHA objects are no MLA page"
    );
    assert_eq!(
        mha.prefix(&driver, &cases[2].1),
        0,
        "prefixed objects are no unprefixed page"
    );
    let c = driver.session().counters();
    assert_eq!(c.objects, expected_objects);
    assert_eq!(c.untracked_objects, 0);
}

#[test]
fn silent_removal_is_bounded_by_verification_and_visible_without_it() {
    let venvs = Venvs::from_env();
    let layout = TestLayout::mha(4, 2, None);
    let interval = Duration::from_millis(500);
    let master = Master::start(&venvs, MasterConfig::new("silent-removal"));
    let mut client = StoreClient::connect(&venvs, &master);
    let mut verified = IndexDriver::new(
        hicache_index::Config {
            verify: Some(VerifyConfig {
                interval,
                ..VerifyConfig::default()
            }),
            resync: Some(ResyncConfig::default()),
            ..config(&master, &[&layout])
        },
        master.http_addr(),
    );
    let mut unverified = IndexDriver::new(config(&master, &[&layout]), master.http_addr());
    let mut both = [&mut verified, &mut unverified];
    run_all_until(&mut both, "both live", WAIT, |ds| {
        ds.iter().all(|d| d.session().health() == Health::Live)
    });
    wait_subscribed(&mut both, &mut client);

    let toks = tokens(2, 12);
    let pages = client.put_pages(&toks, &layout.py, None);
    run_all_until(&mut both, "three pages hit in both", WAIT, |ds| {
        ds.iter().all(|d| layout.prefix(d, &toks) == 3)
    });

    // Closing the client makes the master drop its keys, without any event. The close runs
    // while both indexes keep going; the master is polled to see when the keys are gone.
    let messages_before: Vec<u64> = both.iter().map(|d| d.stream().messages).collect();
    let close_sent = Instant::now();
    client.send(&serde_json::json!({"op": "close"}));
    let mut gone_at = None;
    let mut close_took = None;
    let mut last_poll = Instant::now();
    run_all_until(
        &mut both,
        "the keys to vanish and the verified index to drop the pages",
        WAIT,
        |ds| {
            if close_took.is_none() {
                if let Some(answer) = client.try_recv() {
                    answer.expect("close");
                    close_took = Some(close_sent.elapsed());
                }
            }
            if gone_at.is_none() && last_poll.elapsed() >= Duration::from_millis(5) {
                last_poll = Instant::now();
                if master.query_keys(&pages.keys).iter().all(|(_, ok)| !ok) {
                    gone_at = Some(Instant::now());
                }
            }
            gone_at.is_some() && close_took.is_some() && layout.prefix(ds[0], &toks) == 0
        },
    );
    let gone_at = gone_at.expect("the keys vanished");
    let took = gone_at.elapsed();
    let closed_at = Instant::now();
    report(
        "silent removal",
        format!(
            "close() took {:?}; the master dropped the keys {:?} after it was sent; with \
             verification every {interval:?} the stale pages stopped being hits {took:?} after \
             that (bound: one interval + one /batch_query_keys round trip)",
            close_took.unwrap_or_default(),
            gone_at - close_sent,
        ),
    );
    assert!(
        took <= interval + Duration::from_millis(500),
        "took {took:?}"
    );

    // Give the unverified index two more intervals: it still claims the pages.
    let until = Instant::now() + 2 * interval;
    while Instant::now() < until {
        hicache_index_mooncake_tests::step_all(&mut both);
    }
    for (d, before) in both.iter().zip(&messages_before) {
        // At most the verified side's resync fetched something; no event came.
        assert_eq!(d.stream().messages, *before, "close() published no event");
    }
    let v = both[0].session().counters();
    let u = both[1].session().counters();
    let stale_claims = layout.prefix(both[1], &toks);
    report(
        "silent removal",
        format!(
            "verified: verify_rounds {}, verified_keys {}, stale_keys_found {}, resyncs {}, \
             objects {}; unverified after {:?}: prefix {stale_claims} of 3 (false hits), \
             objects {}, stale_keys_found {}, health {:?}",
            v.verify_rounds,
            v.verified_keys,
            v.stale_keys_found,
            v.resyncs_completed,
            v.objects,
            closed_at.elapsed(),
            u.objects,
            u.stale_keys_found,
            both[1].session().health()
        ),
    );
    assert_eq!(v.stale_keys_found, 12);
    assert!(both[0]
        .effects()
        .iter()
        .any(|(_, e)| matches!(e, Effect::StaleFound { keys: 12, .. })));
    assert_eq!(
        stale_claims, 3,
        "without verification the silent removal stays invisible"
    );
    assert_eq!((u.objects, u.stale_keys_found, u.verify_rounds), (12, 0, 0));
}

#[test]
fn late_join_bootstraps_from_get_all_keys_without_losing_concurrent_events() {
    let venvs = Venvs::from_env();
    let layout = TestLayout::mha(4, 2, None);
    let master = Master::start(&venvs, MasterConfig::new("late-join"));
    let mut client = StoreClient::connect(&venvs, &master);

    // Before the index exists: three requests of three pages.
    let early: Vec<Vec<u32>> = (0..3).map(|i| tokens(30 + i, 12)).collect();
    let early_keys: Vec<String> = early
        .iter()
        .flat_map(|t| client.put_pages(t, &layout.py, None).keys)
        .collect();

    let mut driver = IndexDriver::new(
        hicache_index::Config {
            resync: Some(ResyncConfig::default()),
            ..config(&master, &[&layout])
        },
        master.http_addr(),
    );
    // The snapshot is read at once but handed over only after 800 ms: what happens in between
    // arrives as live batches the session must buffer and replay.
    driver.snapshot_hold = Duration::from_millis(800);
    driver
        .run_until("the snapshot to be read", WAIT, |d| {
            d.snapshots_fetched() == 1
        })
        .unwrap();
    let fetched_at = Instant::now();
    assert_eq!(driver.session().health(), Health::Recovering);

    // While the session waits for the snapshot: new pages, and a removal of an early object.
    let late: Vec<Vec<u32>> = (0..2).map(|i| tokens(40 + i, 12)).collect();
    let late_keys: Vec<String> = late
        .iter()
        .flat_map(|t| client.put_pages(t, &layout.py, None).keys)
        .collect();
    let victim = early_keys[4].clone(); // request 0, page 1, rank 0 K
    client.remove(std::slice::from_ref(&victim));
    let changed_in = fetched_at.elapsed();

    driver
        .run_until("the resync", WAIT, |d| d.session().health() == Health::Live)
        .unwrap();
    let (keys, replayed) = driver
        .effects()
        .iter()
        .find_map(|(_, e)| match e {
            Effect::Resynced { keys, replayed } => Some((*keys, *replayed)),
            _ => None,
        })
        .expect("a Resynced effect");
    let snapshot: HashSet<&String> = driver.snapshots()[0].iter().collect();
    assert!(
        early_keys.iter().all(|k| snapshot.contains(k)),
        "the snapshot has the early keys"
    );
    assert!(
        late_keys.iter().all(|k| !snapshot.contains(k)),
        "the late keys came after it"
    );
    assert!(
        changed_in < driver.snapshot_hold,
        "the changes took {changed_in:?}, longer than the hold"
    );
    assert_eq!(
        replayed,
        late_keys.len() + 1,
        "every live batch during the fetch (one per put, one removal) was replayed"
    );
    assert_eq!(driver.stream().messages as usize, late_keys.len() + 1);
    report(
        "late join",
        format!(
            "snapshot: {keys} keys ({} objects put before the index started); {replayed} live \
             batches buffered while it was held and replayed after it",
            early_keys.len()
        ),
    );

    assert_eq!(
        layout.prefix(&driver, &early[0]),
        1,
        "page 1 lost an object after the snapshot"
    );
    assert_eq!(layout.prefix(&driver, &early[1]), 3);
    assert_eq!(layout.prefix(&driver, &early[2]), 3);
    for t in &late {
        assert_eq!(layout.prefix(&driver, t), 3);
    }
    let c = driver.session().counters();
    assert_eq!(
        (c.resyncs_completed, c.gaps, c.objects),
        (1, 0, 36 + 24 - 1)
    );
}

/// Scenario 5: kill the master, see the index forget, start a new master on the same ports, and
/// hit the pages put to it. `hide_disconnects`: the transport misses the disconnect, so the
/// sequence starting again at 1 must reveal the new master.
fn restart_scenario(name: &str, hide_disconnects: bool) {
    let venvs = Venvs::from_env();
    let layout = TestLayout::mha(4, 2, None);
    let mut master = Master::start(&venvs, MasterConfig::new(name));
    let mut client = StoreClient::connect(&venvs, &master);
    let mut driver = IndexDriver::new(
        hicache_index::Config {
            resync: Some(ResyncConfig::default()),
            ..config(&master, &[&layout])
        },
        master.http_addr(),
    );
    driver.hide_disconnects = hide_disconnects;
    driver
        .run_until("the index to be live", WAIT, |d| {
            d.session().health() == Health::Live
        })
        .unwrap();
    wait_subscribed(&mut [&mut driver], &mut client);
    let old = tokens(50, 12);
    client.put_pages(&old, &layout.py, None);
    driver
        .run_until("the old pages", WAIT, |d| layout.prefix(d, &old) == 3)
        .unwrap();
    let last_seq = driver.stream().last_seq.expect("batches arrived");
    assert!(last_seq > 12);

    // Crash the master (its client goes too: its segment lived in that master's world).
    drop(client);
    let killed_at = Instant::now();
    master.kill();
    if !hide_disconnects {
        let noticed = driver
            .run_until("the index to forget", WAIT, |d| {
                d.session().health() != Health::Live && layout.prefix(d, &old) == 0
            })
            .unwrap();
        report(
            name,
            format!("the index forgot the old pages {noticed:?} after the kill (disconnect)"),
        );
        // Reconnect attempts fail while no master listens.
        driver.run_for(Duration::from_millis(300));
    }
    master.start_again();
    let restarted_in = killed_at.elapsed();
    let relive = if hide_disconnects {
        None
    } else {
        // The session reconnects with its backoff and resynchronises from the new master.
        Some(
            driver
                .run_until("the index to reconnect", WAIT, |d| {
                    d.session().health() == Health::Live
                })
                .unwrap(),
        )
    };

    let mut client = StoreClient::connect(&venvs, &master);
    if hide_disconnects {
        // Nothing told the index: it still claims the old pages until the stream speaks.
        driver.run_for(Duration::from_millis(300));
        assert_eq!(
            layout.prefix(&driver, &old),
            3,
            "no disconnect seen: old pages still claimed"
        );
    }
    wait_subscribed(&mut [&mut driver], &mut client);
    let took = driver
        .run_until(
            "the index to see the new master and be live again",
            WAIT,
            |d| {
                let c = d.session().counters();
                (c.disconnects + c.restarts) > 0
                    && d.session().health() == Health::Live
                    && layout.prefix(d, &old) == 0
            },
        )
        .unwrap();
    let new = tokens(51, 12);
    client.put_pages(&new, &layout.py, None);
    driver
        .run_until("the new pages", WAIT, |d| layout.prefix(d, &new) == 3)
        .unwrap();
    assert_eq!(
        layout.prefix(&driver, &old),
        0,
        "the old pages stay forgotten"
    );

    let c = driver.session().counters();
    let restart = driver.effects().iter().find_map(|(_, e)| match e {
        Effect::Restart { last, received } => Some((last.0, received.0)),
        _ => None,
    });
    let reasons: Vec<ClearReason> = driver
        .effects()
        .iter()
        .filter_map(|(_, e)| match e {
            Effect::Cleared { reason, pages, .. } if *pages > 0 => Some(*reason),
            _ => None,
        })
        .collect();
    report(
        name,
        format!(
            "new master up {restarted_in:?} after the kill (same ports); index reconnected and \
             live {relive:?} after that; new stream seen {took:?} after the first probe arrived; \
             disconnects {}, connects {}, restarts {} (sequence \
             last→first {restart:?}), clears that forgot pages {reasons:?}; new pages hit, old \
             ones miss",
            c.disconnects, c.connects, c.restarts
        ),
    );
    if hide_disconnects {
        assert_eq!(c.disconnects, 0);
        assert_eq!(
            c.restarts, 1,
            "the sequence going back to the start is a restart"
        );
        let (last, first) = restart.expect("a Restart effect");
        assert_eq!(last, last_seq);
        assert!(
            first < last,
            "the new master's sequence starts again ({first})"
        );
        assert_eq!(reasons, [ClearReason::Restart]);
    } else {
        assert!(c.disconnects >= 1);
        assert_eq!(reasons, [ClearReason::Disconnected]);
        assert_eq!(
            driver.stream().backwards,
            1,
            "the new master started again at 1"
        );
    }
    assert_eq!(c.objects, 12);
}

#[test]
fn master_restart_forgets_old_pages_and_hits_new_ones() {
    restart_scenario("master restart", false);
}

#[test]
fn master_restart_unnoticed_by_the_transport_is_seen_as_the_sequence_starting_again() {
    restart_scenario("master restart, disconnect hidden", true);
}

/// Requests for the load scenarios: 1,000 requests of 5 pages (page size 16, TP 2): 20,000
/// objects.
fn load_requests() -> (TestLayout, Vec<Vec<u32>>) {
    (
        TestLayout::mha(16, 2, None),
        (0..1000).map(|i| tokens(1000 + i, 80)).collect(),
    )
}

/// The keys the Python side put, checked against the core's.
fn check_load_keys(layout: &TestLayout, requests: &[Vec<u32>], answer: &serde_json::Value) {
    let py = strings(&answer["keys"]);
    let core: Vec<String> = requests
        .iter()
        .flat_map(|t| layout.object_keys(t))
        .collect();
    assert_eq!(py.len(), 20_000);
    assert!(
        py == core,
        "Python and core keys agree for all 20,000 objects"
    );
}

#[test]
fn load_with_default_queue_keeps_up_without_gaps() {
    let venvs = Venvs::from_env();
    let (layout, requests) = load_requests();
    let (master, mut client, mut driver) = start(&venvs, "load", |m| config(m, &[&layout]));
    let status0 = master.kv_events_status();
    let stored0 = stored(&driver);
    let messages0 = driver.stream().messages;

    let sent = Instant::now();
    client.send(&StoreClient::put_requests_command(
        &requests, &layout.py, 1000, 0,
    ));
    let answer = loop {
        if let Some(a) = client.try_recv() {
            break a.expect("the load");
        }
        assert!(sent.elapsed() < WAIT, "the load did not finish");
        driver.step(Duration::from_millis(1));
    };
    let done_at = Instant::now();
    let lag_after_done = driver
        .run_until("every stored event", WAIT, |d| {
            stored(d) - stored0 == 20_000
        })
        .unwrap();
    check_load_keys(&layout, &requests, &answer);

    let status = master.kv_events_status();
    let s = driver.stream();
    let c = driver.session().counters();
    let put_seconds = answer["seconds"].as_f64().unwrap_or(0.0);
    let window = s.last_at.unwrap() - s.arrivals[messages0 as usize];
    report(
        "load",
        format!(
            "20,000 objects via 20 put_batch calls in {put_seconds:.3} s ({:.0} objects/s at \
             the client); the index applied them in {} batches (max {} events) over {window:?}: \
             {:.0} events/s; last event applied {lag_after_done:?} after the client finished \
             ({:?} after the command was sent); per-batch lag publisher→index mean {:.1} ms, max \
             {} ms; master dropped {} events; last seq {:?} = published_batches {} + \
             dropped_events {}",
            20_000.0 / put_seconds.max(1e-9),
            s.messages - messages0,
            s.max_batch_events,
            20_000.0 / window.as_secs_f64().max(1e-9),
            done_at - sent + lag_after_done,
            s.mean_lag_ms(),
            s.lag_ms_max,
            status.dropped_events - status0.dropped_events,
            s.last_seq,
            status.published_batches,
            status.dropped_events,
        ),
    );
    assert_eq!(
        s.last_seq,
        Some(status.published_batches + status.dropped_events)
    );
    assert_eq!(
        status.dropped_events, status0.dropped_events,
        "the default queue drops nothing"
    );
    assert_eq!(
        (s.gaps, c.gaps, c.missing_sequences, c.restarts),
        (0, 0, 0, 0)
    );
    assert!(s.max_batch_events <= 64, "a batch holds at most 64 events");
    for t in &requests {
        assert_eq!(layout.prefix(&driver, t), 5);
    }
}

#[test]
fn real_loss_is_counted_exactly_never_yields_a_false_hit_and_resync_recovers() {
    let venvs = Venvs::from_env();
    let (layout, requests) = load_requests();
    let master = Master::start(
        &venvs,
        MasterConfig {
            queue_capacity: Some(16),
            ..MasterConfig::new("real-loss")
        },
    );
    let mut client = StoreClient::connect(&venvs, &master);
    // One index that can only clear on loss, one that resynchronises.
    let mut clearing = IndexDriver::new(config(&master, &[&layout]), master.http_addr());
    let mut resyncing = IndexDriver::new(
        hicache_index::Config {
            resync: Some(ResyncConfig::default()),
            ..config(&master, &[&layout])
        },
        master.http_addr(),
    );
    let mut both = [&mut clearing, &mut resyncing];
    run_all_until(&mut both, "both live", WAIT, |ds| {
        ds.iter().all(|d| d.session().health() == Health::Live)
    });
    wait_subscribed(&mut both, &mut client);
    run_all_until(&mut both, "both live after the probes", WAIT, |ds| {
        ds.iter().all(|d| d.session().health() == Health::Live)
    });
    let status0 = master.kv_events_status();
    let base: Vec<_> = both.iter().map(|d| d.stream().clone()).collect();

    // The same load, plus 50 single removes of the previous batch during each put_batch.
    let sent = Instant::now();
    client.send(&StoreClient::put_requests_command(
        &requests, &layout.py, 1000, 50,
    ));
    let answer = loop {
        if let Some(a) = client.try_recv() {
            break a.expect("the load");
        }
        assert!(sent.elapsed() < WAIT, "the load did not finish");
        hicache_index_mooncake_tests::step_all(&mut both);
    };
    check_load_keys(&layout, &requests, &answer);
    let removed: HashSet<String> = strings(&answer["removed"]).into_iter().collect();

    // Quiet: nothing arrives for 500 ms.
    let mut last = (0, Instant::now());
    run_all_until(&mut both, "the stream to go quiet", WAIT, |ds| {
        let n: u64 = ds.iter().map(|d| d.stream().messages).sum();
        if n != last.0 {
            last = (n, Instant::now());
        }
        last.1.elapsed() > Duration::from_millis(500)
    });
    let status = master.kv_events_status();
    let dropped = status.dropped_events - status0.dropped_events;
    let published = status.published_batches - status0.published_batches;
    assert!(
        dropped > 0,
        "a queue of 16 drops events under this load ({})",
        status.raw
    );

    for (d, s0) in both.iter().zip(&base) {
        let s = d.stream();
        let c = d.session().counters();
        let received = s.messages - s0.messages;
        // The core counts exactly what the stream shows.
        assert_eq!((c.gaps, c.missing_sequences), (s.gaps, s.missing));
        // Every skipped sequence is a dropped event or a batch libzmq did not deliver.
        let lost_in_zmq = published - received;
        assert_eq!(
            s.missing - s0.missing,
            dropped + lost_in_zmq,
            "missing sequences = dropped events + undelivered batches"
        );
        report(
            "real loss",
            format!(
                "{}: stream showed {} gaps skipping {} sequences; core counted gaps {} missing {}; \
                 master dropped_events {dropped}, published {published} batches, received \
                 {received} (libzmq lost {lost_in_zmq}); stored events seen {} of 20,000, removed \
                 events seen {} of {}; max {} events per batch; clears on gap {}, resyncs {}/{}; \
                 last seq {:?} = \
                 published_batches {} + dropped_events {}",
                if c.resyncs_started > 0 { "resyncing" } else { "clearing" },
                s.gaps - s0.gaps,
                s.missing - s0.missing,
                c.gaps,
                c.missing_sequences,
                s.stored - s0.stored,
                s.removed - s0.removed,
                removed.len(),
                s.max_batch_events,
                c.clears_gap,
                c.resyncs_completed,
                c.resyncs_started,
                s.last_seq,
                status.published_batches,
                status.dropped_events,
            ),
        );
        assert_eq!(
            s.last_seq,
            Some(status.published_batches + status.dropped_events)
        );
    }

    // No false hit: every page either index calls complete is complete at the master.
    let hashes: Vec<PageHash> = requests
        .iter()
        .flat_map(|t| layout.page_hashes(t))
        .collect();
    for d in both.iter() {
        let hit_keys: Vec<String> = hashes
            .iter()
            .filter(|h| layout.is_hit(d, h))
            .flat_map(|h| layout.core.object_keys(h).collect::<Vec<_>>())
            .collect();
        let absent: Vec<String> = master
            .query_keys(&hit_keys)
            .into_iter()
            .filter(|(_, ok)| !ok)
            .map(|(k, _)| k)
            .collect();
        assert!(
            absent.is_empty(),
            "false hits: {} objects absent, e.g. {:?}",
            absent.len(),
            absent.first()
        );
        assert!(hit_keys.iter().all(|k| !removed.contains(k)));
        report(
            "real loss",
            format!(
                "{} pages of 5,000 hit, every one complete at the master",
                hit_keys.len() / 4
            ),
        );
    }

    // Recovery: the resyncing index converges to the master's key set.
    let took = run_all_until(&mut both, "the resync to finish", WAIT, |ds| {
        ds[1].session().health() == Health::Live
    });
    let truth: HashSet<String> = master
        .all_keys()
        .into_iter()
        .filter(|k| !is_probe(k))
        .collect();
    let d = &both[1];
    let mut complete = 0;
    for h in &hashes {
        let expected = layout.core.object_keys(h).all(|k| truth.contains(&k));
        complete += usize::from(expected);
        assert_eq!(
            layout.is_hit(d, h),
            expected,
            "page {h}: index and master agree"
        );
    }
    assert_eq!(d.session().counters().objects as usize, truth.len());
    assert_eq!(truth.len(), 20_000 - removed.len());
    report(
        "real loss",
        format!(
            "resyncing index live {took:?} after the stream went quiet: {complete} complete pages \
             and {} objects, exactly the master's key set",
            truth.len()
        ),
    );
}
