//! Where the resynchronisation stands ([`ResyncState`]): the fetch under way (a resync after a
//! forget, or a reconcile), what live batches decided while its key list is read, and its
//! timers.

use alloc::boxed::Box;
use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use crate::effect::{Recovering, ResyncFailure};
use crate::frame::{EventKind, Seq};
use crate::input::{SnapshotRequest, VerifyRequest};
use crate::layout::parse_object_key;
use crate::snapshot::LineFilter;
use crate::time::Instant;

use super::checksum::key_checksum;
use super::reconcile::Reconcile;

/// How many questions a fetch asks the master about its key list's doubted lines and the keys
/// live batches stored that the list lacks: a resync's first when the list ends, a reconcile's
/// first about its doubted lines when the list ends and about its stores once the list is
/// applied; the others about what the one before did not answer and the stores that came while
/// it was out (a backlog older than the list drains while it is asked; under steady load new
/// stores always come, so the questions stop here).
pub(in crate::session) const MAX_QUESTIONS: usize = 3;

/// The most such stored keys one question asks about (about 1.6 MB of keys, some 270 requests
/// of `/batch_query_keys`; a question carries the doubted lines not answered yet besides); the rest wait
/// for the next question, or are claimed unasked.
pub(in crate::session) const MAX_ASKED: usize = 16_384;

/// Where the resynchronisation stands.
// One per session, moved only when a resync begins or ends: the size of `Fetching` costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(in crate::session) enum ResyncState {
    Idle,
    Fetching {
        request: SnapshotRequest,
        deadline: Instant,
        /// When the fetch was asked for: the master's key list is read after it.
        asked_at: Instant,
        /// What the completed resync confirms: `asked_at`, or the index's confirmation when it
        /// held objects already (a snapshot only adds), lowered by anything older added since.
        confirms: Instant,
        /// Live batches applied since the key list began to be handed over, and their payload
        /// bytes (bounded: what they touched is remembered in `seen` until the resync ends).
        batches: usize,
        bytes: usize,
        /// Keys applied so far, once the status point placed the stream.
        applied: Option<usize>,
        /// The last live event of each default-tenant key since the stream was placed (`true`:
        /// stored): a snapshot key whose last live event removed it is not applied, and one a
        /// live event stored is in already.
        ///
        /// Keyed by [`key_checksum`], not by the key: no allocation per live event, and a cheap
        /// drop when the resync ends (under the driver's lock). A removal is sticky (`false`
        /// stays), so two keys with one checksum only keep a snapshot key out: a miss, never a
        /// hit.
        seen: BTreeMap<u64, bool>,
        /// A live `cleared` of the default tenant came since the stream was placed.
        cleared: bool,
        /// The default-tenant keys live batches stored that the key list lacks, not asked of the
        /// master yet (a resync's since the stream was placed, a reconcile's after its status
        /// point): such a batch may be older than the list (the master's queue and the network
        /// delay what it published before the list was read), and its object may have gone
        /// since without an event.
        unlisted: BTreeSet<String>,
        /// The keys asked of the master in the question under way: one it does not hold is
        /// removed, unless a live event on it came since it was asked (a store puts it in
        /// `unlisted` again); one it does not answer goes back to `unlisted`.
        asked: BTreeSet<String>,
        /// The list's doubted lines no answer covered yet: every question carries them all, and
        /// a fetch whose questions end with any left fails (completing without them would lose
        /// the objects they name for good).
        doubted: BTreeSet<String>,
        /// Live batches reached the buffer bound while only stores were asked about: the
        /// question out is still awaited, but no store is recorded or asked about any more.
        full: bool,
        /// Stores that came once `full` (each store counted, not each key): claimed unasked.
        beyond: u64,
        /// How many questions were asked (at most [`MAX_QUESTIONS`]).
        questions: usize,
        /// Doubted lines the answers confirmed so far.
        confirmed: usize,
        /// The stream was placed at the master's status point (a reconcile can place the next
        /// key list), not at the last batch heard.
        at_point: bool,
        /// Which of the snapshot's lines become keys.
        lines: LineFilter,
        /// The index forgot while the key list was being read, which may be older than what it
        /// forgot: the answer is discarded and the fetch asked for again once it comes back
        /// (one fetch under way at a time, however often the index forgets meanwhile).
        superseded: bool,
        /// The question under way about the doubted lines and the stores the list lacks
        /// ([`Command::VerifyKeys`](crate::effect::Command::VerifyKeys)).
        confirming: Option<VerifyRequest>,
        /// This fetch reconciles: the stream stays placed and the index keeps answering (see
        /// `session/reconcile.rs`); `None`: a resync after a forget.
        reconcile: Option<Box<Reconcile>>,
    },
    Waiting {
        retry_at: Instant,
        failure: ResyncFailure,
    },
    /// A snapshot could not be anchored to the stream (R6: no status, and no batch had arrived
    /// on the connection): fetch again once a batch arrives, or at `retry_at` if none does.
    AwaitingStream {
        retry_at: Instant,
    },
}

