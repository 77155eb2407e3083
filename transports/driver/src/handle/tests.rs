//! Unit tests of the query handle: hashing outside the lock, the memo, a writer beside
//! queries, a poisoned session.

use super::*;
use hicache_index::{
    Command, Config, Effect, Instant, Layout, ModelLayout, Namespace, ResyncConfig, SglangParams,
};
use hicache_index_shortcuts::Shortcuts;

/// A handle over a session whose index holds pages 0..3 of `tokens(1)` whole and page 1 of
/// them without its last object, learned from a snapshot.
fn handle_with_pages() -> (QueryHandle, Vec<u32>) {
    handle_with_pages_since(std::time::Instant::now())
}

/// [`handle_with_pages`], with the core's clock begun at `start` (the pages were learnt at
/// its origin).
fn handle_with_pages_since(start: std::time::Instant) -> (QueryHandle, Vec<u32>) {
    let layout = Layout::from_sglang(&SglangParams::new(4, 2)).unwrap();
    let mut session = Session::new(Config {
        endpoint: Some("tcp://127.0.0.1:1".into()),
        layouts: vec![ModelLayout {
            model: None,
            layout: layout.clone(),
        }],
        resync: Some(ResyncConfig::default()),
        ..Config::default()
    })
    .unwrap();
    let now = Instant::ZERO;
    let _ = session.handle_timeout(now);
    let fx = session.handle_connected(now);
    let request = fx
        .iter()
        .find_map(|e| match e {
            Effect::Command(Command::FetchSnapshot { request }) => Some(*request),
            _ => None,
        })
        .expect("a fetch");
    let tokens: Vec<u32> = (0..40).collect();
    let mut keys = Vec::new();
    for (i, page) in layout.page_hashes(&tokens, Namespace::NONE).enumerate() {
        let mut page_keys: Vec<String> = layout.object_keys(&page).collect();
        if i == 3 {
            page_keys.pop();
        }
        keys.extend(page_keys);
    }
    let _ = session.handle_snapshot(
        now,
        request,
        Some(Seq(0).into()),
        keys.iter().map(String::as_str),
    );
    let counters = session.status(now).counters;
    assert!(counters.objects > 0, "{counters:?}");
    let shared = Arc::new(Shared {
        reader: session.reader(),
        session: SessionLock::new(session),
        running: AtomicBool::new(true),
        start,
        locks: LockMaxima::default(),
        memo: PrefixMemo::new(crate::DEFAULT_MEMO_BYTES),
        episodes: Default::default(),
    });
    (QueryHandle::new(shared), tokens)
}

#[test]
fn counters_read_the_unconfirmed_age_on_the_driver_clock() {
    // The pages were learnt at the clock's origin; a clock that began a minute ago puts
    // them at least a minute back, whatever the session was last told.
    let start = std::time::Instant::now()
        .checked_sub(std::time::Duration::from_secs(60))
        .expect("a minute after boot");
    let (q, _) = handle_with_pages_since(start);
    let told = q.read(|s| s.status(Instant::ZERO)).unwrap();
    assert_eq!(told.counters.unconfirmed_ms, 0);
    assert!(q.counters().unconfirmed_ms >= 60_000, "{:?}", q.counters());
}

#[test]
fn hashing_outside_the_lock_answers_like_the_session() {
    let (q, tokens) = handle_with_pages();
    let wide: Vec<u64> = tokens.iter().map(|&t| u64::from(t)).collect();
    let other: Vec<u32> = (100..140).collect();
    let ns = Namespace {
        extra_key: Some("user"),
        cache_salt: None,
    };
    let lookups = [
        Lookup::tokens(&tokens),
        Lookup::tokens(&tokens[..13]),
        Lookup::tokens(&other),
        Lookup::tokens(&tokens).with_namespace(ns),
        Lookup::tokens_u64(&wide),
        Lookup::tokens(&tokens).with_model("unknown"),
    ];
    // Twice: the second round hashes through the memo.
    for lookup in lookups.iter().chain(&lookups) {
        let direct = q.read(|s| s.query(lookup)).unwrap();
        assert_eq!(q.query(lookup), direct, "{lookup:?}");
        let (mut a, mut b) = ([false; 12], [false; 12]);
        let direct = q.read(|s| s.query_map(lookup, &mut a)).unwrap();
        assert_eq!(q.query_map(lookup, &mut b), direct, "{lookup:?}");
        assert_eq!(a, b, "{lookup:?}");
    }
    assert_eq!(q.query(&lookups[0]).unwrap().prefix_pages, 3);
}

