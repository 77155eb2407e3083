//! A store shared with other applications, against the real 0.3.14 master (issue 26): the
//! master's event queue is small (`--kv_events_queue_capacity=16`), a second client floods the
//! default tenant with many times more keys that are not HiCache pages than there are page
//! objects (keys of other shapes, HiCache-shaped keys of other deployments, keys with a space
//! or a `\n`), the burst loses events at its tail, and then the master is idle. Within 10 s of
//! the master going idle, `hicache-index serve` must be live and exact: every page the master
//! holds is a hit, and none it lacks.
//!
//! Run with `.ci/mooncake-run shared_store` (in a private network namespace, output shown).
//! `#[ignore]`d like every test of this crate, so that `cargo test --workspace` passes on a
//! machine without the master's venvs.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use hicache_index::Health;
use hicache_index_mooncake_tests::index::{IndexUnderTest, Setup, Via};
use hicache_index_mooncake_tests::observer::Observer;
use hicache_index_mooncake_tests::process::{strings, Master, MasterConfig, StoreClient, Venvs};
use hicache_index_mooncake_tests::TestLayout;
use hicache_index_mooncake_tests::{is_probe, pump_all, report, run_until, wait_subscribed};
use serde_json::json;

/// How long after the master goes idle the index must be live and exact: under the fetch
/// timeout (10 s), which a status point the lost tail never continued would wait out without the
/// quiet stream's check (R11; 1 in 4 runs ended so before it). Seen: 0.6-1.1 s idle, up to 2.3 s
/// beside two busy loops.
const IDLE_BOUND: Duration = Duration::from_secs(6);
/// The longest any other wait lasts.
const WAIT: Duration = Duration::from_secs(30);
/// HiCache requests of the burst: 50 requests of 4 pages (page size 16, TP 2): 200 pages,
/// 800 objects.
const REQUESTS: u32 = 50;
/// Keys of other applications: 30 times the page objects.
const FOREIGN: usize = 24_000;
/// Keys per `put_batch` call of the other application.
const FOREIGN_CALL: usize = 1_000;

/// Tokens of request `id`: distinct values, so every request has its own page chain.
fn tokens(id: u32) -> Vec<u32> {
    (0..64).map(|i| 7_000_000 + id * 1_000 + i + 1).collect()
}

/// The other application's keys: of other shapes, HiCache-shaped of 64 other deployments (fewer
/// than the index's namespace table holds: this test is about the stream and the key list),
/// with a space, with a `\n` (some around the HiCache keys of the burst: a line of the key list
/// then reads exactly like one of them, present or not).
fn foreign_keys(hicache: &[String]) -> Vec<String> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..FOREIGN)
        .map(|n| match n % 10 {
            0 => format!("session:{n}:state"),
            1 => format!("vllm/kv/{:016x}", next()),
            2 => format!("ckpt/layer.{}/shard-{n}.bin", n % 96),
            3 => format!("{:016x}{:016x}", next(), next()),
            4 => format!("tmp file {n}"),
            5 | 6 => format!(
                "other-app-{}_{:016x}{:016x}{:016x}{:016x}_{}_k",
                n % 64,
                next(),
                next(),
                next(),
                next(),
                n % 4
            ),
            7 => format!("job\n{n}\nstep"),
            8 => format!("x{n}\n{}", hicache[n % hicache.len()]),
            _ => format!("{}\ny{n}", hicache[n % hicache.len()]),
        })
        .collect()
}

/// Sends `put_batch` calls of [`FOREIGN_CALL`] keys without waiting; returns how many.
fn send_put_batches(client: &mut StoreClient, keys: &[String]) -> usize {
    let calls = keys.chunks(FOREIGN_CALL);
    let n = calls.len();
    for chunk in calls {
        client.send(&json!({"op": "put_batch", "keys": chunk}));
    }
    n
}

