//! `serve`: the sidecar. Subscribes to a master's KV events and answers routers over HTTP
//! (`POST /v1/query`, `GET /metrics`, `GET /healthz`, `GET /readyz`) and, when built with the
//! `nng` feature, over an nng REP socket.
//!
//! Clients are served by hyper on tokio: every connection is its own task, request headers
//! must arrive within `--client-timeout` and bodies within it too, bodies are bounded, and at
//! most `--max-connections` are open at once. Query latency is measured from the decoded body
//! to the encoded answer, so a slow client never shows in it.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use clap::Args;
use hicache_index::layout::ModelVerdict;
use hicache_index::{Config, Health, IndexConfig, LeaderConfig, ResyncConfig, VerifyConfig};
use hicache_index_api::{answer_with, known_models, ApiError, Limits, QueryRequest};
use hicache_index_driver::report::{
    self, HTTP_REJECTED_TOTAL, QUERY_DURATION_BUCKETS, QUERY_DURATION_SECONDS,
};
use hicache_index_driver::workers::LastPolls;
use hicache_index_driver::WorkerPoller;
use hicache_index_tokio::{HaLocator, HttpConfig, QueryHandle, Subscriber, SubscriberConfig};
use http_body_util::{BodyExt, Limited};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::layout_args::LayoutArgs;
use crate::layout_report;
use crate::{parse_duration, Outcome};

/// `serve --events URL [--master-http URL] LAYOUT... [--workers URL,...] [--listen ADDR]
/// [--nng-listen URL]`
#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    /// The master's KV event endpoint (its --kv_events_bind_endpoint), e.g. tcp://10.0.0.5:5557.
    #[arg(long, value_name = "URL")]
    events: String,
    /// The topic subscribed to; the Mooncake master sends an empty one.
    #[arg(long, value_name = "T", default_value = "")]
    topic: String,
    /// The master's HTTP admin side (e.g. http://10.0.0.5:9003). Turns on the bootstrap from
    /// its key list at start, resync after loss, and periodic verification.
    #[arg(long, value_name = "URL")]
    master_http: Option<String>,
    /// Follow a Mooncake HA cluster's leader, named in etcd (Mooncake's own form, e.g.
    /// etcd://10.0.0.1:2379;10.0.0.2:2379): the leader's host replaces the host of --events and
    /// --master-http, their ports kept. Needs --master-http.
    #[arg(
        long,
        value_name = "etcd://HOST:PORT[;HOST:PORT...]",
        requires = "master_http"
    )]
    ha_locator: Option<String>,
    /// The Mooncake cluster id of --ha-locator (the masters' MC_STORE_CLUSTER_ID).
    #[arg(long, value_name = "ID", requires = "ha_locator")]
    cluster_id: Option<String>,
    /// Turn the bootstrap and the resync after loss off (loss then only clears).
    #[arg(long, requires = "master_http")]
    no_resync: bool,
    /// How long fetching the master's key list may take.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10s")]
    resync_timeout: Duration,
    /// Turn the periodic verification against silent removals off.
    #[arg(long, requires = "master_http")]
    no_verify: bool,
    /// Time between verification rounds.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "5s")]
    verify_interval: Duration,
    /// Keys checked per verification round.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    verify_sample: usize,
    #[command(flatten)]
    layout: LayoutArgs,
    /// SGLang workers to learn each model's layout from (repeatable, or comma-separated):
    /// their served model name (GET /v1/models) and layout (GET /get_hicache_l3_cache_layout),
    /// polled every --worker-poll-interval. Layouts given with the flags above win for their
    /// model; workers of one model that disagree make that model answer misses. SGLang 0.5.23
    /// advertises layouts for MLA, DSA and DeepSeek-V4 models only: give MHA models (and DCP
    /// launches) --layout MODEL=FILE or the layout flags with --model. /readyz, /metrics and a
    /// WARN line say per worker what it advertises or why not, and per model whether it is ready.
    #[arg(long, value_name = "URL[,URL...]", value_delimiter = ',')]
    workers: Vec<String>,
    /// Time between two polls of the workers (a change is seen within one).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "2s")]
    worker_poll_interval: Duration,
    /// How long one request to a worker may take.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "2s")]
    worker_timeout: Duration,
    /// The most pages the index holds; a full index evicts the least recently useful.
    #[arg(long, value_name = "N", default_value_t = 1 << 20)]
    max_pages: usize,
    /// The HTTP address to listen on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9100")]
    listen: SocketAddr,
    /// Also answer over nng on this URL (e.g. tcp://127.0.0.1:9101 or ipc:///run/hicache.ipc).
    #[arg(long, value_name = "URL")]
    nng_listen: Option<String>,
    /// The largest request body, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = Limits::default().max_body_bytes)]
    max_body_bytes: usize,
    /// The most tokens in one request.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_tokens)]
    max_tokens: usize,
    /// The most page hashes in one request.
    #[arg(long, value_name = "N", default_value_t = Limits::default().max_page_hashes)]
    max_page_hashes: usize,
    /// The prefix memo's budget in bytes: page digests of repeated prefixes, so that a token
    /// query over a known prefix costs no SHA-256 (0 turns it off).
    #[arg(long, value_name = "BYTES", default_value_t = hicache_index_tokio::DEFAULT_MEMO_BYTES)]
    prefix_memo_bytes: usize,
    /// Time a client has to send a request's headers, and then its body.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10s")]
    client_timeout: Duration,
    /// The most HTTP connections open at once.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    max_connections: usize,
}

