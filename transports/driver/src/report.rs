//! Reports: the core's reports to `tracing`, counters and health to the `metrics` facade.
//!
//! This module is the one source of the metric names. Every core counter is exported as
//! `hicache_index_<field>_total` (a counter) and every core gauge as `hicache_index_<field>` (in
//! base units: `unconfirmed_ms` as `hicache_index_unconfirmed_seconds`), each with its `# HELP`
//! from the field's docs ([`counter_help`]); the
//! subscriber adds `hicache_index_connected` (1 while connected: live or recovering),
//! `hicache_index_healthy` (1 while live), `hicache_index_health{state}` (1 for the current
//! state) and `hicache_index_subscriber_running` (0 once the loop stopped, was dropped or
//! panicked); a query service adds [`QUERY_DURATION_SECONDS`] and [`HTTP_REJECTED_TOTAL`].
//! The calls go nowhere until the program installs a recorder (`hicache-index serve` installs
//! `metrics-exporter-prometheus` and renders `/metrics` from it).

use hicache_index::sequence::Skip;
use hicache_index::{ClearReason, Counters, Health, Kind, Report, ResyncFailure};

/// The histogram of query latencies, labelled `transport` (`http`, `nng`), in seconds.
pub const QUERY_DURATION_SECONDS: &str = "hicache_index_query_duration_seconds";

/// The counter of HTTP queries refused with a 4xx status.
pub const HTTP_REJECTED_TOTAL: &str = "hicache_index_http_rejected_total";

/// The upper bounds of [`QUERY_DURATION_SECONDS`]' buckets, in seconds.
pub const QUERY_DURATION_BUCKETS: [f64; 16] = [
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 1e-1,
    1.0, 10.0,
];

/// Describes the metrics this module and a query service export (their `# HELP` lines); call
/// it once after installing a recorder.
pub fn describe() {
    for (field, _, kind) in Counters::default().fields() {
        let (name, factor) = counter_metric(field, kind);
        let help = counter_help(field).unwrap_or(field);
        match (kind, factor == 1.0) {
            (Kind::Counter, _) => metrics::describe_counter!(name, help),
            (Kind::Gauge, true) => metrics::describe_gauge!(name, help),
            (Kind::Gauge, false) => metrics::describe_gauge!(name, metrics::Unit::Seconds, help),
        }
    }
    metrics::describe_gauge!(
        "hicache_index_connected",
        "1 while connected to the publisher (live or recovering)"
    );
    metrics::describe_gauge!(
        "hicache_index_healthy",
        "1 while live: the index reflects every event since its last clear"
    );
    metrics::describe_gauge!(
        "hicache_index_subscriber_running",
        "0 once the subscriber loop stopped"
    );
    metrics::describe_gauge!("hicache_index_health", "1 for the current health state");
    metrics::describe_histogram!(
        QUERY_DURATION_SECONDS,
        metrics::Unit::Seconds,
        "Time to decode, answer and encode one query (not the client's network time)"
    );
    metrics::describe_counter!(HTTP_REJECTED_TOTAL, "HTTP queries refused (4xx)");
    metrics::describe_counter!(
        "hicache_index_prefix_memo_hits_total",
        "token-query pages whose digest the prefix memo knew (no SHA-256)"
    );
    metrics::describe_counter!(
        "hicache_index_prefix_memo_misses_total",
        "token-query pages the prefix memo did not know (hashed)"
    );
    metrics::describe_gauge!(
        "hicache_index_prefix_memo_bytes",
        "bytes the prefix memo holds"
    );
    metrics::describe_gauge!(
        "hicache_index_leader",
        "1 for the HA leader the index follows (label address)"
    );
}

/// Exports the prefix memo's hits, misses and size.
pub fn export_memo(stats: &crate::memo::MemoStats) {
    metrics::counter!("hicache_index_prefix_memo_hits_total").absolute(stats.hits);
    metrics::counter!("hicache_index_prefix_memo_misses_total").absolute(stats.misses);
    metrics::gauge!("hicache_index_prefix_memo_bytes").set(stats.bytes as f64);
}

