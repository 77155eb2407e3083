//! `/metrics`: the Prometheus exporter, every family described (`# HELP` and `# TYPE`), in base
//! units, in a stable order (families sorted by name), with the build, the process, the HTTP
//! requests by route and status, and the connections.

use std::time::Duration;

use hicache_index_driver::report::{self, QUERY_DURATION_BUCKETS, QUERY_DURATION_SECONDS};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// The models whose layout the workers advertise: 1 while a model's workers disagree.
pub(super) const MODEL_LAYOUT_CONFLICT: &str = "hicache_index_model_layout_conflict";

/// The workers advertising each model's layout now.
pub(super) const MODEL_WORKERS: &str = "hicache_index_model_workers";

/// HTTP requests answered, by `route` and `status`.
pub(crate) const HTTP_REQUESTS_TOTAL: &str = "hicache_index_http_requests_total";
/// The time to answer an HTTP request, by `route`, from its head read to its response made.
pub(crate) const HTTP_REQUEST_DURATION_SECONDS: &str =
    "hicache_index_http_request_duration_seconds";
/// HTTP connections open now.
pub(crate) const HTTP_CONNECTIONS_OPEN: &str = "hicache_index_http_connections_open";
/// Connections refused with a 503 because `--max-connections` were open.
pub(crate) const HTTP_CONNECTIONS_REJECTED_TOTAL: &str =
    "hicache_index_http_connections_rejected_total";
/// Idle connections closed to make room for a new one at `--max-connections`.
pub(crate) const HTTP_CONNECTIONS_CLOSED_IDLE_TOTAL: &str =
    "hicache_index_http_connections_closed_idle_total";
/// 1, labelled with the version and the optional features built in.
pub(crate) const BUILD_INFO: &str = "hicache_index_build_info";
/// 1 while the service is stopping (SIGTERM): `/readyz` answers 503.
pub(crate) const STOPPING: &str = "hicache_index_stopping";

/// The upper bounds of the HTTP request duration's buckets, in seconds.
const REQUEST_BUCKETS: [f64; 12] = [
    5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1, 1.0, 10.0,
];

/// Installs the exporter as the process's recorder and describes every metric.
pub(crate) fn install(
    features: &str,
) -> Result<(PrometheusHandle, metrics_process::Collector), String> {
    let handle = builder()
        .install_recorder()
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    describe();
    metrics::gauge!(
        BUILD_INFO,
        "version" => env!("CARGO_PKG_VERSION"),
        "features" => features.to_owned()
    )
    .set(1.0);
    let process = metrics_process::Collector::default();
    process.describe();
    Ok((handle, process))
}

/// The exporter's configuration: the histograms' buckets.
pub(crate) fn builder() -> PrometheusBuilder {
    PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(QUERY_DURATION_SECONDS.into()),
            &QUERY_DURATION_BUCKETS,
        )
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(HTTP_REQUEST_DURATION_SECONDS.into()),
                &REQUEST_BUCKETS,
            )
        })
        .expect("the bucket lists are not empty")
}

/// Describes the metrics of the driver and of the service.
fn describe() {
    report::describe();
    metrics::describe_gauge!(
        MODEL_LAYOUT_CONFLICT,
        "1 while the workers of the model disagree on its layout (it answers misses)"
    );
    metrics::describe_gauge!(
        MODEL_WORKERS,
        "The workers advertising the model's layout at the last poll"
    );
    metrics::describe_gauge!(
        crate::layout_report::MODEL_READY,
        "1 while the model has a layout to answer with (given, or agreed by its workers)"
    );
    metrics::describe_gauge!(
        crate::layout_report::WORKER_LAYOUT,
        "1 for the state of the worker's layout (advertised, no_layout, unusable, unreachable)"
    );
    metrics::describe_counter!(
        HTTP_REQUESTS_TOTAL,
        "HTTP requests answered, by route and status"
    );
    metrics::describe_histogram!(
        HTTP_REQUEST_DURATION_SECONDS,
        metrics::Unit::Seconds,
        "Time to answer an HTTP request, by route (its head read to its response made)"
    );
    metrics::describe_gauge!(HTTP_CONNECTIONS_OPEN, "HTTP connections open now");
    metrics::describe_counter!(
        HTTP_CONNECTIONS_REJECTED_TOTAL,
        "HTTP connections answered 503 because --max-connections were open (none idle)"
    );
    metrics::describe_counter!(
        HTTP_CONNECTIONS_CLOSED_IDLE_TOTAL,
        "Idle HTTP connections closed to make room at --max-connections"
    );
    metrics::describe_gauge!(
        BUILD_INFO,
        "1, labelled with the version and the optional features built in"
    );
    metrics::describe_gauge!(
        STOPPING,
        "1 while the service is stopping (/readyz answers 503)"
    );
    metrics::gauge!(STOPPING).set(0.0);
    metrics::gauge!(HTTP_CONNECTIONS_OPEN).set(0.0);
    metrics::counter!(HTTP_CONNECTIONS_REJECTED_TOTAL).absolute(0);
    metrics::counter!(HTTP_CONNECTIONS_CLOSED_IDLE_TOTAL).absolute(0);
}