/// What the resynchronisation's timer asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::session) enum ResyncDue {
    /// The fetch was not answered within the fetch timeout: it failed.
    FetchTimedOut,
    /// The question about the doubted lines and the stores the list lacks was not answered in
    /// time: what it asked is asked again, or the fetch completes (or fails, with doubted lines
    /// no answer covered).
    ConfirmTimedOut,
    /// The retry time after a failure came: fetch again.
    Retry,
    /// The next slice of the reconcile being applied.
    ReconcileStep,
}

impl ResyncState {
    /// Reports whether a key list is being fetched or handed over to place the stream (not
    /// to reconcile a placed one).
    pub(in crate::session) fn is_fetching(&self) -> bool {
        matches!(
            self,
            ResyncState::Fetching {
                reconcile: None,
                ..
            }
        )
    }

    /// A fetch asked for at `now` (`reconcile`: the stream stays placed and the index keeps
    /// answering); `confirms`: what the completed fetch confirms.
    pub(in crate::session) fn fetching(
        request: SnapshotRequest,
        now: Instant,
        timeout: Duration,
        confirms: Instant,
        reconcile: Option<Box<Reconcile>>,
    ) -> ResyncState {
        ResyncState::Fetching {
            request,
            deadline: now + timeout,
            asked_at: now,
            confirms,
            batches: 0,
            bytes: 0,
            applied: None,
            seen: BTreeMap::new(),
            cleared: false,
            unlisted: BTreeSet::new(),
            asked: BTreeSet::new(),
            doubted: BTreeSet::new(),
            full: false,
            beyond: 0,
            questions: 0,
            confirmed: 0,
            at_point: false,
            lines: LineFilter::default(),
            superseded: false,
            confirming: None,
            reconcile,
        }
    }

    /// Returns when [`ResyncState::handle_timeout`] is next due.
    pub(in crate::session) fn poll_timeout(&self) -> Option<Instant> {
        match self {
            ResyncState::Idle => None,
            // A reconcile being applied: its next slice is due at once.
            ResyncState::Fetching {
                reconcile: Some(r), ..
            } if r.applying.is_some() => Some(Instant::ZERO),
            ResyncState::Fetching { deadline, .. } => Some(*deadline),
            ResyncState::Waiting { retry_at, .. } | ResyncState::AwaitingStream { retry_at } => {
                Some(*retry_at)
            }
        }
    }

    /// Returns what is due at `now`, if anything (the session acts on it).
    pub(in crate::session) fn handle_timeout(&self, now: Instant) -> Option<ResyncDue> {
        match self {
            ResyncState::Fetching {
                reconcile: Some(r), ..
            } if r.applying.is_some() => return Some(ResyncDue::ReconcileStep),
            _ => {}
        }
        match *self {
            ResyncState::Fetching {
                deadline,
                confirming,
                ..
            } if deadline <= now => Some(if confirming.is_some() {
                ResyncDue::ConfirmTimedOut
            } else {
                ResyncDue::FetchTimedOut
            }),
            ResyncState::Waiting { retry_at, .. } | ResyncState::AwaitingStream { retry_at }
                if retry_at <= now =>
            {
                Some(ResyncDue::Retry)
            }
            _ => None,
        }
    }

