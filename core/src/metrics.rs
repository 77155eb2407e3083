//! Counters: everything the session saw, as one plain struct.

use crate::effect::ClearReason;

/// Whether a figure only grows or goes up and down.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Only grows.
    Counter,
    /// Goes up and down.
    Gauge,
}

/// Every counter and gauge of a session, readable at any time in [`crate::SessionStatus::counters`].
///
/// Counters only grow (until the session is dropped); `pages`, `objects`, `held_batches`,
/// `buffered_batches`, `unconfirmed_ms`, `leader_view_version` and the `last_failover` figures
/// are gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counters {
    /// Batches applied to the index.
    pub batches: u64,
    /// Events in applied batches.
    pub events: u64,
    /// `stored` events applied.
    pub stored: u64,
    /// `removed` events applied.
    pub removed: u64,
    /// `cleared` events applied.
    pub publisher_clears: u64,
    /// Events of a type the decoder does not know (the object they name is taken as absent).
    pub unknown_events: u64,
    /// `stored` events without an object key (ignored).
    pub stored_without_key: u64,
    /// `removed` events without an object key (each forces a clear).
    pub unreadable_removals: u64,
    /// Copies of batches passed or held, skipped (rule R2 of [`crate::sequence`]).
    pub duplicates: u64,
    /// Batches at or before a snapshot's status point, skipped: the key list holds what they
    /// did (R3).
    pub before_point: u64,
    /// Batches dropped while the stream was unplaced and no fetch was under way: the next key
    /// list holds what they did (R6).
    pub unplaced_dropped: u64,
    /// Status points that placed the stream (R6).
    pub placements: u64,
    /// Checks of a quiet stream against the master's status asked (R11).
    pub status_checks: u64,
    /// Statuses that showed a lost tail or another run: the index forgot. Checks of a quiet
    /// stream (R11), and a fetch's status point numbered below the batch heard before it was
    /// asked (R6).
    pub status_disagreed: u64,
    /// Batches held out of order (reorder window).
    pub held: u64,
    /// Holes the stream showed: without a reorder window, every batch numbered past the one
    /// that arrived before it; with one, each hole the window gave up on.
    pub gaps: u64,
    /// Sequence numbers skipped across all gaps.
    pub missing_sequences: u64,
    /// Batches that could not be of the followed run after its position (R5): another run of
    /// the master (a restart nobody saw), or, with a reorder window, late ones.
    pub restarts: u64,
    /// Clears after a gap.
    pub clears_gap: u64,
    /// Clears after a batch of another run (R5).
    pub clears_restart: u64,
    /// Clears after a lost connection (or a new one over what an old one taught).
    pub clears_disconnected: u64,
    /// Clears after an endpoint change.
    pub clears_endpoint: u64,
    /// Clears after an unreadable removal.
    pub clears_unreadable_removal: u64,
    /// Clears after a batch that could not be decoded.
    pub clears_undecodable: u64,
    /// Clears after a snapshot whose status point the stream did not pass in time.
    pub clears_unproven: u64,
    /// Snapshot lines that were not well-formed object keys (never applied).
    pub snapshot_odd_lines: u64,
    /// Well-formed snapshot lines next to an odd one: applied only once `/batch_query_keys`
    /// confirms them.
    pub snapshot_doubted_lines: u64,
    /// Doubted snapshot lines the master confirmed present (applied).
    pub snapshot_confirmed_lines: u64,
    /// Questions of `/batch_query_keys` about a key list's doubted lines or the stores it lacks
    /// that failed or timed out (asked again; doubted lines no question answered fail the
    /// fetch).
    pub confirm_failures: u64,
    /// Keys asked of the master because live batches stored them during a resync or a
    /// reconcile whose key list lacked them (such a batch may be older than the list), counted
    /// at each question.
    pub unlisted_stores: u64,
    /// Of the keys live batches stored during a resync or a reconcile that its key list
    /// lacked, those the master no longer held: removed.
    pub unlisted_removed: u64,
    /// Keys live batches stored during a resync or a reconcile that its key list lacked and
    /// that no answer of the master covered (they came while the last question was out, past
    /// the most one asks, after the fetch's buffer bound, or its answer left them out): claimed
    /// unasked.
    pub unlisted_unasked: u64,
    /// Clears the driver asked for.
    pub clears_requested: u64,
    /// Verification rounds that escalated: a key found gone without an event asked for a
    /// reconcile with the master's key list (at most one per `VerifyConfig::escalate_every`).
    pub stale_escalations: u64,
    /// Clears after the master's signals moved and a reconcile could not be exact (no status
    /// point, another run's, or not reached in time): the index forgot and resynced.
    pub clears_store_changed: u64,
    /// Messages with another topic.
    pub stray_topic: u64,
    /// Messages without exactly three frames.
    pub stray_frame_count: u64,
    /// Messages whose sequence frame was not 8 bytes.
    pub malformed_seq: u64,
    /// Messages whose payload did not decode.
    pub malformed_payload: u64,
    /// Object keys that do not parse as `{P}_{H}{S}`.
    pub unparsed_keys: u64,
    /// Objects not tracked because a namespace or suffix table was full.
    pub untracked_objects: u64,
    /// Events whose group id did not name the key's logical key.
    pub group_id_mismatches: u64,
    /// Pages evicted to stay within the cap.
    pub evictions: u64,
    /// Removals of one medium from an object the stream had shown on the other too: the object
    /// became a suspect, absent until verification answers for it.
    pub suspended_objects: u64,
    /// Suspects a verification answer brought back as present.
    pub suspects_confirmed: u64,
    /// Suspects not kept because the suspect table was full (they stay absent).
    pub suspects_dropped: u64,
    /// Pages held (gauge).
    pub pages: u64,
    /// Objects present (gauge).
    pub objects: u64,
    /// Connections asked for.
    pub connects: u64,
    /// Connections lost or failed.
    pub disconnects: u64,
    /// Resynchronisations started.
    pub resyncs_started: u64,
    /// Resynchronisations completed.
    pub resyncs_completed: u64,
    /// Resynchronisations failed (fetch error, timeout or buffer overflow).
    pub resyncs_failed: u64,
    /// Keys applied from snapshots.
    pub snapshot_keys: u64,
    /// Snapshots that could not be anchored to the stream: no status counters, and no batch
    /// had arrived on the connection (fetched again).
    pub unanchored_snapshots: u64,
    /// Verification rounds the driver reported as failed.
    pub verify_failures: u64,
    /// Answers (of a fetch, a verification, a status check, a signals read or a leader check)
    /// to a request the session no longer awaits.
    pub unawaited_answers: u64,
    /// Fetches the index forgot during (their key list may be older than what it forgot): each
    /// was fetched again once it came back, so that one fetch at a time is under way.
    pub superseded_fetches: u64,
    /// Verification rounds completed.
    pub verify_rounds: u64,
    /// Keys checked by verification.
    pub verified_keys: u64,
    /// Keys verification found absent and removed.
    pub stale_keys_found: u64,
    /// Verification rounds that removed stale keys within `VerifyConfig::escalate_every` of
    /// the last escalation: the index did not forget and resync then, and the objects the round
    /// did not sample stayed claimed until the first round due once the limit had passed.
    pub stale_escalations_held: u64,
    /// Point checks asked of `/batch_query_keys` before queries trust the index: status points
    /// proven only after batches before them came (R3: a sample of what the index claims), and
    /// what batches applied out of their order of arrival stored (R7).
    pub point_checks: u64,
    /// Point checks that found a claimed key absent (the key list was of another run than the
    /// stream), were answered in part or not at all: the index forgot and resynced.
    pub point_checks_failed: u64,
    /// Batches the reorder window applied after a batch that arrived after them (R7): the pages
    /// each stored were asked of the master by a point check before queries trusted them (a
    /// store of another tenant, which verification cannot ask about, forgot).
    pub reordered_batches: u64,
    /// Reads of the master's signals answered ([`crate::signals`]).
    pub signal_reads: u64,
    /// Reads of the master's signals that failed or timed out.
    pub signal_failures: u64,
    /// Reads whose signals differed from the read before: objects hidden, dropped or brought
    /// back without an event.
    pub store_changes: u64,
    /// Reconciles asked for (a key list read to bring the index to it without forgetting it).
    pub reconciles_started: u64,
    /// Reconciles applied.
    pub reconciles_completed: u64,
    /// Objects reconciles removed: held by the index, no longer listed by the master.
    pub reconciled_removed: u64,
    /// Objects reconciles stored: listed by the master, not held by the index.
    pub reconciled_restored: u64,
    /// Batches held now, by the reorder window or for a status point (gauge).
    pub held_batches: u64,
    /// Live batches applied during the resynchronisation under way (gauge; each keeps what it
    /// touched from the key list).
    pub buffered_batches: u64,
    /// How long, in milliseconds, the index's content has gone without confirmation from the
    /// master (gauge): `now - confirmed_at`, where `confirmed_at` is a time at or after which
    /// every object the index holds is known to have been present at the master
    /// ([`crate::SessionStatus::confirmed_at`]); 0 while the index is empty.
    ///
    /// An object a client's departure removed without an event stays in the index until
    /// verification finds it; this figure bounds how long ago such an object can have left.
    /// What confirms:
    /// - an event, the objects it stores, as of when the session received it (the stream's
    ///   delivery delay is not counted); an index that was empty is thus confirmed as of the
    ///   first batch it applies;
    /// - a completed resynchronisation, every object as of when its snapshot was asked for
    ///   ([`crate::Command::FetchSnapshot`]), if the index was empty then: a snapshot only adds,
    ///   so objects held before keep their own confirmation;
    /// - with verification on, a sweep (rounds over the whole index, each answered in full,
    ///   without a failed, timed-out or stale round or a clear in between), every object as of
    ///   the sweep's first round, unless the index holds objects of a tenant other than
    ///   [`crate::DEFAULT_TENANT`] (verification samples only that one).
    ///
    /// Objects added from older evidence (reordered or buffered batches, snapshot keys) keep
    /// `confirmed_at` no later than that evidence. Without verification it only moves when the
    /// index empties or such a resync completes.
    pub unconfirmed_ms: u64,
    /// Queries answered.
    pub queries: u64,
    /// Pages reported as hits (prefix pages) across all queries.
    pub hit_pages: u64,
    /// Leader changes seen in HA discovery (a new address or view version).
    pub leader_changes: u64,
    /// Batches dropped between a leader change and following the new leader: the old leader's
    /// late messages.
    pub fenced_batches: u64,
    /// Times a master said its publisher is off (`"enabled":false`).
    pub events_disabled: u64,
    /// The followed leader's view version in discovery (0: none followed; a gauge).
    pub leader_view_version: u64,
    /// The last failover, from the leader change seen to live again (0: none yet; a gauge).
    pub last_failover_ms: u64,
    /// The last failover, from the new leader found serving to live again (a gauge).
    pub last_failover_after_serving_ms: u64,
}