/// Records one HTTP request's route, status and duration.
pub(crate) fn record_request(route: &'static str, status: u16, took: Duration) {
    metrics::counter!(HTTP_REQUESTS_TOTAL, "route" => route, "status" => status.to_string())
        .increment(1);
    metrics::histogram!(HTTP_REQUEST_DURATION_SECONDS, "route" => route).record(took);
}

/// Renders the exposition with its families sorted by name (the exporter's order follows its
/// hash maps, which change between scrapes), and each family's samples sorted by their labels
/// (a histogram's buckets keep their order).
pub(crate) fn render(handle: &PrometheusHandle, process: &metrics_process::Collector) -> String {
    process.collect();
    sorted(&handle.render())
}

/// Sorts an exposition's families by name and their samples by labels (see [`render`]).
pub(crate) fn sorted(text: &str) -> String {
    // (family, comment lines, samples)
    let mut families: Vec<(String, Vec<&str>, Vec<&str>)> = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let family = match line.strip_prefix("# ") {
            Some(comment) => comment.split_whitespace().nth(1).unwrap_or("").to_owned(),
            None => {
                let name = line.split(['{', ' ']).next().unwrap_or("");
                match families.last() {
                    Some((f, _, _)) if belongs(name, f) => f.clone(),
                    _ => name.to_owned(),
                }
            }
        };
        match families.last_mut() {
            Some((f, comments, samples)) if *f == family => match line.starts_with('#') {
                true => comments.push(line),
                false => samples.push(line),
            },
            _ => {
                let (comments, samples) = match line.starts_with('#') {
                    true => (vec![line], Vec::new()),
                    false => (Vec::new(), vec![line]),
                };
                families.push((family, comments, samples));
            }
        }
    }
    families.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = String::with_capacity(text.len());
    for (_, comments, mut samples) in families {
        samples.sort_by_key(|l| labels_without_le(l));
        for line in comments.into_iter().chain(samples) {
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

/// Reports whether a sample named `name` is of the family `family` (a histogram's or summary's
/// `_bucket`, `_sum`, `_count`).
fn belongs(name: &str, family: &str) -> bool {
    name == family
        || name
            .strip_prefix(family)
            .is_some_and(|s| ["_bucket", "_sum", "_count"].contains(&s))
}

/// A sample's name suffix-free labels without `le`, to sort a family's samples by.
fn labels_without_le(line: &str) -> String {
    let Some((_, rest)) = line.split_once('{') else {
        return String::new();
    };
    let labels = rest.split('}').next().unwrap_or("");
    labels
        .split(',')
        .filter(|l| !l.starts_with("le="))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_sorted_and_buckets_keep_their_order() {
        let text = "# HELP b_total b\n# TYPE b_total counter\nb_total{x=\"2\"} 1\nb_total{x=\"1\"} 1\n\n\
                    # TYPE a histogram\na_bucket{t=\"z\",le=\"1\"} 1\na_bucket{t=\"z\",le=\"+Inf\"} 1\na_sum{t=\"z\"} 1\na_count{t=\"z\"} 1\n\
                    a_bucket{t=\"y\",le=\"1\"} 0\na_bucket{t=\"y\",le=\"+Inf\"} 0\na_sum{t=\"y\"} 0\na_count{t=\"y\"} 0\n";
        let out = sorted(text);
        let lines: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(lines[0], "# TYPE a histogram");
        assert_eq!(lines[1], "a_bucket{t=\"y\",le=\"1\"} 0");
        assert_eq!(lines[4], "a_count{t=\"y\"} 0");
        assert_eq!(lines[5], "a_bucket{t=\"z\",le=\"1\"} 1");
        assert_eq!(lines[9], "# HELP b_total b");
        assert_eq!(lines[11], "b_total{x=\"1\"} 1");
        assert_eq!(sorted(&out), out, "sorting twice changes nothing");
    }

    #[test]
    fn prometheus_buckets_are_cumulative_and_end_with_the_count() {
        let recorder = builder().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            let h = metrics::histogram!(QUERY_DURATION_SECONDS, "transport" => "http");
            h.record(Duration::from_nanos(500));
            h.record(Duration::from_micros(30));
            h.record(Duration::from_secs(100));
        });
        let out = handle.render();
        let q = QUERY_DURATION_SECONDS;
        for line in [
            format!("{q}_bucket{{transport=\"http\",le=\"0.000001\"}} 1"),
            format!("{q}_bucket{{transport=\"http\",le=\"0.00005\"}} 2"),
            format!("{q}_bucket{{transport=\"http\",le=\"10\"}} 2"),
            format!("{q}_bucket{{transport=\"http\",le=\"+Inf\"}} 3"),
            format!("{q}_count{{transport=\"http\"}} 3"),
        ] {
            assert!(out.contains(&line), "{line} in\n{out}");
        }
    }
}