/// Exports the HA leader the index follows, if any.
pub fn export_leader(address: Option<&str>) {
    if let Some(address) = address {
        metrics::gauge!("hicache_index_leader", "address" => address.to_owned()).set(1.0);
    }
}

/// Exports every counter and gauge of the session, by the core's own list of them (names and
/// units as [`counter_metric`] says).
pub fn export_counters(c: &Counters) {
    for (field, value, kind) in c.fields() {
        let (name, factor) = counter_metric(field, kind);
        match kind {
            Kind::Counter => metrics::counter!(name).absolute(value),
            Kind::Gauge => metrics::gauge!(name).set(value as f64 * factor),
        }
    }
}

/// Returns the `# HELP` text of a core figure (a field of [`Counters::fields`]), from its docs.
pub fn counter_help(field: &str) -> Option<&'static str> {
    Some(match field {
        "batches" => "Batches applied to the index",
        "events" => "Events in applied batches",
        "stored" => "stored events applied",
        "removed" => "removed events applied",
        "publisher_clears" => "cleared events applied",
        "unknown_events" => "Events of a type the decoder does not know (the object they name is taken as absent)",
        "stored_without_key" => "stored events without an object key (ignored)",
        "unreadable_removals" => "removed events without an object key (each forces a clear)",
        "duplicates" => "Copies of batches passed or held, skipped (rule R2)",
        "status_checks" => "Checks of a quiet stream against the master's /kv_events/status (rule R11)",
        "status_disagreed" => "Statuses that showed batches lost at the tail of a burst or another run of the master, in checks of a quiet stream (rule R11) or a fetch's status point (rule R6): the index forgot",
        "before_point" => "Batches at or before a snapshot's status point, skipped: the key list holds what they did (rule R3)",
        "unplaced_dropped" => "Batches dropped while the stream was unplaced and no fetch was under way: the next key list holds what they did (rule R6)",
        "placements" => "Status points that placed the stream (rule R6)",
        "held" => "Batches held, by the reorder window or for a status point",
        "gaps" => "Holes the stream showed (without a reorder window every batch numbered past the one before it; with one, each hole it gave up on)",
        "missing_sequences" => "Sequence numbers skipped across all gaps",
        "restarts" => "Batches that could not be of the followed run after its position: another run of the master, or with a reorder window a late one (rule R5)",
        "clears_gap" => "Clears after a gap",
        "clears_restart" => "Clears after a batch of another run (rule R5)",
        "clears_disconnected" => "Clears after a lost connection (or a new one over what an old one taught)",
        "clears_endpoint" => "Clears after an endpoint change",
        "clears_unreadable_removal" => "Clears after an unreadable removal",
        "clears_undecodable" => "Clears after a batch that could not be decoded",
        "clears_unproven" => "Clears after a snapshot whose status point the stream did not pass in time",
        "snapshot_odd_lines" => "Snapshot lines that were not well-formed object keys (never applied)",
        "snapshot_doubted_lines" => "Well-formed snapshot lines next to an odd one: applied only once /batch_query_keys confirms them",
        "snapshot_confirmed_lines" => "Doubted snapshot lines the master confirmed present (applied)",
        "confirm_failures" => "Questions about a key list's doubted lines or the stores it lacks that failed or timed out (asked again; doubted lines never answered fail the fetch)",
        "unlisted_stores" => "Keys asked of the master because live batches stored them during a resync or a reconcile whose key list lacked them, counted at each question",
        "unlisted_unasked" => "Keys live batches stored during a resync or a reconcile that its key list lacked and that no answer of the master covered: claimed unasked",
        "unlisted_removed" => "Keys live batches stored during a resync or a reconcile that its key list lacked and the master no longer held: removed",
        "clears_requested" => "Clears the driver asked for",
        "stale_escalations" => "Verification rounds that escalated: a key found gone without an event asked for a reconcile with the master's key list (at most one per escalate_every)",
        "stray_topic" => "Messages with another topic",
        "stray_frame_count" => "Messages without exactly three frames",
        "malformed_seq" => "Messages whose sequence frame was not 8 bytes",
        "malformed_payload" => "Messages whose payload did not decode",
        "unparsed_keys" => "Object keys that do not parse as {P}_{H}{S}",
        "untracked_objects" => "Objects not tracked because a namespace or suffix table was full",
        "group_id_mismatches" => "Events whose group id did not name the key's logical key",
        "evictions" => "Pages evicted to stay within the cap",
        "suspended_objects" => "Removals of one medium from an object the stream had shown on the other too: the object became a suspect, absent until verification answers for it",
        "suspects_confirmed" => "Suspects a verification answer brought back as present",
        "suspects_dropped" => "Suspects not kept because the suspect table was full (they stay absent)",
        "pages" => "Pages held",
        "objects" => "Objects present",
        "connects" => "Connections asked for",
        "disconnects" => "Connections lost or failed",
        "resyncs_started" => "Resynchronisations started",
        "resyncs_completed" => "Resynchronisations completed",
        "resyncs_failed" => "Resynchronisations failed (fetch error, timeout or buffer overflow)",
        "snapshot_keys" => "Keys applied from snapshots",
        "unanchored_snapshots" => "Snapshots that could not be anchored to the stream: no status counters, and no batch had arrived on the connection (fetched again)",
        "verify_failures" => "Verification rounds the driver reported as failed",
        "unawaited_answers" => "Answers (fetch, verification, status check, signals read, leader check) to a request the session no longer awaits",
        "superseded_fetches" => "Fetches the index forgot during (their key list may be older than what it forgot): each was fetched again once it came back, so that one fetch at a time is under way",
        "verify_rounds" => "Verification rounds completed",
        "verified_keys" => "Keys checked by verification",
        "stale_keys_found" => "Keys verification found absent and removed",
        "point_checks" => "Checks at the master before queries trusted the index: status points proven only after batches before them came (a sample of the index's keys), and the pages stored by batches applied out of their order of arrival",
        "point_checks_failed" => "Point checks that found a claimed key absent at the master (its key list was of another run than the stream), were answered in part or failed: the index forgot and resynced",
        "reordered_batches" => "Batches the reorder window applied after a batch that arrived after them: what each stored was asked of the master by a point check before queries trusted it",
        "stale_escalations_held" => "Verification rounds that removed stale keys within escalate_every of the last escalation: no forget and resync then, the objects not sampled stayed claimed until the first round due once the limit had passed",
        "clears_store_changed" => "Clears after the master's signals moved and a reconcile could not bring the index to its key list exactly (no status point, another run's, or not reached in time)",
        "signal_reads" => "Reads of the master's store signals (its /metrics) answered",
        "signal_failures" => "Reads of the master's store signals that failed or timed out",
        "store_changes" => "Reads whose store signals differed from the read before: objects hidden, dropped or brought back without an event",
        "reconciles_started" => "Reconciles asked for: a key list read to bring the index to it without forgetting it",
        "reconciles_completed" => "Reconciles applied",
        "reconciled_removed" => "Objects reconciles removed: held by the index, no longer listed by the master",
        "reconciled_restored" => "Objects reconciles stored: listed by the master, not held by the index",
        "held_batches" => "Batches held now, by the reorder window or for a status point",
        "buffered_batches" => "Live batches applied during the resynchronisation under way",
        "unconfirmed_ms" => "How long the index's content has gone without confirmation from the master: now - confirmed_at, where every object the index holds is known to have been present at the master at or after confirmed_at; 0 while the index is empty",
        "queries" => "Queries answered",
        "hit_pages" => "Pages reported as hits (prefix pages) across all queries",
        "leader_changes" => "Leader changes seen in HA discovery (a new address or view version)",
        "fenced_batches" => "Batches dropped between a leader change and following the new leader: the old leader's late messages",
        "events_disabled" => "Times a master said its publisher is off (\"enabled\":false)",
        "leader_view_version" => "The followed leader's view version in discovery (0: none followed)",
        "last_failover_ms" => "The last failover, from the leader change seen to live again (0: none yet)",
        "last_failover_after_serving_ms" => "The last failover, from the new leader found serving to live again (0: none yet)",
        _ => return None,
    })
}

