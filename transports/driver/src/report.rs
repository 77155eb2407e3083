//! Reports: effects to `tracing`, counters and health to the `metrics` facade.
//!
//! Every core counter is exported as `hicache_index_<field>_total` (a counter) and every core
//! gauge as `hicache_index_<field>`; the subscriber adds `hicache_index_connected` (1 while
//! connected: live or recovering), `hicache_index_healthy` (1 while live) and
//! `hicache_index_subscriber_running` (0 once the loop stopped, was dropped or panicked).

use hicache_index::{ClearReason, Counters, Effect, Health, Kind};

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

/// Exports the connected and healthy gauges for `health`.
pub fn export_health(health: Health) {
    let connected = matches!(health, Health::Live | Health::Recovering);
    metrics::gauge!("hicache_index_connected").set(f64::from(u8::from(connected)));
    metrics::gauge!("hicache_index_healthy").set(f64::from(u8::from(health == Health::Live)));
}

/// Exports whether the subscriber loop runs.
pub fn export_running(running: bool) {
    metrics::gauge!("hicache_index_subscriber_running").set(f64::from(u8::from(running)));
}

/// Logs an effect that is only a report (the driver executes the others).
pub fn log_effect(effect: &Effect) {
    match effect {
        Effect::Cleared {
            reason: reason @ (ClearReason::Requested | ClearReason::PublisherCleared),
            pages,
            objects,
        } => tracing::info!(reason = reason.as_str(), pages, objects, "index cleared"),
        Effect::Cleared {
            reason,
            pages,
            objects,
        } => tracing::warn!(reason = reason.as_str(), pages, objects, "index cleared"),
        Effect::Gap { expected, received } => {
            tracing::warn!(expected = expected.0, received = received.0, "sequence gap")
        }
        Effect::Restart { last, received } => {
            tracing::warn!(last = last.0, received = received.0, "publisher restarted")
        }
        Effect::Duplicate { seq } => tracing::debug!(seq = seq.0, "duplicate batch skipped"),
        Effect::Late { seq } => tracing::debug!(seq = seq.0, "late batch skipped"),
        Effect::Malformed { error } => tracing::debug!(?error, "malformed message dropped"),
        Effect::Stray { reason } => tracing::debug!(?reason, "stray message ignored"),
        Effect::Resynced { keys, replayed } => {
            tracing::info!(keys, replayed, "resynchronised from the master's key list")
        }
        Effect::ResyncFailed { reason } => tracing::warn!(?reason, "resynchronisation failed"),
        Effect::StaleFound { keys, checked } => {
            tracing::info!(keys, checked, "verification removed stale objects")
        }
        Effect::HealthChanged { from, to } => {
            tracing::info!(from = from.as_str(), to = to.as_str(), "health changed");
            export_health(*to);
        }
        Effect::EndpointDisagreement { kept, distinct } => {
            tracing::warn!(
                kept,
                distinct,
                "workers advertise different event endpoints"
            )
        }
        Effect::LayoutDisagreement { model, worker } => {
            tracing::warn!(model, worker, "a worker advertises a different layout")
        }
        other => tracing::debug!(effect = ?other, "effect"),
    }
}