    /// Records a live default-tenant event of the batch `seq` applied while a key list is
    /// fetched: for a resync, once the stream is placed, the event wins over the list for its
    /// key, and a key it stores that the list lacks is asked of the master before the resync
    /// completes; a reconcile keeps every one, and asks about the stores that come while it
    /// asks about those after its point (see `session/reconcile.rs`).
    pub(in crate::session) fn saw(&mut self, seq: Seq, event: &crate::frame::Event<'_>) {
        let ResyncState::Fetching {
            applied,
            seen,
            cleared,
            unlisted,
            asked,
            full,
            beyond,
            reconcile,
            ..
        } = self
        else {
            return;
        };
        if let Some(reconcile) = reconcile {
            reconcile.saw(seq, event);
            if !reconcile.asks() {
                return;
            }
        } else {
            if applied.is_none() {
                return;
            }
            match (event.kind, event.object_key) {
                // Once full, no key of the list is taken any more: `seen` is not needed.
                _ if *full => {}
                (EventKind::Stored, Some(key)) => {
                    seen.entry(key_checksum(key)).or_insert(true);
                }
                (EventKind::Removed | EventKind::Unknown, Some(key)) => {
                    seen.insert(key_checksum(key), false);
                }
                _ => {}
            }
            if event.kind == EventKind::Cleared {
                *cleared = true;
            }
        }
        note_live(unlisted, asked, full.then_some(beyond), event);
    }

    /// Reports whether the question under way asks about stores the key list lacks and
    /// nothing else (every question carries the doubted lines no answer covered yet).
    pub(in crate::session) fn asks_stores_only(&self) -> bool {
        matches!(
            self,
            ResyncState::Fetching { confirming: Some(_), doubted, .. } if doubted.is_empty()
        )
    }

    /// Marks the fetch full when only stores are being asked about
    /// ([`ResyncState::asks_stores_only`]); returns whether it did (otherwise the buffer's bound
    /// fails the fetch).
    pub(in crate::session) fn fill(&mut self) -> bool {
        let stores_only = self.asks_stores_only();
        if let (true, ResyncState::Fetching { full, .. }) = (stores_only, self) {
            *full = true;
        }
        stores_only
    }

    /// Why the index is recovering, as far as the resync tells.
    pub(in crate::session) fn recovering(&self) -> Option<Recovering> {
        match self {
            ResyncState::Idle => None,
            ResyncState::Fetching {
                confirming: Some(_),
                ..
            } => Some(Recovering::Confirming),
            ResyncState::Fetching { .. } => Some(Recovering::Fetching),
            ResyncState::Waiting { failure, .. } => {
                Some(Recovering::Retrying { failure: *failure })
            }
            ResyncState::AwaitingStream { .. } => Some(Recovering::NoStatus),
        }
    }
}

/// Notes a live event on the keys a fetch asks the master about: a store is one the list may
/// lack (only counted in `beyond` once the fetch is full), any event decides a key asked about
/// (the answer, read before it, no longer does), and a clear forgets them all.
pub(in crate::session) fn note_live(
    unlisted: &mut BTreeSet<String>,
    asked: &mut BTreeSet<String>,
    beyond: Option<&mut u64>,
    event: &crate::frame::Event<'_>,
) {
    match (event.kind, event.object_key, beyond) {
        (EventKind::Stored, Some(key), Some(beyond)) => {
            asked.remove(key);
            if parse_object_key(key).is_some() && !unlisted.contains(key) {
                *beyond += 1;
            }
        }
        (EventKind::Stored, Some(key), None) => {
            asked.remove(key);
            note_store(unlisted, key, true);
        }
        (EventKind::Removed | EventKind::Unknown, Some(key), _) => {
            asked.remove(key);
            note_store(unlisted, key, false);
        }
        (EventKind::Cleared, _, beyond) => {
            unlisted.clear();
            asked.clear();
            if let Some(beyond) = beyond {
                *beyond = 0;
            }
        }
        _ => {}
    }
}

/// Notes that a live event stored the object `key` (`stored`) or removed it.
pub(in crate::session) fn note_store(unlisted: &mut BTreeSet<String>, key: &str, stored: bool) {
    if !stored {
        unlisted.remove(key);
    } else if parse_object_key(key).is_some() && !unlisted.contains(key) {
        unlisted.insert(String::from(key));
    }
}

/// Moves up to [`MAX_ASKED`] keys of `unlisted` into `asked`; returns them, for the question.
pub(in crate::session) fn ask(
    unlisted: &mut BTreeSet<String>,
    asked: &mut BTreeSet<String>,
) -> Vec<String> {
    let mut keys = Vec::new();
    while keys.len() < MAX_ASKED {
        let Some(key) = unlisted.pop_first() else {
            break;
        };
        keys.push(key.clone());
        asked.insert(key);
    }
    keys
}
