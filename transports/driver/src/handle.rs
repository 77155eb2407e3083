//! What the rest of a program holds: a cheap, cloneable query handle and a control handle.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use hicache_index::{
    Counters, Health, Hits, Instant, LazyHashes, Lookup, MapCover, PageHash, Pages, QueryError,
    Reader, Seq, Session, WorkerInfo,
};
use hicache_index::{LeaderStatus, LeaderView};

use crate::http::HttpOutcome;
use crate::memo::{MemoStats, PrefixMemo};

/// The state the driver loop and every handle share.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The session's read view: every query goes through it and never takes the lock below.
    pub(crate) reader: Arc<Reader>,
    /// The one session of this subscriber. The driver holds the write lock only for one call
    /// into the session (one message, one answer), never across an await; queries never take
    /// it (only [`QueryHandle::read`], [`QueryHandle::counters`] and the like do).
    pub(crate) session: SessionLock,
    /// Whether the driver loop is running.
    pub(crate) running: AtomicBool,
    /// The origin of the core's clock: the driver's `now` and the handles' read the same one.
    pub(crate) start: std::time::Instant,
    /// The longest write-lock holds by kind and the longest wait of a query for the read lock.
    pub(crate) locks: LockMaxima,
    /// Page digests already computed, shared by every query.
    pub(crate) memo: PrefixMemo,
    /// The failures under way (the key list, verification, the event endpoint).
    pub(crate) episodes: crate::episode::Episodes,
}

/// The session behind a reader-writer lock whose writer hands over fairly: each write hold is
/// one bounded call into the session (one batch, one chunk of 64 key lines, one answer), and on
/// release the queries waiting for it go first, before the writer may take the lock again.
/// So a query waits for at most one hold (std's `RwLock` let the driver retake the lock for each
/// message of a drain turn while queries waited: p99 3.5-4.6 ms of read-lock wait).
///
/// parking_lot's lock does not poison; this wrapper does: a panic inside a write hold may leave
/// the index half changed, so from then on every read is refused (queries answer misses).
#[derive(Debug)]
pub(crate) struct SessionLock {
    lock: RwLock<Session>,
    poisoned: AtomicBool,
}

impl SessionLock {
    /// Wraps `session`.
    pub(crate) fn new(session: Session) -> SessionLock {
        SessionLock {
            lock: RwLock::new(session),
            poisoned: AtomicBool::new(false),
        }
    }

    /// Reports whether a writer panicked while holding the lock (no lock taken).
    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// Takes the read lock; `None` if a writer panicked while holding it.
    pub(crate) fn read(&self) -> Option<RwLockReadGuard<'_, Session>> {
        let session = self.lock.read();
        (!self.poisoned.load(Ordering::Acquire)).then_some(session)
    }

    /// Runs `f` under the write lock and hands the lock over fairly; `None` (and `f` not run)
    /// if a writer panicked before. A panic in `f` poisons the lock and unwinds on.
    pub(crate) fn write<R>(&self, f: impl FnOnce(&mut Session) -> R) -> Option<R> {
        let mut session = self.lock.write();
        if self.poisoned.load(Ordering::Acquire) {
            return None;
        }
        // Dropped before the guard on unwinding, so no reader gets the half-changed session.
        let poison = PoisonOnUnwind(&self.poisoned);
        let r = f(&mut session);
        drop(poison);
        RwLockWriteGuard::unlock_fair(session);
        Some(r)
    }
}

/// Marks the lock poisoned if dropped while the thread unwinds from a panic.
struct PoisonOnUnwind<'a>(&'a AtomicBool);

impl Drop for PoisonOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Release);
        }
    }
}

/// What held the session's write lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HoldKind {
    /// One live batch fed.
    Batch,
    /// One chunk of a key list handed over.
    SnapshotChunk,
    /// Any other call (a snapshot's finish, an HTTP answer, a timer, a control message).
    Other,
}

/// The longest durations seen, in nanoseconds (updated with `fetch_max`).
#[derive(Debug, Default)]
pub(crate) struct LockMaxima {
    batch: AtomicU64,
    snapshot_chunk: AtomicU64,
    other: AtomicU64,
    read_wait: AtomicU64,
    fallback_wait: AtomicU64,
    fallbacks: AtomicU64,
}

impl LockMaxima {
    /// Records a write-lock hold of `kind` that lasted `held`.
    pub(crate) fn record_hold(&self, kind: HoldKind, held: Duration) {
        let slot = match kind {
            HoldKind::Batch => &self.batch,
            HoldKind::SnapshotChunk => &self.snapshot_chunk,
            HoldKind::Other => &self.other,
        };
        raise(slot, held);
    }

    fn record_read_wait(&self, waited: Duration) {
        raise(&self.read_wait, waited);
    }