/// What the handlers share.
struct App {
    index: QueryHandle,
    limits: Limits,
    client_timeout: Duration,
    /// The query latencies over HTTP.
    http_latency: metrics::Histogram,
    /// HTTP queries refused.
    rejected: metrics::Counter,
    /// Renders `/metrics` from the process's recorder.
    prometheus: PrometheusHandle,
    /// The URLs of `--workers`.
    workers: Vec<String>,
    /// What the last poll of each worker found.
    polls: LastPolls,
}

/// Runs the service until SIGINT or SIGTERM.
pub(crate) fn run(args: ServeArgs) -> Outcome {
    check_endpoint(&args.events)?;
    if args.max_connections == 0 || args.max_body_bytes == 0 || args.client_timeout.is_zero() {
        return Err(
            "--max-connections, --max-body-bytes and --client-timeout must be positive".into(),
        );
    }
    if cfg!(not(feature = "nng")) && args.nng_listen.is_some() {
        return Err("--nng-listen: this hicache-index was built without nng support (build with --features nng)".into());
    }
    if args.worker_poll_interval.is_zero() || args.worker_timeout.is_zero() {
        return Err("--worker-poll-interval and --worker-timeout must be positive".into());
    }
    let layouts = if args.layout.is_given() || args.workers.is_empty() {
        args.layout.to_model_layouts()?
    } else {
        Vec::new()
    };
    let mut session = Config {
        endpoint: Some(args.events.clone()),
        topic: args.topic.clone().into_bytes(),
        layouts,
        index: IndexConfig {
            max_pages: args.max_pages,
            ..IndexConfig::default()
        },
        ..Config::default()
    };
    let mut http = HttpConfig::default();
    if args.master_http.is_some() {
        if !args.no_resync {
            session.resync = Some(ResyncConfig {
                fetch_timeout: args.resync_timeout,
                ..ResyncConfig::default()
            });
            http.request_timeout = http.request_timeout.min(args.resync_timeout);
        }
        if !args.no_verify {
            let verify = VerifyConfig {
                interval: args.verify_interval,
                sample: args.verify_sample,
                ..VerifyConfig::default()
            };
            http.request_timeout = http.request_timeout.min(verify.timeout);
            session.verify = Some(verify);
        }
    }
    let ha = args
        .ha_locator
        .as_deref()
        .map(|l| HaLocator::parse(l, args.cluster_id.as_deref()))
        .transpose()
        .map_err(|e| format!("--ha-locator: {e}"))?;
    if ha.is_some() {
        session.leader = Some(LeaderConfig::default());
    }
    let config = SubscriberConfig {
        master_http: args.master_http.clone(),
        http,
        prefix_memo_bytes: args.prefix_memo_bytes,
        ha,
        ..SubscriberConfig::new(session)
    };
    let limits = Limits {
        max_body_bytes: args.max_body_bytes,
        max_tokens: args.max_tokens,
        max_page_hashes: args.max_page_hashes,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(serve(args, config, limits))
}

async fn serve(args: ServeArgs, config: SubscriberConfig, limits: Limits) -> Outcome {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let prometheus = install_recorder()?;
    let (index, task) = Subscriber::spawn(config).map_err(|e| e.to_string())?;
    // Stopped (and joined) when this function returns.
    let _workers = match args.workers.is_empty() {
        true => None,
        false => {
            let http = HttpConfig {
                request_timeout: args.worker_timeout,
                max_body_bytes: 4 << 20,
                ..HttpConfig::default()
            };
            let poller = WorkerPoller::spawn(
                &args.workers,
                args.worker_poll_interval,
                http,
                args.layout.eagle,
                task.control(),
            )
            .map_err(|e| e.to_string())?;
            Some(poller)
        }
    };
    let app = Arc::new(App {
        index: index.clone(),
        limits,
        client_timeout: args.client_timeout,
        http_latency: metrics::histogram!(QUERY_DURATION_SECONDS, "transport" => "http"),
        rejected: metrics::counter!(HTTP_REJECTED_TOTAL),
        prometheus,
        workers: args.workers.clone(),
        polls: _workers
            .as_ref()
            .map(WorkerPoller::last_polls)
            .unwrap_or_default(),
    });
    // What each worker and model is, logged the first time and on every change (aborted when
    // this function returns).
    let _layout_log = (!args.workers.is_empty()).then(|| {
        let period = (args.worker_poll_interval / 4)
            .clamp(Duration::from_millis(10), Duration::from_millis(500));
        AbortOnDrop(tokio::spawn(layout_report::log_changes(
            index.clone(),
            args.workers.clone(),
            app.polls.clone(),
            period,
        )))
    });
    // Closed when this function returns, after the subscriber stopped.
    let _nng = start_nng(&args, &app)?;
    crate::say(&format!("hicache-index: http listening on http://{local}"));
    if let Some(url) = &args.nng_listen {
        crate::say(&format!("hicache-index: nng listening on {url}"));
    }
    tracing::info!(
        target: "hicache_index_serve",
        "subscribing to {} (master http: {})",
        args.events,
        args.master_http
            .as_deref()
            .unwrap_or("none: loss only clears")
    );
    if let Some(locator) = &args.ha_locator {
        tracing::info!(target: "hicache_index_serve", "following the HA leader named in {locator}");
    }
    let router = router(app);
    let outcome = tokio::select! {
        () = accept_loop(listener, router, args.client_timeout, args.max_connections) => Ok(ExitCode::SUCCESS),
        () = shutdown_signal() => {
            tracing::info!(target: "hicache_index_serve", "stopping");
            Ok(ExitCode::SUCCESS)
        }
        () = events_disabled(&index) => Err(
            "the master's KV event publisher is off (\"enabled\":false in /kv_events/status): \
             it was built without it, and the index would stay empty; run a master with the \
             publisher (e.g. PyPI mooncake-transfer-engine-cuda13 0.3.14)"
                .to_owned(),
        ),
    };
    task.shutdown().await;
    outcome
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(feature = "nng")]
fn start_nng(
    args: &ServeArgs,
    app: &Arc<App>,
) -> Result<Option<hicache_index_nng::Service>, String> {
    let Some(url) = &args.nng_listen else {
        return Ok(None);
    };
    let latency = metrics::histogram!(QUERY_DURATION_SECONDS, "transport" => "nng");
    let options = hicache_index_nng::Options {
        limits: app.limits,
        observer: Some(Arc::new(move |d| latency.record(d))),
        ..hicache_index_nng::Options::default()
    };
    hicache_index_nng::serve_with(app.index.clone(), url, options)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Stands for the nng service in a build without it (`--nng-listen` was refused earlier).
#[cfg(not(feature = "nng"))]
struct NoNng;

#[cfg(not(feature = "nng"))]
fn start_nng(_args: &ServeArgs, _app: &Arc<App>) -> Result<Option<NoNng>, String> {
    Ok(None)
}

/// Accepts connections forever, each served on its own task under the limits.
async fn accept_loop(
    listener: tokio::net::TcpListener,
    router: Router,
    client_timeout: Duration,
    max_connections: usize,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(max_connections));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: wait a moment rather than spin.
                tracing::warn!(target: "hicache_index_serve", "accepting a connection failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(client_timeout)
                .serve_connection(TokioIo::new(stream), service);
            let _ = connection.await;
            drop(slot);
        });
    }
}

