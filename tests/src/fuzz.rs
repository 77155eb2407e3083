//! The checks behind the fuzz targets (`core/fuzz/`), as functions, so the fuzzers and the
//! ordinary tests that replay the corpus and past crashes run exactly the same code.
//!
//! Each check panics when an invariant breaks (that is what the fuzzer reports); beyond "no
//! panic" they check round trips, the safety rule against an exact-key oracle, and that no
//! single allocation is larger than a bounded multiple of the input (see [`meter`]).

use std::collections::{BTreeMap, BTreeSet};

use hicache_index::{
    decode, parse_object_key, Batch, Command, Config, Effect, Event, EventKind, HitPolicy, Instant,
    Layout, Lookup, ModelLayout, PageHash, Pool, ReorderConfig, Seq, Session, SglangParams,
    Timestamp,
};
use hicache_index_api::{Limits, QueryRequest};
use hicache_index_shortcuts::Shortcuts;
use hicache_index_sim::encode::{
    encode_message, encode_payload, MasterFlavor, OwnedBatch, OwnedEvent,
};

/// A global allocator that records the largest single allocation, for allocation bounds.
///
/// Install it with `#[global_allocator] static A: Meter = Meter;` in the binary (fuzz target or
/// test); without it [`meter::largest_since_reset`] stays 0 and the bounds hold trivially.
pub mod meter {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Bytes allocated and not yet freed, over all threads.
    static LIVE: AtomicUsize = AtomicUsize::new(0);

    thread_local! {
        static LARGEST: Cell<usize> = const { Cell::new(0) };
    }

    /// The recording allocator (forwards to the system allocator): the largest allocation per
    /// thread, and the bytes live in the process.
    pub struct Meter;

