//! The session's lock ([`SessionLock`]): fair to queries, poisoned by a panic in a write hold,
//! and the longest holds and waits it saw ([`LockTimes`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

#[cfg(doc)]
use hicache_index::QueryError;
use hicache_index::Session;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

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

    pub(super) fn record_read_wait(&self, waited: Duration) {
        raise(&self.read_wait, waited);
    }

    pub(super) fn record_fallback(&self, waited: Duration) {
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
        raise(&self.fallback_wait, waited);
    }

    pub(super) fn get(&self) -> LockTimes {
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
    /// The longest a read of the session through the handle
    /// ([`QueryHandle::read`](crate::handle::QueryHandle::read),
    /// [`QueryHandle::counters`](crate::handle::QueryHandle::counters), ...) waited for the
    /// read lock (wall time: on a contended CPU it includes the writer being descheduled while
    /// it holds the lock). Queries take no lock and never wait (see [`hicache_index::reader`])
    /// unless they fall back (below).
    pub read_wait: Duration,
    /// How many queries the writer kept changing what they read ([`QueryError::Busy`]), so that
    /// they asked again under the session's read lock.
    pub fallbacks: u64,
    /// The longest such a query waited for the read lock (wall time, like `read_wait`): the
    /// only time a query waits for the writer.
    pub fallback_wait: Duration,
}