/// Returns once the master (or HA leader) said its publisher is off: an error of the
/// deployment, which `serve` reports and exits on rather than serve an empty index.
async fn events_disabled(index: &QueryHandle) {
    while index.health() != Health::EventsDisabled {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = interrupt => {}
                _ = term.recv() => {}
            },
            Err(_) => {
                let _ = interrupt.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}

fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/query", post(query))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(app)
}

/// `POST /v1/query`: the JSON query of `hicache_index_api`.
async fn query(State(app): State<Arc<App>>, body: Body) -> Response {
    let body = match read_body(body, &app).await {
        Ok(body) => body,
        Err(response) => {
            app.rejected.increment(1);
            return response;
        }
    };
    let start = Instant::now();
    let answer = QueryRequest::from_json(&body, &app.limits).and_then(|query| {
        answer_with(
            &query,
            |model| {
                // `None`: the subscriber died while changing the index; the handle then
                // answers a miss for no page, which this shape matches.
                app.index
                    .read(|s| s.layout_for(model).map(|l| (l.page_size, l.eagle)))
                    .unwrap_or(Ok((u32::MAX, false)))
            },
            |lookup, map| app.index.query_map(lookup, map),
        )
        .map_err(|e| {
            e.listing_models(query.request().model.as_deref(), || {
                app.index.read(known_models).unwrap_or_default()
            })
        })
    });
    let response = match answer {
        Ok(answer) => json(StatusCode::OK, answer.to_json()),
        Err(error) => {
            app.rejected.increment(1);
            api_error(&error)
        }
    };
    app.http_latency.record(start.elapsed());
    response
}