#[test]
#[ignore = "needs the real Mooncake master: run .ci/mooncake-run"]
fn a_store_full_of_other_keys_with_loss_at_the_tail_is_live_and_exact_soon_after_idle() {
    let name = "shared store, loss at the tail, then idle (Serve)";
    let venvs = Venvs::from_env();
    let master = Master::start(
        &venvs,
        MasterConfig {
            queue_capacity: Some(16),
            ..MasterConfig::new("shared-store")
        },
    );
    let observer = Observer::start(&master.event_endpoint());
    let mut sglang = StoreClient::connect(&venvs, &master);
    let mut other = StoreClient::connect(&venvs, &master);
    let layout = TestLayout::mha(16, 2, None);
    let setup = Setup {
        resync: true,
        verify: Some(Duration::from_millis(500)),
        ..Setup::default()
    };
    let mut index = IndexUnderTest::start(Via::Serve, &venvs, &master, &[&layout], &setup);
    run_until(&mut [&mut index], "the index live", WAIT, |i| {
        i[0].health() == Health::Live
    });
    wait_subscribed(&mut [&mut index], &observer, &mut sglang);
    let status0 = master.kv_events_status();

    let requests: Vec<Vec<u32>> = (0..REQUESTS).map(tokens).collect();
    let hicache: Vec<String> = requests
        .iter()
        .flat_map(|t| layout.object_keys(t))
        .collect();
    let foreign = foreign_keys(&hicache);

    // The burst: the other application's first half, then, once half of it is in, the HiCache
    // write-backs (in calls of 100 keys, each removing 10 keys of the call before while it
    // runs) during its second half. Both clients work at once; the queue of 16 drops events
    // all along, to the end.
    let (first, second) = foreign.split_at(FOREIGN / 2);
    let burst_at = Instant::now();
    let mut pending = send_put_batches(&mut other, first);
    let mut sglang_sent = false;
    while pending > 0 {
        match other.try_recv() {
            Some(answer) => {
                answer.unwrap_or_else(|e| panic!("the other application's put_batch: {e}"));
                pending -= 1;
            }
            None => pump_all(&mut [&mut index]),
        }
        if !sglang_sent && pending <= FOREIGN / 2 / FOREIGN_CALL / 2 {
            sglang.send(&StoreClient::put_requests_command(
                &requests, &layout.py, 100, 10,
            ));
            pending += send_put_batches(&mut other, second);
            sglang_sent = true;
        }
        assert!(burst_at.elapsed() < WAIT, "the burst did not finish");
    }
    let answer = loop {
        if let Some(a) = sglang.try_recv() {
            break a.expect("the HiCache write-backs");
        }
        assert!(
            burst_at.elapsed() < WAIT,
            "the HiCache write-backs did not finish"
        );
        pump_all(&mut [&mut index]);
    };
    assert_eq!(
        strings(&answer["keys"]),
        hicache,
        "Python and core keys agree"
    );
    let removed: HashSet<String> = strings(&answer["removed"]).into_iter().collect();
    // The master is idle from now on: nothing puts or removes any more.
    let idle_at = Instant::now();

    // The truth, once: which pages the master holds, and what its key list holds.
    let status = master.kv_events_status();
    let dropped = status.dropped_events - status0.dropped_events;
    let held_keys: HashSet<String> = master
        .query_keys(&hicache)
        .into_iter()
        .filter(|(_, ok)| *ok)
        .map(|(k, _)| k)
        .collect();
    let hicache_set: HashSet<&String> = hicache.iter().collect();
    let other_lines = master
        .all_keys()
        .iter()
        .filter(|l| !is_probe(l) && !hicache_set.contains(l))
        .count();
    let held_pages: Vec<Vec<bool>> = requests
        .iter()
        .map(|t| {
            layout
                .page_hashes(t)
                .iter()
                .map(|h| layout.core.object_keys(h).all(|k| held_keys.contains(&k)))
                .collect()
        })
        .collect();
    let held = held_pages.iter().flatten().filter(|h| **h).count();
    assert!(
        dropped > 0,
        "a queue of 16 drops events under this burst ({})",
        status.raw
    );
    assert!(
        other_lines >= 3 * held_keys.len(),
        "the key list holds {other_lines} lines of other keys for {} HiCache objects",
        held_keys.len()
    );
    assert!(
        held > 0 && !removed.is_empty(),
        "pages held and pages removed"
    );

    // Within the bound: live, and every page hit exactly when the master holds it.
    let mut false_hits_seen = 0;
    let (exact_after, health, claimed_absent, missed) = loop {
        let health = index.health();
        let (mut claimed_absent, mut missed) = (0, 0);
        for (t, held) in requests.iter().zip(&held_pages) {
            let answer = index.ask(&layout, t);
            for (p, held) in held.iter().enumerate() {
                let hit = answer.pages.get(p).copied().unwrap_or(false);
                claimed_absent += usize::from(hit && !held);
                missed += usize::from(!hit && *held);
            }
        }
        false_hits_seen = false_hits_seen.max(claimed_absent);
        if health == Health::Live && claimed_absent == 0 && missed == 0 {
            break (Some(idle_at.elapsed()), health, claimed_absent, missed);
        }
        if idle_at.elapsed() > IDLE_BOUND {
            break (None, health, claimed_absent, missed);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let s = observer.stats();
    let c = index.counters();
    let hits = held - missed + claimed_absent;
    report(
        name,
        format!(
            "{} HiCache objects put ({} removed during the burst), {} other keys; the master \
             dropped {dropped} events (stream: {} gaps skipping {} sequences), holds {held} of \
             200 pages and lists {other_lines} lines of other keys; {:?} after the master went \
             idle: health {health:?}, {hits} pages hit ({claimed_absent} the master lacks, \
             {missed} it holds missed; most pages it lacks claimed at once: {false_hits_seen}); \
             resyncs {}/{}, snapshot lines doubted {}, gaps {}, objects held {}",
            hicache.len(),
            removed.len(),
            FOREIGN,
            s.gaps,
            s.missing,
            exact_after.unwrap_or(IDLE_BOUND),
            c["resyncs_completed"],
            c["resyncs_started"],
            c["snapshot_doubted_lines"],
            c["gaps"],
            c["objects"],
        ),
    );
    let took = exact_after.unwrap_or_else(|| {
        panic!(
            "not live and exact within {IDLE_BOUND:?} of the master going idle: health \
             {health:?}, {hits} pages hit for {held} held: {claimed_absent} claimed that the \
             master lacks, {missed} held but missed (resyncs {}/{}, snapshot lines doubted {})",
            c["resyncs_completed"], c["resyncs_started"], c["snapshot_doubted_lines"]
        )
    });
    assert!(took <= IDLE_BOUND);
}