    #[allow(unsafe_code)]
    // SAFETY: every call forwards to `System` unchanged; the thread-local only records sizes
    // and allocates nothing itself (a const-initialised `Cell`).
    unsafe impl GlobalAlloc for Meter {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            note(layout.size());
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
            unsafe { System.alloc(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            unsafe { System.dealloc(ptr, layout) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            note(new_size);
            LIVE.fetch_add(new_size, Ordering::Relaxed);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    fn note(size: usize) {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
    }

    /// Forgets the largest allocation seen on this thread so far.
    pub fn reset() {
        let _ = LARGEST.try_with(|l| l.set(0));
    }

    /// Returns the bytes allocated and not yet freed in the whole process.
    pub fn live_bytes() -> usize {
        LIVE.load(Ordering::Relaxed)
    }

    /// Returns the largest single allocation on this thread since [`reset`].
    pub fn largest_since_reset() -> usize {
        LARGEST.try_with(Cell::get).unwrap_or(0)
    }
}

/// Splits fuzz input into a message: the first byte picks the frame count (0 to 4), the next
/// bytes the lengths of all frames but the last; a well-formed three-frame message is the most
/// likely shape.
pub fn frames(data: &[u8]) -> Vec<&[u8]> {
    let Some((&shape, mut rest)) = data.split_first() else {
        return Vec::new();
    };
    let count = match shape % 8 {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => 4,
        _ => 3,
    };
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        if i + 1 == count {
            out.push(rest);
            break;
        }
        let (len, tail) = match (i, rest.split_first()) {
            (0, _) => (0, rest),
            (1, _) if shape & 0x80 == 0 => (8, rest),
            (_, Some((&n, tail))) => (usize::from(n), tail),
            (_, None) => (0, rest),
        };
        let len = len.min(tail.len());
        out.push(&tail[..len]);
        rest = &tail[len..];
    }
    out
}

/// Decodes arbitrary frames: no panic, no allocation larger than one decoded event per input
/// byte, and a batch that decodes re-encodes to bytes that decode to the same batch.
pub fn decode_roundtrip(data: &[u8]) {
    let frames = frames(data);
    meter::reset();
    let decoded = decode(&frames);
    let largest = meter::largest_since_reset();
    let bound = std::mem::size_of::<Event<'_>>() * data.len() + 4096;
    assert!(
        largest <= bound,
        "decoding {} bytes allocated {largest} at once",
        data.len()
    );
    let Ok(batch) = decoded else { return };
    for flavor in [MasterFlavor::Upstream, MasterFlavor::Release0314] {
        let owned = OwnedBatch::from(&batch);
        let payload = encode_payload(&owned, flavor);
        let seq = batch.seq.0.to_be_bytes();
        let again = decode(&[b"", &seq, &payload]).expect("an encoded batch decodes");
        assert!(same_batch(&batch, &again), "{batch:?}\n!=\n{again:?}");
    }
}

fn same_batch(a: &Batch<'_>, b: &Batch<'_>) -> bool {
    let ts = |t: Timestamp| match t {
        Timestamp::Seconds(s) => Timestamp::Millis(s.to_bits()),
        other => other,
    };
    a.seq == b.seq
        && ts(a.timestamp) == ts(b.timestamp)
        && a.dp_rank == b.dp_rank
        && a.events == b.events
}

/// Parses an arbitrary string as an object key: a key that parses re-forms exactly, and a page
/// of an arbitrary layout parses back to its own hash.
pub fn object_key(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Some(key) = parse_object_key(&text) {
        assert_eq!(
            key.to_string(),
            text,
            "parse is not the inverse of formatting"
        );
    }
    let (prefix, rest) = match data.split_first() {
        Some((&n, rest)) => rest.split_at(usize::from(n).min(rest.len())),
        None => return,
    };
    let prefix = String::from_utf8_lossy(prefix).replace(|c: char| c.is_control(), "");
    let mut hash = [0u8; 32];
    for (h, b) in hash.iter_mut().zip(rest) {
        *h = *b;
    }
    let page = PageHash(hash);
    let tp = rest.get(32).map_or(1, |b| u32::from(b % 8) + 1);
    let mla = rest.get(33).is_some_and(|b| b & 1 == 1);
    let Ok(mut layout) = Layout::from_sglang(&SglangParams {
        mla,
        ..SglangParams::new(4, tp)
    }) else {
        return;
    };
    layout.key_prefix = (!rest.is_empty() && rest[0] & 1 == 1).then_some(prefix);
    if layout.validate().is_err() {
        return;
    }
    for key in layout.object_keys(&page) {
        let parsed = parse_object_key(&key).expect("an expanded key parses");
        assert_eq!(
            (parsed.prefix, parsed.page_hash),
            (layout.key_prefix.as_deref(), page),
            "{key}"
        );
    }
}

/// Parses an arbitrary layout document: a layout it accepts is valid and its keys parse back.
pub fn layout_document(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    meter::reset();
    let parsed = hicache_index_api::layout_from_document_json(text);
    assert!(
        meter::largest_since_reset() <= 64 * data.len() + 4096,
        "layout document allocation"
    );
    let Ok(layout) = parsed else { return };
    layout
        .validate()
        .expect("an accepted document is a valid layout");
    let page = PageHash([7; 32]);
    for key in layout.object_keys(&page) {
        let parsed = parse_object_key(&key).expect("an expanded key parses");
        assert_eq!(parsed.page_hash, page);
    }
}

/// Decodes an arbitrary query request (JSON and msgpack) within limits: no panic, bounded
/// allocation, and a request that passes the limits keeps within them.
pub fn query_request(data: &[u8]) {
    let limits = Limits {
        max_body_bytes: 1 << 16,
        max_tokens: 4096,
        max_page_hashes: 256,
        max_batch_queries: 16,
    };
    for json in [true, false] {
        meter::reset();
        let q = if json {
            QueryRequest::from_json(data, &limits)
        } else {
            QueryRequest::from_msgpack(data, &limits)
        };
        let largest = meter::largest_since_reset();
        assert!(
            largest <= 64 * data.len() + 65_536,
            "request allocation of {largest} bytes (json: {json})"
        );
        if let Ok(q) = q {
            let r = q.request();
            assert!(r
                .tokens
                .as_ref()
                .is_none_or(|t| t.len() <= limits.max_tokens));
            assert!(r
                .page_hashes
                .as_ref()
                .is_none_or(|h| h.len() <= limits.max_page_hashes));
            let _ = q.lookup();
        }
    }
}

/// The keys the session check stores and removes: two pages of a TP 1 layout, one of them also
/// under a prefix, and a key that does not parse.
fn session_universe(layout: &Layout) -> Vec<String> {
    let tokens: Vec<u32> = (1..=8).collect();
    let pages: Vec<PageHash> = layout
        .page_hashes(&tokens, hicache_index::Namespace::NONE)
        .collect();
    let mut keys: Vec<String> = pages.iter().flat_map(|p| layout.object_keys(p)).collect();
    keys.push(format!("m_{}__k", pages[0]));
    keys.push("not-a-key".into());
    keys
}

/// Drives a session with an arbitrary history: a publisher with an ordered stream of batches
/// over a network that drops, duplicates, swaps, corrupts and disconnects, plus stray messages
/// and timeouts. After every step, every object the index holds must be justified by the
/// publisher's history: present now, or removed only by a batch the session has not applied.
pub fn session_ops(data: &[u8]) {
    let layout = Layout {
        page_size: 4,
        eagle: false,
        key_prefix: None,
        pools: vec![Pool {
            name: "kv".into(),
            suffixes: vec!["_0_k".into(), "_0_v".into()],
            hit_policy: HitPolicy::AllPages,
        }],
    };
    let reorder = data.first().is_some_and(|b| b & 1 == 1);
    let mut session = Session::new(Config {
        endpoint: Some("tcp://127.0.0.1:1".into()),
        layouts: vec![ModelLayout {
            model: None,
            layout: layout.clone(),
        }],
        reorder: if reorder {
            ReorderConfig {
                max_held: 3,
                max_delay: Some(std::time::Duration::from_millis(5)),
            }
        } else {
            ReorderConfig::default()
        },
        index: hicache_index::IndexConfig {
            max_pages: 3,
            ..Default::default()
        },
        // A reorder window needs resync (rule R7 of the core's sequence module).
        resync: reorder.then(hicache_index::ResyncConfig::default),
        ..Config::default()
    })
    .expect("a valid configuration");
    let keys = session_universe(&layout);
    // The publisher's truth: per key, present, and the sequence of its last removal.
    let mut present: BTreeSet<usize> = BTreeSet::new();
    let mut removed_at: BTreeMap<usize, u64> = BTreeMap::new();
    let mut sent: Vec<[Vec<u8>; 3]> = Vec::new();
    let mut seq = 0u64;
    let mut event_id = 0u64;
    let mut now = 0u64;
    let mut bytes = data.iter().copied().skip(1);
    let mut step = 0;
    while let Some(op) = bytes.next() {
        step += 1;
        if step > 512 {
            break;
        }
        now += 1_000_000;
        let at = Instant::from_nanos(now);
        let arg = bytes.next().unwrap_or(0);
        let fx = match op % 10 {
            // Publish a batch of 1-4 events, delivered.
            0..=3 => {
                let frames = publish(
                    &mut seq,
                    &mut event_id,
                    arg,
                    &keys,
                    &mut present,
                    &mut removed_at,
                );
                let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
                let fx = session.feed(at, &refs);
                sent.push(frames);
                fx
            }
            // Publish a batch the network loses.
            4 => {
                sent.push(publish(
                    &mut seq,
                    &mut event_id,
                    arg,
                    &keys,
                    &mut present,
                    &mut removed_at,
                ));
                hicache_index::Effects::default()
            }
            // Redeliver an old batch (duplicate or reordered copy).
            5 if !sent.is_empty() => {
                let frames = &sent[usize::from(arg) % sent.len()];
                let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
                session.feed(at, &refs)
            }
            // A stray or corrupted message.
            6 => {
                let mut frames = sent
                    .last()
                    .cloned()
                    .unwrap_or_else(|| [Vec::new(), vec![0; 8], vec![0x90]]);
                match arg % 3 {
                    0 => frames[0] = b"stray".to_vec(),
                    1 => frames[2].truncate(usize::from(arg) % (frames[2].len() + 1)),
                    // Flip a byte of the array header or timestamp: a message that then still
                    // decodes carries the real events. (A flip inside an event could make another
                    // valid batch under a real sequence: a lie no subscriber can detect, and one
                    // ZeroMQ over TCP does not tell.)
                    _ => {
                        if let Some(b) = frames[2].get_mut(usize::from(arg) % 10) {
                            *b ^= 0x5a;
                        }
                    }
                }
                let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
                session.feed(at, &refs)
            }
            7 => session.handle_disconnected(at),
            8 => session.handle_connected(at),
            _ => {
                let due = session.poll_timeout().map_or(at, |d| d.max(at));
                session.handle_timeout(due)
            }
        };
        if std::env::var_os("FUZZ_TRACE").is_some() {
            eprintln!(
                "step {step} op {} arg {arg} seq {seq} applied {:?} -> {fx:?}",
                op % 10,
                session.status(at).last_applied_seq
            );
        }
        for e in fx.iter() {
            assert!(
                !matches!(e, Effect::Command(Command::Connect { endpoint }) if endpoint.is_empty())
            );
        }
        check_safety(&session, &keys, &present, &removed_at);
    }
}

fn publish(
    seq: &mut u64,
    event_id: &mut u64,
    arg: u8,
    keys: &[String],
    present: &mut BTreeSet<usize>,
    removed_at: &mut BTreeMap<usize, u64>,
) -> [Vec<u8>; 3] {
    *seq += 1;
    let n = usize::from(arg % 4) + 1;
    let mut events = Vec::with_capacity(n);
    for i in 0..n {
        let k = (usize::from(arg) / 4 + i * 3) % keys.len();
        let store = (arg >> (i % 8)) & 1 == 0 || !present.contains(&k);
        if store {
            present.insert(k);
        } else {
            present.remove(&k);
            removed_at.insert(k, *seq);
        }
        let kind = if store {
            EventKind::Stored
        } else {
            EventKind::Removed
        };
        let mut e = OwnedEvent::new(kind, keys[k].clone());
        // Consecutive batches carry consecutive event ids, as the master numbers them.
        *event_id += 1;
        e.event_id = Some(*event_id);
        events.push(e);
    }
    let batch = OwnedBatch {
        seq: Seq(*seq),
        timestamp: Timestamp::Millis(*seq),
        dp_rank: Some(0),
        events,
    };
    encode_message(b"", &batch, MasterFlavor::Release0314)
}

fn check_safety(
    session: &Session,
    keys: &[String],
    present: &BTreeSet<usize>,
    removed_at: &BTreeMap<usize, u64>,
) {
    let applied = session
        .status(Instant::ZERO)
        .last_applied_seq
        .map_or(0, |s| s.0);
    let reader = session.reader();
    for (k, key) in keys.iter().enumerate() {
        if reader.holds_object("default", key) {
            let justified =
                present.contains(&k) || removed_at.get(&k).is_some_and(|&r| r > applied);
            assert!(
                justified,
                "the index holds {key}, removed by batch {:?}, applied up to {applied}",
                removed_at.get(&k)
            );
        }
    }
    let tokens: Vec<u32> = (1..=8).collect();
    let hits = session
        .query(&Lookup::tokens(&tokens))
        .expect("the default layout answers");
    assert!(hits.prefix_pages <= hits.total_pages);
}