/// Reads a body within the size limit and the client timeout.
async fn read_body(body: Body, app: &App) -> Result<Bytes, Response> {
    let limit = app.limits.max_body_bytes;
    let collect = Limited::new(body, limit).collect();
    match tokio::time::timeout(app.client_timeout, collect).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            Err(api_error(&ApiError::TooLarge { limit }))
        }
        Ok(Err(e)) => Err(error_json(
            StatusCode::BAD_REQUEST,
            &format!("cannot read the request body: {e}"),
        )),
        Err(_) => Err(error_json(
            StatusCode::REQUEST_TIMEOUT,
            "the request body did not arrive in time",
        )),
    }
}

/// Installs `metrics-exporter-prometheus` as the process's recorder, with the query latency
/// buckets, and describes the metrics.
fn install_recorder() -> Result<PrometheusHandle, String> {
    let handle = prometheus_builder()
        .install_recorder()
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    report::describe();
    metrics::describe_gauge!(
        MODEL_LAYOUT_CONFLICT,
        "1 while the workers of the model disagree on its layout (it answers misses)"
    );
    metrics::describe_gauge!(
        MODEL_WORKERS,
        "the workers advertising the model's layout at the last poll"
    );
    metrics::describe_gauge!(
        layout_report::MODEL_READY,
        "1 while the model has a layout to answer with (given, or agreed by its workers)"
    );
    metrics::describe_gauge!(
        layout_report::WORKER_LAYOUT,
        "1 for the state of the worker's layout (advertised, no_layout, unusable, unreachable)"
    );
    Ok(handle)
}

/// The exporter's configuration: the buckets of the query latency histogram.
fn prometheus_builder() -> PrometheusBuilder {
    PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(QUERY_DURATION_SECONDS.into()),
            &QUERY_DURATION_BUCKETS,
        )
        .expect("the bucket list is not empty")
}

/// Exports the index's counters and health as they are now, through the `metrics` facade.
fn export_now(index: &QueryHandle, workers: &[String], polls: &LastPolls) {
    report::export_counters(&index.counters());
    report::export_health(index.health());
    report::export_running(index.is_running());
    report::export_memo(&index.memo_stats());
    let leader = index.read(|s| s.leader()).flatten();
    report::export_leader(leader.as_ref().and_then(|l| l.address.as_deref()));
    export_models(index);
    if let Some((workers, models)) = index.read(|s| layout_report::snapshot(s, workers, polls)) {
        layout_report::export(&workers, &models);
    }
}