impl Counters {
    /// Returns the counter of clears for `reason` (the forget table's counter column).
    pub fn clears_for(&mut self, reason: ClearReason) -> &mut u64 {
        match reason {
            ClearReason::Gap => &mut self.clears_gap,
            ClearReason::Restart => &mut self.clears_restart,
            ClearReason::Disconnected | ClearReason::Reconnected => &mut self.clears_disconnected,
            ClearReason::EndpointChanged | ClearReason::LeaderChanged => &mut self.clears_endpoint,
            ClearReason::UnreadableRemoval => &mut self.clears_unreadable_removal,
            ClearReason::Undecodable => &mut self.clears_undecodable,
            ClearReason::Unproven => &mut self.clears_unproven,
            ClearReason::Requested => &mut self.clears_requested,
            ClearReason::StoreChanged => &mut self.clears_store_changed,
            ClearReason::PublisherCleared => &mut self.publisher_clears,
        }
    }

    /// Lists every figure with its name and kind, so exporters need not name them one by one.
    pub fn fields(&self) -> [(&'static str, u64, Kind); 83] {
        [
            ("batches", self.batches, Kind::Counter),
            ("events", self.events, Kind::Counter),
            ("stored", self.stored, Kind::Counter),
            ("removed", self.removed, Kind::Counter),
            ("publisher_clears", self.publisher_clears, Kind::Counter),
            ("unknown_events", self.unknown_events, Kind::Counter),
            ("stored_without_key", self.stored_without_key, Kind::Counter),
            (
                "unreadable_removals",
                self.unreadable_removals,
                Kind::Counter,
            ),
            ("duplicates", self.duplicates, Kind::Counter),
            ("before_point", self.before_point, Kind::Counter),
            ("unplaced_dropped", self.unplaced_dropped, Kind::Counter),
            ("placements", self.placements, Kind::Counter),
            ("status_checks", self.status_checks, Kind::Counter),
            ("status_disagreed", self.status_disagreed, Kind::Counter),
            ("held", self.held, Kind::Counter),
            ("gaps", self.gaps, Kind::Counter),
            ("missing_sequences", self.missing_sequences, Kind::Counter),
            ("restarts", self.restarts, Kind::Counter),
            ("clears_gap", self.clears_gap, Kind::Counter),
            ("clears_restart", self.clears_restart, Kind::Counter),
            (
                "clears_disconnected",
                self.clears_disconnected,
                Kind::Counter,
            ),
            ("clears_endpoint", self.clears_endpoint, Kind::Counter),
            (
                "clears_unreadable_removal",
                self.clears_unreadable_removal,
                Kind::Counter,
            ),
            ("clears_undecodable", self.clears_undecodable, Kind::Counter),
            ("clears_unproven", self.clears_unproven, Kind::Counter),
            ("snapshot_odd_lines", self.snapshot_odd_lines, Kind::Counter),
            (
                "snapshot_doubted_lines",
                self.snapshot_doubted_lines,
                Kind::Counter,
            ),
            (
                "snapshot_confirmed_lines",
                self.snapshot_confirmed_lines,
                Kind::Counter,
            ),
            ("confirm_failures", self.confirm_failures, Kind::Counter),
            ("unlisted_stores", self.unlisted_stores, Kind::Counter),
            ("unlisted_removed", self.unlisted_removed, Kind::Counter),
            ("unlisted_unasked", self.unlisted_unasked, Kind::Counter),
            ("clears_requested", self.clears_requested, Kind::Counter),
            ("stale_escalations", self.stale_escalations, Kind::Counter),
            (
                "clears_store_changed",
                self.clears_store_changed,
                Kind::Counter,
            ),
            ("stray_topic", self.stray_topic, Kind::Counter),
            ("stray_frame_count", self.stray_frame_count, Kind::Counter),
            ("malformed_seq", self.malformed_seq, Kind::Counter),
            ("malformed_payload", self.malformed_payload, Kind::Counter),
            ("unparsed_keys", self.unparsed_keys, Kind::Counter),
            ("untracked_objects", self.untracked_objects, Kind::Counter),
            (
                "group_id_mismatches",
                self.group_id_mismatches,
                Kind::Counter,
            ),
            ("evictions", self.evictions, Kind::Counter),
            ("suspended_objects", self.suspended_objects, Kind::Counter),
            ("suspects_confirmed", self.suspects_confirmed, Kind::Counter),
            ("suspects_dropped", self.suspects_dropped, Kind::Counter),
            ("pages", self.pages, Kind::Gauge),
            ("objects", self.objects, Kind::Gauge),
            ("connects", self.connects, Kind::Counter),
            ("disconnects", self.disconnects, Kind::Counter),
            ("resyncs_started", self.resyncs_started, Kind::Counter),
            ("resyncs_completed", self.resyncs_completed, Kind::Counter),
            ("resyncs_failed", self.resyncs_failed, Kind::Counter),
            ("snapshot_keys", self.snapshot_keys, Kind::Counter),
            (
                "unanchored_snapshots",
                self.unanchored_snapshots,
                Kind::Counter,
            ),
            ("verify_failures", self.verify_failures, Kind::Counter),
            ("unawaited_answers", self.unawaited_answers, Kind::Counter),
            ("superseded_fetches", self.superseded_fetches, Kind::Counter),
            ("verify_rounds", self.verify_rounds, Kind::Counter),
            ("verified_keys", self.verified_keys, Kind::Counter),
            ("stale_keys_found", self.stale_keys_found, Kind::Counter),
            (
                "stale_escalations_held",
                self.stale_escalations_held,
                Kind::Counter,
            ),
            ("point_checks", self.point_checks, Kind::Counter),
            (
                "point_checks_failed",
                self.point_checks_failed,
                Kind::Counter,
            ),
            ("reordered_batches", self.reordered_batches, Kind::Counter),
            ("signal_reads", self.signal_reads, Kind::Counter),
            ("signal_failures", self.signal_failures, Kind::Counter),
            ("store_changes", self.store_changes, Kind::Counter),
            ("reconciles_started", self.reconciles_started, Kind::Counter),
            (
                "reconciles_completed",
                self.reconciles_completed,
                Kind::Counter,
            ),
            ("reconciled_removed", self.reconciled_removed, Kind::Counter),
            (
                "reconciled_restored",
                self.reconciled_restored,
                Kind::Counter,
            ),
            ("held_batches", self.held_batches, Kind::Gauge),
            ("buffered_batches", self.buffered_batches, Kind::Gauge),
            ("unconfirmed_ms", self.unconfirmed_ms, Kind::Gauge),
            ("queries", self.queries, Kind::Counter),
            ("hit_pages", self.hit_pages, Kind::Counter),
            ("leader_changes", self.leader_changes, Kind::Counter),
            ("fenced_batches", self.fenced_batches, Kind::Counter),
            ("events_disabled", self.events_disabled, Kind::Counter),
            ("leader_view_version", self.leader_view_version, Kind::Gauge),
            ("last_failover_ms", self.last_failover_ms, Kind::Gauge),
            (
                "last_failover_after_serving_ms",
                self.last_failover_after_serving_ms,
                Kind::Gauge,
            ),
        ]
    }
}