/// Returns the metric name of a core figure and the factor its value is exported with: counters
/// `hicache_index_<field>_total`, gauges `hicache_index_<field>`, and a gauge in milliseconds
/// (`<stem>_ms`) in base units, `hicache_index_<stem>_seconds` (the value times 0.001).
pub fn counter_metric(field: &str, kind: Kind) -> (String, f64) {
    match (kind, field.strip_suffix("_ms")) {
        (Kind::Counter, _) => (format!("hicache_index_{field}_total"), 1.0),
        (Kind::Gauge, Some(stem)) => (format!("hicache_index_{stem}_seconds"), 1e-3),
        (Kind::Gauge, None) => (format!("hicache_index_{field}"), 1.0),
    }
}

/// Exports the connected, healthy and per-state health gauges for `health`.
pub fn export_health(health: Health) {
    let connected = matches!(
        health,
        Health::Live | Health::Recovering | Health::Reconciling
    );
    metrics::gauge!("hicache_index_connected").set(f64::from(u8::from(connected)));
    metrics::gauge!("hicache_index_healthy").set(f64::from(u8::from(health == Health::Live)));
    for state in Health::ALL {
        metrics::gauge!("hicache_index_health", "state" => state.as_str())
            .set(f64::from(u8::from(state == health)));
    }
}

