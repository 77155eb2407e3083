//! The master model's tests: twin runs, the lagging HTTP side, the foreign flood, batches.

use super::*;
use crate::options::Options;
use hicache_index::decode;

fn calm(seed: u64) -> Options {
    let none = Some(crate::options::Worlds::NONE);
    Options::for_seed_with(seed, Some(crate::options::Preset::Calm), 1000, none)
}

fn master(seed: u64) -> Master {
    let o = calm(seed);
    Master::new(o.master.clone(), o.model_specs(), Rng::new(seed))
}

/// Steps `m` from `now` for `d`, acting; returns the time reached.
fn run_for(m: &mut Master, mut now: Instant, d: Duration, out: &mut MasterOutput) -> Instant {
    let until = now + d;
    while now < until {
        m.step(now, out);
        now = m
            .next_at()
            .unwrap_or(until)
            .max(now + Duration::from_micros(1));
    }
    now
}

#[test]
fn twin_runs_number_their_batches_alike() {
    let o = calm(3);
    let mut mo = o.master.clone();
    mo.twin_batch = 4;
    let mut m = Master::new(mo, o.model_specs(), Rng::new(3));
    let mut out = MasterOutput::default();
    let now = run_for(&mut m, Instant::ZERO, Duration::from_millis(30), &mut out);
    let old: Vec<Published> = core::mem::take(&mut out.published);
    m.act(now, Action::Restart, &mut out);
    let up = out.restarted_until.expect("a restart");
    run_for(&mut m, up, Duration::from_millis(30), &mut out);
    let shape = |p: &Published| (p.meta.seq, p.meta.first_event_id, p.meta.events);
    assert!(old.len() > 3 && out.published.len() > 3);
    for (a, b) in old.iter().zip(&out.published) {
        assert_eq!(
            shape(a),
            shape(b),
            "the new run numbers its batches as the old one"
        );
        assert_eq!(a.meta.events, 4, "full batches only while faults are on");
    }
    assert_ne!(old[0].meta.epoch, out.published[0].meta.epoch);
}

#[test]
fn a_lagging_http_side_serves_the_old_run_until_its_lag_ends() {
    let mut m = master(4);
    m.set_http_lag((Duration::from_millis(50), Duration::from_millis(50)));
    let mut out = MasterOutput::default();
    let now = run_for(&mut m, Instant::ZERO, Duration::from_millis(30), &mut out);
    let mut before = Vec::new();
    m.all_keys_body(&mut before);
    let status = m.status();
    assert!(!before.is_empty() && status.published_batches > 0);
    m.act(now, Action::Restart, &mut out);
    let up = out.restarted_until.expect("a restart");
    // While down and for the lag after it comes up, the old run answers.
    for at in [now, up, up + Duration::from_millis(49)] {
        assert_eq!(m.serving(at), Some(Served::Lagging));
    }
    let mut body = Vec::new();
    m.all_keys_as(Served::Lagging, &mut body);
    assert_eq!(body, before, "the old run's key list");
    assert_eq!(m.status_as(Served::Lagging), status);
    let keys: Vec<String> = hicache_index::snapshot_lines(&before)
        .map(|l| String::from_utf8(l.to_vec()).expect("utf-8"))
        .collect();
    assert!(m
        .batch_query_as(Served::Lagging, &keys)
        .iter()
        .all(|&ok| ok));
    assert!(m
        .batch_query_as(Served::Current, &keys)
        .iter()
        .all(|&ok| !ok));
    m.step(up, &mut out);
    assert_eq!(
        m.serving(up + Duration::from_millis(50)),
        Some(Served::Current)
    );
    assert_eq!(m.served_epoch(Served::Lagging) + 1, m.epoch());
}

#[test]
fn the_foreign_flood_outnumbers_the_sglang_objects_and_sits_among_them() {
    let o = calm(6);
    let mut mo = o.master.clone();
    mo.foreign_per_object = 5;
    mo.hashed_key_list = true;
    let mut m = Master::new(mo, o.model_specs(), Rng::new(6));
    let mut out = MasterOutput::default();
    for _ in 0..30 {
        m.act(Instant::ZERO, Action::Put, &mut out);
    }
    for _ in 0..80 {
        m.act(Instant::ZERO, Action::ForeignFlood, &mut out);
    }
    let (sglang, foreign) = (m.default_objects(), m.foreign_count_as(Served::Current));
    assert!(
        sglang > 0 && foreign >= 3 * sglang,
        "{foreign} foreign, {sglang} sglang"
    );
    assert!(foreign <= 5 * sglang.max(16));
    let mut body = Vec::new();
    m.all_keys_body(&mut body);
    let lines: Vec<&[u8]> = hicache_index::snapshot_lines(&body).collect();
    let is_key = |l: &[u8]| {
        core::str::from_utf8(l)
            .ok()
            .and_then(|k| m.find_object(0, k))
            .is_some_and(|o| m.is_present(o))
    };
    // SGLang lines among the foreign ones, not first: some follow a foreign line.
    let after_foreign = lines
        .windows(2)
        .filter(|w| !is_key(w[0]) && is_key(w[1]))
        .count();
    assert!(after_foreign > sglang / 2, "{after_foreign} of {sglang}");
    assert!(
        lines.len() > sglang + foreign,
        "keys holding a \\n make more lines than keys"
    );
    let flood: Vec<String> = m.foreign_keys[..50].iter().map(|k| k.to_string()).collect();
    let present = m.batch_query(&flood);
    for (k, ok) in flood.iter().zip(present) {
        let id = m.foreign_index[k.as_str()][0];
        assert_eq!(ok, m.foreign_present.contains(id), "{k:?}");
    }
}

