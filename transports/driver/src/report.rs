//! Reports: the core's reports to `tracing`, counters and health to the `metrics` facade.
//!
//! This module is the one source of the metric names. Every core counter is exported as
//! `hicache_index_<field>_total` (a counter) and every core gauge as `hicache_index_<field>`; the
//! subscriber adds `hicache_index_connected` (1 while connected: live or recovering),
//! `hicache_index_healthy` (1 while live), `hicache_index_health{state}` (1 for the current
//! state) and `hicache_index_subscriber_running` (0 once the loop stopped, was dropped or
//! panicked); a query service adds [`QUERY_DURATION_SECONDS`] and [`HTTP_REJECTED_TOTAL`].
//! The calls go nowhere until the program installs a recorder (`hicache-index serve` installs
//! `metrics-exporter-prometheus` and renders `/metrics` from it).

use hicache_index::sequence::Skip;
use hicache_index::{ClearReason, Counters, Health, Kind, Report};

/// The histogram of query latencies, labelled `transport` (`http`, `nng`), in seconds.
pub const QUERY_DURATION_SECONDS: &str = "hicache_index_query_duration_seconds";

/// The counter of HTTP queries refused with a 4xx status.
pub const HTTP_REJECTED_TOTAL: &str = "hicache_index_http_rejected_total";

/// The upper bounds of [`QUERY_DURATION_SECONDS`]' buckets, in seconds.
pub const QUERY_DURATION_BUCKETS: [f64; 16] = [
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 1e-1,
    1.0, 10.0,
];

/// Every health state, as `hicache_index_health{state}` labels them.
const HEALTH_STATES: [Health; 5] = [
    Health::Live,
    Health::Recovering,
    Health::Connecting,
    Health::Disconnected,
    Health::EventsDisabled,
];

/// Describes the metrics this module and a query service export (their `# HELP` lines); call
/// it once after installing a recorder.
pub fn describe() {
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
pub fn export_memo(stats: &crate::MemoStats) {
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

/// Exports every counter and gauge of the session, by the core's own list of them.
pub fn export_counters(c: &Counters) {
    for (name, value, kind) in c.fields() {
        match kind {
            Kind::Counter => {
                metrics::counter!(format!("hicache_index_{name}_total")).absolute(value)
            }
            Kind::Gauge => metrics::gauge!(format!("hicache_index_{name}")).set(value as f64),
        }
    }
}

/// Exports the connected, healthy and per-state health gauges for `health`.
pub fn export_health(health: Health) {
    let connected = matches!(health, Health::Live | Health::Recovering);
    metrics::gauge!("hicache_index_connected").set(f64::from(u8::from(connected)));
    metrics::gauge!("hicache_index_healthy").set(f64::from(u8::from(health == Health::Live)));
    for state in HEALTH_STATES {
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
        Report::Cleared {
            reason,
            pages: 0,
            objects: 0,
        } => tracing::info!(reason = reason.as_str(), "index forgot (it was empty)"),
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
        Report::ResyncFailed { reason } => tracing::warn!(?reason, "resynchronisation failed"),
        Report::StaleFound { keys, checked } => {
            tracing::info!(keys, checked, "verification removed stale objects")
        }
        Report::HealthChanged { from, to } => {
            tracing::info!(from = from.as_str(), to = to.as_str(), "health changed");
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
