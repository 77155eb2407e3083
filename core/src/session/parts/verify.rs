//! The state of verification: the next round, the one in flight, the sweep in progress, and what
//! the batches skipped before a status point stored (what the session does with it:
//! `session/verify.rs`).

use alloc::string::String;
use alloc::vec::Vec;

use crate::input::VerifyRequest;
use crate::time::Instant;

use super::link::Backoff;

/// Verification: the next round, the one in flight, and the sweep in progress.
#[derive(Debug)]
pub(in crate::session) struct Verify {
    pub(in crate::session) next_at: Option<Instant>,
    pub(in crate::session) in_flight: Option<Round>,
    /// The sweep in progress, if every round of it so far was answered in full.
    pub(in crate::session) sweep: Option<Sweep>,
    /// The number of the next `/batch_query_keys` request (a round, or a confirmation of
    /// doubted key-list lines).
    next_request: u64,
    /// The backoff of rounds that failed or timed out in a row (`attempts` is zero once one is
    /// answered).
    pub(in crate::session) failures: Backoff,
    /// When a round last escalated (forgot and resynced): the next may not before
    /// `VerifyConfig::escalate_every` has passed. Kept across resets: it limits key-list
    /// fetches, whatever happened to the link meanwhile.
    pub(in crate::session) escalated_at: Option<Instant>,
    /// A round held an escalation back: the first round due once the limit has passed
    /// escalates instead of sampling. Any clear of the index satisfies it (the session's
    /// `drop_index`).
    pub(in crate::session) held: bool,
    /// The check of a status point proven after doubt under way (R3): its request, and when
    /// it is given up unanswered (the round timeout: a check that never returns fails).
    pub(in crate::session) point_check: Option<(VerifyRequest, Instant)>,
    /// What the batches skipped before the status point stored since it placed the stream.
    pub(in crate::session) skipped: Skipped,
    /// The keys of [`Verify::skipped`] the point check under way asks about: one the master
    /// holds that the index lacks shows the key list is not of the stream's run.
    pub(in crate::session) point_stores: Vec<String>,
    /// What batches applied out of their order of arrival stored, not yet asked of the master
    /// (R7: the next point check asks, and queries miss until it answers).
    pub(in crate::session) reordered: Reordered,
    /// A point check was asked for while one was under way: it is asked once that one answers.
    pub(in crate::session) check_again: bool,
    /// How many keys the point check under way asks about, and their checksum: an answer that
    /// leaves one out cannot tell.
    pub(in crate::session) point_asked: (usize, u64),
}

/// What batches the stream applied after a batch that arrived after them stored (R7): each may
/// be a late batch of a run the stream left, continued by the next run's.
#[derive(Debug, Default)]
pub(in crate::session) struct Reordered {
    /// Keys of the default tenant they stored.
    pub(in crate::session) stores: Vec<String>,
    /// One stored an object of another tenant: verification cannot ask about it.
    pub(in crate::session) unaskable: bool,
}

impl Reordered {
    /// Reports whether anything waits to be asked (or cannot be).
    pub(in crate::session) fn is_pending(&self) -> bool {
        self.unaskable || !self.stores.is_empty()
    }
}

/// What the batches skipped before a status point stored (R3): the key list, read after the
/// point, must hold it where the master still does, unless it is of another run.
#[derive(Debug, Default)]
pub(in crate::session) struct Skipped {
    /// Keys of the default tenant that the skipped batches stored, up to a sample.
    pub(in crate::session) stores: Vec<String>,
    /// The index's evictions and untracked objects when the point placed the stream: one more
    /// since lets the index lack a key rightly.
    pub(in crate::session) lossy_at: u64,
}

/// A verification sweep in progress (see `Sampled` in the index).
#[derive(Clone, Copy, Debug)]
pub(in crate::session) struct Sweep {
    /// When it began, lowered to the arrival of anything older added since: at its end, every
    /// object the index holds was present at the master at or after this.
    pub(in crate::session) began: Instant,
    /// Its rounds passed objects of another tenant, which verification does not sample.
    pub(in crate::session) other_tenants: bool,
}