/// Exports whether the subscriber loop runs.
pub fn export_running(running: bool) {
    metrics::gauge!("hicache_index_subscriber_running").set(f64::from(u8::from(running)));
}

/// Logs reports (the driver executes commands; reports ask nothing of it), each kind of skipped
/// batch and each reason for recovering at INFO once per episode (until the index is live
/// again), and every further one at DEBUG, so that a stream that skips batch after batch logs
/// one line, not one a batch.
#[derive(Debug, Default)]
pub struct ReportLog {
    /// The kinds of skip logged at INFO in this episode.
    skips: Vec<Skip>,
}

impl ReportLog {
    /// Logs one report.
    pub fn log(&mut self, report: &Report) {
        match report {
            Report::Skipped { seq, why } if !self.skips.contains(why) => {
                self.skips.push(*why);
                tracing::info!(
                    seq = seq.0,
                    why = skip_name(*why),
                    "batch skipped (further ones at DEBUG until the index is live)"
                );
            }
            Report::Skipped { seq, why } => {
                tracing::debug!(seq = seq.0, why = skip_name(*why), "batch skipped")
            }
            Report::HealthChanged {
                to: Health::Live, ..
            } => {
                self.skips.clear();
                log_report(report);
            }
            other => log_report(other),
        }
    }
}

fn skip_name(why: Skip) -> &'static str {
    match why {
        Skip::Copy => "a copy of a batch passed",
        Skip::BeforePoint => "at or before the key list's status point",
        Skip::Unplaced => "the stream waits for a key list to place it",
    }
}

