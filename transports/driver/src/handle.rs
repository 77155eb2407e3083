//! What the rest of a program holds: a cheap, cloneable query handle and a control handle.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hicache_index::{
    Counters, Health, Hits, Instant, Lookup, MapCover, PageHash, QueryError, Reader, Seq, Session,
    SessionStatus,
};

use crate::memo::{MemoStats, PrefixMemo};

mod control;
mod lock;

pub use control::{Control, Inbox};
pub use lock::LockTimes;
pub(crate) use lock::{HoldKind, LockMaxima, SessionLock};

/// The state the driver loop and every handle share.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The session's read view: every query goes through it and never takes the lock below.
    pub(crate) reader: Arc<Reader>,
    /// The one session of this subscriber. The driver holds the write lock only for one call
    /// into the session (one message, one answer), never across an await; queries never take
    /// it (only [`QueryHandle::read`], [`QueryHandle::status`] and the like do).
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
    /// ([`hicache_index::Reader::ask`], where the whole query is).
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

    /// Asks the reader (the core's one query path, through the prefix memo); when the writer
    /// kept changing what it read, asks again under the session's read lock, with the pages
    /// already hashed. A subscriber that died while changing the session answers a miss.
    pub(crate) fn answer(
        &self,
        lookup: &Lookup<'_>,
        mut map: Option<&mut [bool]>,
        cover: MapCover,
    ) -> Result<Hits, QueryError> {
        if self.died() {
            return Ok(miss(map));
        }
        let reader = &self.shared.reader;
        let answered = HASHES.with_borrow_mut(|kept| {
            let memo = &self.shared.memo;
            let mut query = reader.ask(lookup, memo, Some(kept), map.as_deref_mut(), cover);
            let first = query.answer();
            // Under the lock the writer is still: the query answers.
            self.or_locked(first, |_| query.answer())
        });
        match answered {
            Some(Ok(_)) if self.died() => Ok(miss(map)),
            Some(answered) => answered,
            None => Ok(miss(map)),
        }
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

    /// Returns where the session is ([`Session::status`]) as of now on the driver's clock;
    /// `None` if the subscriber died while changing it.
    pub fn status(&self) -> Option<SessionStatus> {
        let now = self.shared.now();
        self.read(|s| s.status(now))
    }

    /// Returns every counter and gauge of the session, with
    /// [`Counters::unconfirmed_ms`] as of now on the driver's clock.
    pub fn counters(&self) -> Counters {
        self.status().map(|s| s.counters).unwrap_or_default()
    }

    /// Reports whether the subscriber's loop is running (false after a stop, a drop or a panic).
    pub fn is_running(&self) -> bool {
        self.shared.running.load(Ordering::Acquire)
    }

    /// Returns the event endpoint in use.
    pub fn endpoint(&self) -> Option<String> {
        self.status().and_then(|s| s.endpoint)
    }

    /// Returns the sequence of the last batch applied.
    pub fn last_applied_seq(&self) -> Option<Seq> {
        self.status().and_then(|s| s.last_applied_seq)
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
    /// e.g. [`Session::models`]). `None` if the subscriber died while changing it.
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

#[cfg(test)]
mod tests;