    fn record_fallback(&self, waited: Duration) {
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
        raise(&self.fallback_wait, waited);
    }

    fn get(&self) -> LockTimes {
        let d = |a: &AtomicU64| Duration::from_nanos(a.load(Ordering::Relaxed));
        LockTimes {
            batch_hold: d(&self.batch),
            snapshot_chunk_hold: d(&self.snapshot_chunk),
            other_hold: d(&self.other),
            read_wait: d(&self.read_wait),
            fallbacks: self.fallbacks.load(Ordering::Relaxed),
            fallback_wait: d(&self.fallback_wait),
        }
    }
}

/// Raises `slot` to `d` if that is longer: a plain load first, so that the common case (not a
/// new maximum) writes nothing and query threads do not bounce the slot's cache line.
fn raise(slot: &AtomicU64, d: Duration) {
    let n = nanos(d);
    if n > slot.load(Ordering::Relaxed) {
        slot.fetch_max(n, Ordering::Relaxed);
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The longest holds of the session's write lock since the subscriber started, by what held
/// it, and the longest a read through the handle waited for the read lock (queries take none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockTimes {
    /// The longest hold for one live batch.
    pub batch_hold: Duration,
    /// The longest hold for one chunk of a key list ([`crate::SNAPSHOT_CHUNK_LINES`] lines).
    pub snapshot_chunk_hold: Duration,
    /// The longest hold for any other call (a snapshot's finish, an answer, a timer).
    pub other_hold: Duration,
    /// The longest a read of the session through the handle ([`QueryHandle::read`],
    /// [`QueryHandle::counters`], ...) waited for the read lock (wall time: on a contended CPU
    /// it includes the writer being descheduled while it holds the lock). Queries take no lock
    /// and never wait (see [`hicache_index::reader`]) unless they fall back (below).
    pub read_wait: Duration,
    /// How many queries the writer kept changing what they read ([`QueryError::Busy`]), so that
    /// they asked again under the session's read lock.
    pub fallbacks: u64,
    /// The longest such a query waited for the read lock (wall time, like `read_wait`): the
    /// only time a query waits for the writer.
    pub fallback_wait: Duration,
}

impl Shared {
    /// Returns the current time on the core's clock (nanoseconds since `start`).
    pub(crate) fn now(&self) -> Instant {
        let nanos = self.start.elapsed().as_nanos();
        Instant::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// A cheap, cloneable, thread-safe handle to ask the index (the router's side).
///
/// Queries read the session's [`Reader`]: no lock, so a writer (descheduled or not) never
/// stalls them; many threads may query at once.
#[derive(Clone, Debug)]
pub struct QueryHandle {
    shared: Arc<Shared>,
}

impl QueryHandle {
    pub(crate) fn new(shared: Arc<Shared>) -> QueryHandle {
        QueryHandle { shared }
    }

    /// Answers how many leading pages of the lookup are fully present.
    ///
    /// Tokens are hashed outside any lock, through the subscriber's prefix memo (a repeated page
    /// costs no SHA-256), and lazily: each page is hashed when the probe reaches it, so a query
    /// whose first page misses hashes one page, whatever its length
    /// ([`hicache_index::Reader::probe_lazily`]).
    ///
    /// If the subscriber died while changing the index (a panic), the answer is a miss with
    /// trust [`Health::Disconnected`]: a miss is always safe. The query takes no lock (see
    /// [`Reader`]) unless the writer kept changing what it read ([`QueryError::Busy`]): then it
    /// asks again under the session's read lock (fair: it waits for one write hold at most) and
    /// still answers exactly.
    pub fn query(&self, lookup: &Lookup<'_>) -> Result<Hits, QueryError> {
        self.answer(lookup, None, MapCover::UntilMiss)
    }

    /// Answers like [`QueryHandle::query`] and fills `map[i]` with whether page `i` is complete,
    /// for every page (each is hashed and probed, whatever misses before it).
    pub fn query_map(&self, lookup: &Lookup<'_>, map: &mut [bool]) -> Result<Hits, QueryError> {
        self.answer(lookup, Some(map), MapCover::Every)
    }

    /// Answers like [`QueryHandle::query`] and fills `map[i]` for the pages checked until the
    /// first miss (see [`MapCover::UntilMiss`]): no page after it is hashed.
    pub fn query_prefix_map(
        &self,
        lookup: &Lookup<'_>,
        map: &mut [bool],
    ) -> Result<Hits, QueryError> {
        self.answer(lookup, Some(map), MapCover::UntilMiss)
    }

    /// Returns how often the prefix memo answered a page, and what it holds.
    pub fn memo_stats(&self) -> MemoStats {
        self.shared.memo.stats()
    }

    /// Returns the failures under way, one line each (`key list unreachable at URL: CAUSE, N
    /// tries`): why the index is not live, when something keeps failing.
    pub fn failures(&self) -> Vec<String> {
        self.shared.episodes.describe()
    }

    fn answer(
        &self,
        lookup: &Lookup<'_>,
        mut map: Option<&mut [bool]>,
        cover: MapCover,
    ) -> Result<Hits, QueryError> {
        let Pages::Tokens { tokens, namespace } = lookup.pages else {
            return self.probe(lookup, map, cover);
        };
        let reader = &self.shared.reader;
        // Twice at most: a layout advertised between planning and probing changes the plan.
        for _ in 0..2 {
            if self.died() {
                return Ok(miss(map));
            }
            let plan = match self.or_locked(reader.plan(lookup), |s| s.plan(lookup)) {
                Some(plan) => plan?,
                None => return Ok(miss(map)),
            };
            let answered = HASHES.with_borrow_mut(|kept| {
                let memo = &self.shared.memo;
                let mut hashes = LazyHashes::new(&plan, tokens, namespace, kept, memo);
                let first =
                    reader.probe_lazily(plan, lookup, &mut hashes, map.as_deref_mut(), cover);
                // Under the lock the writer is still: the reader answers, with the pages
                // already hashed.
                let again = |_: &Session| {
                    reader.probe_lazily(plan, lookup, &mut hashes, map.as_deref_mut(), cover)
                };
                match self.or_locked(first, again) {
                    Some(hits) => hits,
                    None => Ok(miss(map.as_deref_mut())),
                }
            });
            match answered {
                Err(QueryError::PlanChanged) => continue,
                Ok(_) if self.died() => return Ok(miss(map)),
                Ok(hits) => {
                    reader.count_answer(&hits);
                    return Ok(hits);
                }
                other => return other,
            }
        }
        // The layout keeps changing under the query: let the reader hash as it probes.
        self.probe(lookup, map, cover)
    }

    /// Reports whether the subscriber died while changing the session (a panic poisons its
    /// lock): what it left half-changed is not to be claimed.
    fn died(&self) -> bool {
        self.shared.session.is_poisoned()
    }

    /// Returns the longest write-lock holds by kind and the longest read-lock wait so far.
    pub fn lock_times(&self) -> LockTimes {
        self.shared.locks.get()
    }

    fn probe(
        &self,
        lookup: &Lookup<'_>,
        map: Option<&mut [bool]>,
        cover: MapCover,
    ) -> Result<Hits, QueryError> {
        if self.died() {
            return Ok(miss(map));
        }
        let reader = &self.shared.reader;
        let answered = match map {
            Some(map) => {
                let ask = |r: &Reader, map: &mut [bool]| match cover {
                    MapCover::UntilMiss => r.query_prefix_map(lookup, map),
                    MapCover::Every => r.query_map(lookup, map),
                };
                let first = ask(reader, map);
                let Some(hits) = self.or_locked(first, |_| ask(reader, map)) else {
                    return Ok(miss(Some(map)));
                };
                if self.died() {
                    return Ok(miss(Some(map)));
                }
                hits
            }
            None => match self.or_locked(reader.query(lookup), |s| s.query(lookup)) {
                Some(hits) => hits,
                None => return Ok(miss(None)),
            },
        };
        if self.died() {
            return Ok(miss(None));
        }
        answered
    }

    /// Returns the session's health ([`Health::Disconnected`] once the subscriber stopped).
    pub fn health(&self) -> Health {
        if !self.is_running() {
            return Health::Disconnected;
        }
        if self.died() {
            return Health::Disconnected;
        }
        self.shared.reader.health()
    }

    /// Returns every counter and gauge of the session, with
    /// [`Counters::unconfirmed_ms`] as of now on the driver's clock.
    pub fn counters(&self) -> Counters {
        let now = self.shared.now();
        self.read(|s| s.counters_at(now)).unwrap_or_default()
    }

    /// Reports whether the subscriber's loop is running (false after a stop, a drop or a panic).
    pub fn is_running(&self) -> bool {
        self.shared.running.load(Ordering::Acquire)
    }

    /// Returns the event endpoint in use.
    pub fn endpoint(&self) -> Option<String> {
        self.read(|s| s.endpoint().map(String::from)).flatten()
    }

    /// Returns the sequence of the last batch applied.
    pub fn last_applied_seq(&self) -> Option<Seq> {
        self.read(Session::last_applied_seq).flatten()
    }

    /// Returns the reader's answer `first`, or, when the writer kept changing what it read
    /// ([`QueryError::Busy`]), `again` asked under the session's read lock (counted, with its
    /// wait, apart from other reads); `None` if the subscriber died while changing the session.
    fn or_locked<R>(
        &self,
        first: Result<R, QueryError>,
        again: impl FnOnce(&Session) -> Result<R, QueryError>,
    ) -> Option<Result<R, QueryError>> {
        if !matches!(first, Err(QueryError::Busy)) {
            return Some(first);
        }
        let asked = std::time::Instant::now();
        let session = self.shared.session.read();
        self.shared.locks.record_fallback(asked.elapsed());
        session.map(|s| again(&s))
    }

    /// Runs `f` with read access to the session (for what the methods above do not cover,
    /// e.g. [`Session::layout_for`]). `None` if the subscriber died while changing it.
    pub fn read<R>(&self, f: impl FnOnce(&Session) -> R) -> Option<R> {
        let asked = std::time::Instant::now();
        let session = self.shared.session.read();
        self.shared.locks.record_read_wait(asked.elapsed());
        session.map(|s| f(&s))
    }
}

thread_local! {
    /// Page hashes of the current query, reused so that a query does not allocate.
    static HASHES: RefCell<Vec<PageHash>> = const { RefCell::new(Vec::new()) };
}

/// The page size and EAGLE mode the lookup's layout hashes with.
/// A miss for everything, trusted by no one.
fn miss(map: Option<&mut [bool]>) -> Hits {
    if let Some(map) = map {
        map.fill(false);
    }
    Hits {
        prefix_pages: 0,
        total_pages: 0,
        pages_checked: 0,
        memory_pages: 0,
        disk_only_pages: 0,
        trust: Health::Disconnected,
    }
}

/// A request to the driver loop.
#[derive(Debug)]
pub enum Inbox {
    /// Report what a worker advertises (`None`: it is gone); may change the endpoint.
    Worker {
        /// The worker's name.
        worker: String,
        /// What it advertises.
        info: Option<WorkerInfo>,
    },
    /// Forget every page now.
    Clear,
    /// An HTTP job finished.
    Http(HttpOutcome),
    /// What HA discovery read of the master view key.
    LeaderView(LeaderView),
    /// The answer to an `Command::CheckLeader`.
    LeaderStatus {
        /// The core's request number.
        request: u64,
        /// What the candidate said.
        status: LeaderStatus,
    },
    /// Stop the loop.
    Stop,
}

/// A cloneable handle to steer a running subscriber (worker metadata, clears, stop).
#[derive(Clone, Debug)]
pub struct Control {
    tx: async_channel::Sender<Inbox>,
}

impl Control {
    pub(crate) fn new(tx: async_channel::Sender<Inbox>) -> Control {
        Control { tx }
    }

    /// Reports what `worker` advertises (`None`: the worker is gone). Without a configured
    /// endpoint, the endpoint follows the workers. Returns false if the subscriber stopped.
    pub fn report_worker(&self, worker: &str, info: Option<WorkerInfo>) -> bool {
        self.send(Inbox::Worker {
            worker: worker.to_owned(),
            info,
        })
    }

    /// Asks the subscriber to forget every page. Returns false if it stopped.
    pub fn clear(&self) -> bool {
        self.send(Inbox::Clear)
    }

    /// Asks the subscriber to stop (it finishes within milliseconds); returns false if it
    /// already stopped.
    pub fn stop(&self) -> bool {
        self.send(Inbox::Stop)
    }

    /// Hands an HTTP job's outcome back to the loop (used by the runtimes).
    pub fn deliver(&self, outcome: HttpOutcome) -> bool {
        self.send(Inbox::Http(outcome))
    }

    /// Hands what HA discovery read to the loop; false once the loop is gone.
    pub fn report_leader_view(&self, view: LeaderView) -> bool {
        self.send(Inbox::LeaderView(view))
    }

    /// Hands a leader check's answer to the loop; false once the loop is gone.
    pub fn deliver_leader_status(&self, request: u64, status: LeaderStatus) -> bool {
        self.send(Inbox::LeaderStatus { request, status })
    }

    /// Reports whether the loop is gone (nothing sent is read any more).
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    fn send(&self, msg: Inbox) -> bool {
        self.tx.try_send(msg).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hicache_index::{
        Command, Config, Effect, Instant, Layout, ModelLayout, Namespace, ResyncConfig,
        SglangParams,
    };

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
        assert!(session.counters().objects > 0, "{:?}", session.counters());
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
        assert_eq!(q.read(Session::counters).unwrap().unconfirmed_ms, 0);
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
        use hicache_index_sim::encode::{encode_message, MasterFlavor, OwnedBatch, OwnedEvent};
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
        assert!(q.read(Session::health).is_none());
        assert!(
            q.shared.session.write(|_| ()).is_none(),
            "no write after it"
        );
    }
}
