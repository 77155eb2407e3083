//! What the handlers share: [`App`], made once the service starts.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use hicache_index_api::Limits;
use hicache_index_driver::workers::LastPolls;
use hicache_index_tokio::QueryHandle;
use metrics_exporter_prometheus::PrometheusHandle;

/// What the handlers share.
pub(super) struct App {
    pub(super) index: QueryHandle,
    pub(super) limits: Limits,
    pub(super) client_timeout: Duration,
    /// The query latencies over HTTP.
    pub(super) http_latency: metrics::Histogram,
    /// HTTP queries refused.
    pub(super) rejected: metrics::Counter,
    /// Renders `/metrics` from the process's recorder.
    pub(super) prometheus: PrometheusHandle,
    /// The URLs of `--workers`.
    pub(super) workers: Vec<String>,
    /// What the last poll of each worker found.
    pub(super) polls: LastPolls,
    /// The process metrics, collected at each scrape.
    pub(super) process: metrics_process::Collector,
    /// Set once SIGTERM came: `/readyz` answers 503.
    pub(super) stopping: AtomicBool,
}