#[test]
fn published_batches_decode_with_sequences_from_one() {
    let mut m = master(5);
    let mut out = MasterOutput::default();
    let mut now = Instant::ZERO;
    for _ in 0..200 {
        m.step(now, &mut out);
        now = m.next_at().unwrap_or(now).max(now);
    }
    assert!(!out.published.is_empty());
    for (i, p) in out.published.iter().enumerate() {
        assert_eq!(p.meta.seq, i as u64 + 1, "no loss in a calm master");
        let frames: Vec<&[u8]> = p.frames.iter().map(Vec::as_slice).collect();
        let batch = decode(&frames).expect("the master's bytes decode");
        assert_eq!(batch.events.len(), p.meta.events);
        assert!(p.meta.events <= 64);
    }
}

#[test]
fn a_full_queue_drops_the_oldest_and_skips_a_sequence() {
    let o = calm(1);
    let mut mo = o.master.clone();
    mo.queue_capacity = 2;
    mo.batch_max = 64;
    let mut m = Master::new(mo, o.model_specs(), Rng::new(1));
    let mut out = MasterOutput::default();
    for _ in 0..20 {
        m.act(Instant::ZERO, Action::Put, &mut out);
    }
    assert!(m.stats().queue_drops > 0);
    m.step(Instant::from_millis(100), &mut out);
    let first = out.published.first().expect("a batch");
    assert_eq!(first.meta.seq, 1 + m.stats().queue_drops);
    assert!(out.lost_upto > 0);
}

/// A master with three store clients that fault often.
fn with_clients(seed: u64) -> Master {
    let o = calm(seed);
    let mut mo = o.master.clone();
    mo.clients = Some(crate::options::ClientOptions {
        clients: 3,
        faults_per_sec: 20.0,
        active_ttl: Duration::from_millis(20),
        suspicion_ttl: Duration::from_millis(40),
        stall_len: (Duration::from_millis(10), Duration::from_millis(70)),
        mount_after: (Duration::from_millis(1), Duration::from_millis(5)),
    });
    Master::new(mo, o.model_specs(), Rng::new(seed))
}

#[test]
fn clients_hide_drop_and_bring_back_objects_without_events_and_move_the_metrics() {
    let mut m = with_clients(9);
    let mut out = MasterOutput::default();
    run_for(&mut m, Instant::ZERO, Duration::from_secs(3), &mut out);
    let (s, c) = (m.client_stats(), m.client_signals().expect("clients"));
    assert!(s.closes > 0 && s.crashes > 0 && s.stalls > 0, "{s:?}");
    assert!(s.hidden > 0 && s.restored > 0 && s.unmounted > 0, "{s:?}");
    assert!(
        c.unmounts >= s.closes && c.suspected > 0 && c.recoveries > 0,
        "{c:?}"
    );
    assert_eq!(c.offline + c.recoveries + c.suspected_now, c.suspected);
    // No event for any of it: the oracle learns them as changes of the true state only.
    let changes = |f: fn(&Change) -> bool| out.records.iter().filter(|r| f(&r.change)).count();
    assert_eq!(
        changes(|c| matches!(c, Change::Hidden { .. })) as u64,
        s.hidden
    );
    assert_eq!(
        changes(|c| matches!(c, Change::Restored { .. })) as u64,
        s.restored
    );
    // A hidden object is neither listed nor found, and is never put again while hidden.
    let mut body = Vec::new();
    m.all_keys_body(&mut body);
    let listed: std::collections::HashSet<&[u8]> = hicache_index::snapshot_lines(&body).collect();
    for obj in 0..m.objects().len() as ObjId {
        let hidden = m.flags[obj as usize] & HIDDEN != 0;
        if m.tenant_of(obj) == 0 {
            assert_eq!(listed.contains(m.key(obj).as_bytes()), m.is_present(obj));
        }
        assert!(!(hidden && m.is_present(obj)));
    }
}