/// The models whose layout the workers advertise: 1 while a model's workers disagree.
const MODEL_LAYOUT_CONFLICT: &str = "hicache_index_model_layout_conflict";

/// The workers advertising each model's layout now.
const MODEL_WORKERS: &str = "hicache_index_model_workers";

/// Exports, per model its workers advertise, whether its layout is in doubt and how many
/// workers vote for it.
fn export_models(index: &QueryHandle) {
    let models = index
        .read(|s| {
            let votes = s.layout_votes();
            votes
                .verdicts()
                .map(|(m, v)| {
                    let conflict = matches!(v, ModelVerdict::Conflict { .. });
                    (m.to_owned(), conflict, votes.voters(m))
                })
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    for (model, conflict, voters) in models {
        metrics::gauge!(MODEL_LAYOUT_CONFLICT, "model" => model.clone()).set(if conflict {
            1.0
        } else {
            0.0
        });
        metrics::gauge!(MODEL_WORKERS, "model" => model).set(voters as f64);
    }
}

/// `GET /metrics`: every core counter and gauge, the connection gauges, query latencies, all
/// rendered by the Prometheus exporter.
async fn metrics(State(app): State<Arc<App>>) -> Response {
    export_now(&app.index, &app.workers, &app.polls);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        app.prometheus.render(),
    )
        .into_response()
}

/// `GET /healthz`: the process answers.
async fn healthz() -> Response {
    json(StatusCode::OK, r#"{"status":"alive"}"#.to_owned())
}

/// `GET /readyz`: 200 only while the index is live.
async fn readyz(State(app): State<Arc<App>>) -> Response {
    let health = app.index.health();
    let status = if health == Health::Live {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut body = serde_json::json!({ "health": health.as_str() });
    if let Some(why) = app.index.read(|s| s.recovering()).flatten() {
        // Why the index is recovering (issue 26): fetching, retrying, unproven, no status...
        body["recovering"] = serde_json::Value::from(why.describe());
    }
    let (workers, models) = app
        .index
        .read(|s| layout_report::snapshot(s, &app.workers, &app.polls))
        .unwrap_or_default();
    if !models.is_empty() {
        body["models"] = layout_report::models_json(&models);
    }
    if !workers.is_empty() {
        body["workers"] = layout_report::workers_json(&workers);
    }
    if let Some(leader) = app.index.read(|s| s.leader()).flatten() {
        let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
        body["leader"] = serde_json::json!({
            "address": leader.address,
            "view_version": leader.version,
            "master_view_version": leader.master_view_version,
            "candidate": leader.candidate,
            "changes": leader.changes,
            "last_failover_ms": ms(leader.last_failover),
            "last_failover_after_serving_ms": ms(leader.last_failover_after_serving),
        });
    }
    json(status, body.to_string())
}

async fn not_found() -> Response {
    error_json(
        StatusCode::NOT_FOUND,
        "no such endpoint (POST /v1/query, GET /metrics, /healthz, /readyz)",
    )
}

async fn method_not_allowed() -> Response {
    error_json(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed (POST /v1/query, GET /metrics, /healthz, /readyz)",
    )
}

fn api_error(error: &ApiError) -> Response {
    let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::BAD_REQUEST);
    json(status, error.to_json())
}

fn error_json(status: StatusCode, message: &str) -> Response {
    json(status, serde_json::json!({ "error": message }).to_string())
}

fn json(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Checks that `url` is a ZeroMQ endpoint a SUB socket can connect to.
pub(crate) fn check_endpoint(url: &str) -> Result<(), String> {
    let bad = || format!("--events {url:?} is not tcp://HOST:PORT or ipc://PATH");
    if let Some(rest) = url.strip_prefix("tcp://") {
        let (host, port) = rest.rsplit_once(':').ok_or_else(bad)?;
        if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(bad());
        }
        return Ok(());
    }
    match url.strip_prefix("ipc://") {
        Some(path) if !path.is_empty() => Ok(()),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod metrics_tests {
    //! The Prometheus histogram's text (moved from the hand-written writer's test, with its
    //! assertions, onto the exporter's configuration).

    use super::*;

    #[test]
    fn prometheus_buckets_are_cumulative_and_end_with_the_count() {
        let recorder = prometheus_builder().build_recorder();
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