/// Logs a report on its own (see [`ReportLog`] for the episodes).
pub fn log_report(report: &Report) {
    match report {
        Report::Cleared {
            reason: reason @ (ClearReason::Requested | ClearReason::PublisherCleared),
            pages,
            objects,
        } => tracing::info!(reason = reason.as_str(), pages, objects, "index cleared"),
        // Nothing was lost: no warning (a connection that never came up cleared nothing).
        Report::Cleared {
            reason,
            pages: 0,
            objects: 0,
        } => tracing::debug!(reason = reason.as_str(), "empty index cleared"),
        Report::Cleared {
            reason: reason @ ClearReason::StoreChanged,
            pages,
            objects,
        } => tracing::warn!(
            reason = reason.as_str(),
            pages,
            objects,
            "index cleared: the master dropped objects without an event and the reconcile could \
             not place its key list (no status point, another run's, or a failure); resyncing"
        ),
        Report::Cleared {
            reason,
            pages,
            objects,
        } => tracing::warn!(reason = reason.as_str(), pages, objects, "index cleared"),
        Report::Gap { expected, received } => {
            tracing::warn!(expected = expected.0, received = received.0, "sequence gap")
        }
        Report::OtherRun { position, received } => tracing::warn!(
            position = position.map(|s| s.0),
            received = received.0,
            "a batch of another run of the master (a restart), or a late one"
        ),
        Report::Skipped { seq, why } => {
            tracing::debug!(seq = seq.0, why = skip_name(*why), "batch skipped")
        }
        Report::Placed { at } => tracing::info!(
            at = at.map(|s| s.0),
            "the key list's status point placed the stream"
        ),
        Report::Recovering { why } => tracing::info!(why = why.describe(), "recovering"),
        Report::Malformed { error } => tracing::debug!(?error, "malformed message dropped"),
        Report::Stray { reason } => tracing::debug!(?reason, "stray message ignored"),
        Report::Resynced {
            keys,
            replayed,
            confirmed,
        } => tracing::info!(
            keys,
            replayed,
            confirmed,
            "resynchronised from the master's key list"
        ),
        // A fetch that failed or timed out is named once per episode, with its URL and cause,
        // by the driver (see `episode`); too many live batches meanwhile is the index's own.
        Report::ResyncFailed {
            reason: ResyncFailure::BufferFull,
        } => tracing::warn!("resynchronisation failed: too many live batches while fetching"),
        Report::ResyncFailed { reason } => tracing::debug!(?reason, "resynchronisation failed"),
        Report::StaleFound { keys, checked } => {
            tracing::info!(keys, checked, "verification removed stale objects")
        }
        Report::EscalationHeld { .. } => tracing::info!(
            "verification found objects gone without an event, but the last forget and resync \
             was less than escalate_every ago: only the sampled keys were removed, the rest \
             waits for the limit"
        ),
        Report::StoreChanged { family } => tracing::info!(
            family,
            "the master's store signals moved: objects hidden, dropped or brought back without \
             an event; reconciling with its key list"
        ),
        Report::SignalsAbsent => tracing::warn!(
            "the master's /metrics lists none of the store signals: objects it drops without an \
             event (a client leaving) are found by verification only"
        ),
        Report::Reconciled { removed, restored } => {
            tracing::info!(removed, restored, "reconciled with the master's key list")
        }
        Report::HealthChanged { from, to } => {
            // Each try of a connection that does not come up goes connecting -> disconnected
            // and back: logged once, as a failure episode, by the driver.
            let retrying = matches!(
                (from, to),
                (Health::Connecting, Health::Disconnected)
                    | (Health::Disconnected, Health::Connecting)
            );
            match retrying {
                true => tracing::debug!(from = from.as_str(), to = to.as_str(), "health changed"),
                false => tracing::info!(from = from.as_str(), to = to.as_str(), "health changed"),
            }
            export_health(*to);
        }
        Report::EndpointDisagreement { kept, distinct } => {
            tracing::warn!(
                kept,
                distinct,
                "workers advertise different event endpoints"
            )
        }
        Report::LayoutDisagreement { model, worker } => {
            tracing::warn!(model, worker, "a worker advertises a different layout")
        }
        other => tracing::debug!(report = ?other, "report"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_core_figure_has_a_help_text_and_a_name_in_base_units() {
        for (field, _, kind) in Counters::default().fields() {
            assert!(
                counter_help(field).is_some_and(|h| !h.is_empty()),
                "{field}"
            );
            let (name, _) = counter_metric(field, kind);
            assert!(!name.ends_with("_ms"), "{name}");
        }
        assert_eq!(
            counter_metric("unconfirmed_ms", Kind::Gauge),
            ("hicache_index_unconfirmed_seconds".to_owned(), 1e-3)
        );
    }
}