/// What verification's timer asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::session) enum VerifyDue {
    /// The round in flight was not answered in time: it was dropped (and its sweep with it);
    /// schedule the next.
    RoundTimedOut,
    /// The point check was not answered in time: the master could not tell (R3).
    PointCheckTimedOut,
    /// The next round is due: sample and ask.
    Round,
}

impl Verify {
    pub(in crate::session) fn new(seed: u64) -> Verify {
        Verify {
            next_at: None,
            in_flight: None,
            sweep: None,
            next_request: 1,
            failures: Backoff::new(seed ^ 0x7665_7269),
            escalated_at: None,
            held: false,
            point_check: None,
            skipped: Skipped::default(),
            point_stores: Vec::new(),
            reordered: Reordered::default(),
            check_again: false,
            point_asked: (0, 0),
        }
    }

    /// Drops the point check under way and what waits to be asked by one: the index forgot.
    pub(in crate::session) fn drop_point_checks(&mut self) {
        self.point_check = None;
        self.reordered = Reordered::default();
        self.check_again = false;
    }

    /// Drops the round under way and the sweep, and schedules nothing (the numbering goes on).
    pub(in crate::session) fn reset(&mut self) {
        self.next_at = None;
        self.in_flight = None;
        self.sweep = None;
    }

    /// Numbers a `/batch_query_keys` request.
    pub(in crate::session) fn reserve_request(&mut self) -> VerifyRequest {
        let request = VerifyRequest(self.next_request);
        self.next_request += 1;
        request
    }

    /// Returns when [`Verify::handle_timeout`] is next due.
    pub(in crate::session) fn poll_timeout(&self) -> Option<Instant> {
        let round = match &self.in_flight {
            Some(round) => Some(round.deadline),
            None => self.next_at,
        };
        let check = self.point_check.map(|(_, deadline)| deadline);
        round.into_iter().chain(check).min()
    }

    /// Reports whether `request` is the point check under way.
    pub(in crate::session) fn is_point_check(&self, request: VerifyRequest) -> bool {
        self.point_check.is_some_and(|(r, _)| r == request)
    }

    /// Returns what is due at `now`, if anything; a round that timed out is dropped here (the
    /// session schedules the next).
    pub(in crate::session) fn handle_timeout(&mut self, now: Instant) -> Option<VerifyDue> {
        if self
            .point_check
            .is_some_and(|(_, deadline)| deadline <= now)
        {
            self.point_check = None;
            return Some(VerifyDue::PointCheckTimedOut);
        }
        match &self.in_flight {
            Some(round) if round.deadline <= now => {
                self.in_flight = None;
                self.sweep = None;
                Some(VerifyDue::RoundTimedOut)
            }
            None if self.next_at.is_some_and(|at| at <= now) => Some(VerifyDue::Round),
            _ => None,
        }
    }
}

/// A verification round asked of the driver.
#[derive(Debug)]
pub(in crate::session) struct Round {
    pub(in crate::session) request: VerifyRequest,
    /// The index's write stamp when the keys were sampled.
    pub(in crate::session) stamp: u64,
    pub(in crate::session) deadline: Instant,
    /// How many keys were asked about, and their [`key_checksum`](super::checksum::key_checksum): a
    /// full answer names each.
    pub(in crate::session) keys: usize,
    pub(in crate::session) checksum: u64,
    /// A sweep ended within this round, whether the next began in it, and whether it passed
    /// objects of another tenant (see `Sampled` in the index).
    pub(in crate::session) ended_sweep: bool,
    pub(in crate::session) began_next: bool,
    pub(in crate::session) other_tenants: bool,
    /// When the keys were sampled, lowered to the arrival of anything older added since: the
    /// next sweep began then if it began in this round.
    pub(in crate::session) sampled_at: Instant,
}