#[test]
fn a_query_beside_a_writer_that_removes_answers_exactly_like_the_session() {
    // Every batch takes one object of page 0 away and stores it again: between two inputs
    // the session claims the 3 whole pages, and between the two events of a batch none (page
    // 0 lacks an object). A lock-free read that overlaps a batch answers as of one of those
    // points, checking the slots it claims again, or asks under the lock: 3 or 0, never
    // Busy, never 1 or 2 (pages 1 and 2 whole with page 0 not is no point of the stream).
    use hicache_index::{EventKind, Timestamp};
    use hicache_index_wire::{encode_message, MasterFlavor, OwnedBatch, OwnedEvent};
    let (q, tokens) = handle_with_pages();
    let layout = Layout::from_sglang(&SglangParams::new(4, 2)).unwrap();
    let page0 = layout.page_hashes(&tokens, Namespace::NONE).next().unwrap();
    let key: String = layout.object_keys(&page0).next().unwrap();
    let shared = Arc::clone(&q.shared);
    let writer = std::thread::spawn(move || {
        for seq in 1..=2_000u64 {
            let event = |kind, id| OwnedEvent {
                event_id: Some(id),
                ..OwnedEvent::new(kind, &key)
            };
            let batch = OwnedBatch {
                seq: Seq(seq),
                timestamp: Timestamp::Millis(1_767_225_600_000),
                dp_rank: Some(0),
                events: vec![
                    event(EventKind::Removed, 2 * seq - 1),
                    event(EventKind::Stored, 2 * seq),
                ],
            };
            let frames = encode_message(b"", &batch, MasterFlavor::Release0314);
            let borrowed: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
            let _ = shared.session.write(|s| s.feed(Instant::ZERO, &borrowed));
            std::thread::yield_now();
        }
    });
    let lookup = Lookup::tokens(&tokens);
    let mut answered = 0;
    while !writer.is_finished() {
        let hits = q.query(&lookup).expect("the handle answers, Busy or not");
        assert!(
            [0, 3].contains(&hits.prefix_pages),
            "answer {answered}: {hits:?}"
        );
        let mut map = [false; 12];
        let hits = q.query_map(&lookup, &mut map).expect("the handle answers");
        let whole: Vec<bool> = map[..3].to_vec();
        assert!(
            whole == [true; 3] || whole == [false, true, true],
            "answer {answered} with a map: {hits:?} {map:?}"
        );
        assert_eq!(hits.prefix_pages, if map[0] { 3 } else { 0 });
        answered += 1;
    }
    writer.join().expect("the writer ends");
    assert_eq!(
        q.read(|s| s.query(&lookup)).unwrap().unwrap().prefix_pages,
        3
    );
    assert!(answered > 0);
}

#[test]
fn a_token_query_stops_hashing_at_its_first_miss() {
    let (q, tokens) = handle_with_pages();
    // 64 pages of 4 tokens, none of them in the index: one page hashed.
    let absent: Vec<u32> = (1_000..1_256).collect();
    let hits = q.query(&Lookup::tokens(&absent)).unwrap();
    assert_eq!((hits.prefix_pages, hits.total_pages), (0, 64));
    assert_eq!(q.memo_stats().misses, 1, "pages hashed");
    // Pages 0..3 present, page 3 incomplete: four hashed, the map covering them.
    let mut long = tokens.clone();
    long.extend(2_000..3_000);
    let mut map = vec![true; 260];
    let hits = q
        .query_prefix_map(&Lookup::tokens(&long), &mut map)
        .unwrap();
    assert_eq!((hits.prefix_pages, hits.pages_checked), (3, 4));
    assert_eq!(&map[..5], &[true, true, true, false, false]);
    assert!(map[4..].iter().all(|&p| !p));
    assert_eq!(q.memo_stats().misses, 1 + 4, "pages hashed");
    // The full map hashes every page.
    let hits = q.query_map(&Lookup::tokens(&long), &mut map).unwrap();
    assert_eq!((hits.prefix_pages, hits.pages_checked), (3, 260));
}

#[test]
fn a_repeated_token_query_is_answered_from_the_memo() {
    let (q, tokens) = handle_with_pages();
    let first = q.query(&Lookup::tokens(&tokens)).unwrap();
    let hashed = q.memo_stats().misses;
    assert_eq!(q.memo_stats().hits, 0);
    let again = q.query(&Lookup::tokens(&tokens)).unwrap();
    assert_eq!(first, again);
    assert_eq!(
        q.memo_stats().hits,
        hashed,
        "every page of the repeat from the memo"
    );
    assert_eq!(q.memo_stats().misses, hashed);
}

#[test]
fn a_panic_while_changing_the_session_makes_every_later_query_a_miss() {
    let (q, tokens) = handle_with_pages();
    assert_eq!(q.query(&Lookup::tokens(&tokens)).unwrap().prefix_pages, 3);
    let shared = Arc::clone(&q.shared);
    let panicked = std::thread::spawn(move || {
        shared
            .session
            .write(|_| panic!("a bug halfway through a change"));
    })
    .join();
    assert!(panicked.is_err());
    let hits = q.query(&Lookup::tokens(&tokens)).unwrap();
    assert_eq!((hits.prefix_pages, hits.trust), (0, Health::Disconnected));
    assert_eq!(q.health(), Health::Disconnected);
    assert!(q.status().is_none());
    assert!(
        q.shared.session.write(|_| ()).is_none(),
        "no write after it"
    );
}
