//! `serve`: the sidecar. Subscribes to a master's KV events and answers routers over HTTP
//! (`POST /v1/query`, `POST /v1/query_batch`, `GET /metrics`, `GET /healthz`, `GET /readyz`,
//! `GET /openapi.json`) and, when built with the `nng` feature, over an nng REP socket.
//!
//! Clients are served by hyper on tokio, over TCP or TLS: every connection is its own task,
//! request headers must arrive within `--client-timeout` and bodies within it too, bodies are
//! bounded, and at most `--max-connections` are open at once (past it an idle one is closed to
//! make room, else the new one gets a fast 503). With `--auth-token-file` the query routes need
//! a bearer token. Query latency is measured from the decoded body to the encoded answer, so a
//! slow client never shows in it. SIGTERM stops gracefully (see [`serve`]); SIGHUP is ignored.
//!
//! Settings come from the flags, `HICACHE_INDEX_<FLAG>` variables and a TOML file, in that order
//! ([`config`]).

mod app;
mod args;
mod config;
mod listen;
mod openapi;
mod plan;
mod routes;
mod signals;
mod telemetry;

pub(crate) use args::ServeArgs;
pub(crate) use config::configure;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::ArgMatches;
use hicache_index::Health;
use hicache_index_driver::report::{HTTP_REJECTED_TOTAL, QUERY_DURATION_SECONDS};
use hicache_index_driver::WorkerPoller;
use hicache_index_tokio::{QueryHandle, Subscriber};

use crate::layout_report;
use crate::outcome::{Failure, Outcome};

use self::app::App;
use self::args::LogFormat;
use self::plan::{plan, Plan};
use self::routes::router;
use self::signals::Signals;
use self::telemetry::STOPPING;

/// The optional features built in, comma-separated (`--version`, `build_info`).
pub(crate) fn features() -> String {
    let mut on = hicache_index_options::features();
    if cfg!(feature = "nng") {
        on.push("nng");
    }
    on.join(",")
}

/// Installs the log subscriber on stderr: `--log-level`, else `RUST_LOG`, else `info`.
fn init_logging(args: &ServeArgs) {
    let filter = match &args.log_level {
        Some(filter) => tracing_subscriber::EnvFilter::new(filter),
        None => tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let _ = match args.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Runs the service until SIGINT or SIGTERM (or, with `--check`, checks it and exits).
pub(crate) fn run(args: ServeArgs, matches: &ArgMatches) -> Outcome {
    let plan = plan(&args).map_err(Failure::Usage)?;
    let effective = config::effective(matches);
    if args.check {
        eprintln!("hicache-index: configuration ok: {effective}");
        return Ok(ExitCode::SUCCESS);
    }
    // Bound before the first log line: a failure is then the one line on stderr.
    let listener = std::net::TcpListener::bind(plan.listen)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    init_logging(&args);
    tracing::info!(
        target: "hicache_index_serve",
        version = env!("CARGO_PKG_VERSION"),
        features = %features(),
        configuration = %effective,
        "hicache-index {} starting", env!("CARGO_PKG_VERSION")
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(serve(args, plan, listener))
}

/// Serves until a signal. On SIGTERM (or SIGINT): `/readyz` answers 503 at once; new
/// connections are still accepted for half of `--shutdown-grace`; then the listener closes and
/// every connection finishes its request in flight and closes; the process exits 0 once none is
/// left, or when the grace ends. A second signal exits at once. SIGHUP is logged and ignored.
async fn serve(args: ServeArgs, plan: Plan, listener: std::net::TcpListener) -> Outcome {
    let mut signals = Signals::install();
    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let (prometheus, process) = telemetry::install(&features())?;
    let (index, task) = Subscriber::spawn(plan.config).map_err(|e| e.to_string())?;
    // Stopped (and joined) when this function returns.
    let _workers = args.index.spawn_workers(task.control())?;
    let app = Arc::new(App {
        index: index.clone(),
        limits: plan.limits,
        client_timeout: args.client_timeout,
        http_latency: metrics::histogram!(QUERY_DURATION_SECONDS, "transport" => "http"),
        rejected: metrics::counter!(HTTP_REJECTED_TOTAL),
        prometheus,
        workers: args.index.workers.clone(),
        polls: _workers
            .as_ref()
            .map(WorkerPoller::last_polls)
            .unwrap_or_default(),
        process,
        stopping: AtomicBool::new(false),
    });
    // What each worker and model is, logged the first time and on every change (aborted when
    // this function returns).
    let _layout_log = (!args.index.workers.is_empty()).then(|| {
        let period = (args.index.worker_poll_interval / 4)
            .clamp(Duration::from_millis(10), Duration::from_millis(500));
        AbortOnDrop(tokio::spawn(layout_report::log_changes(
            index.clone(),
            args.index.workers.clone(),
            app.polls.clone(),
            period,
        )))
    });
    // Closed when this function returns, after the subscriber stopped.
    let _nng = start_nng(&args, &app)?;
    let scheme = if plan.settings.tls.is_some() {
        "https"
    } else {
        "http"
    };
    tracing::info!(target: "hicache_index_serve", "http listening on {scheme}://{local}");
    if let Some(url) = &args.nng_listen {
        tracing::info!(target: "hicache_index_serve", "nng listening on {url}");
    }
    tracing::info!(
        target: "hicache_index_serve",
        "subscribing to {} (master http: {})",
        args.index.events,
        args.index.master_http
            .as_deref()
            .unwrap_or("none: loss only clears")
    );
    if let Some(locator) = &args.index.ha_locator {
        tracing::info!(target: "hicache_index_serve", "following the HA leader named in {locator}");
    }
    let router = router(app.clone());
    let conns = listen::Connections::new();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let accepting = tokio::spawn(listen::accept_loop(
        listener,
        router,
        plan.settings,
        conns.clone(),
        stop_rx,
    ));
    let outcome = tokio::select! {
        () = signals.stop() => Ok(ExitCode::SUCCESS),
        () = events_disabled(&index) => Err(Failure::Failed(
            hicache_index_options::EVENTS_DISABLED.to_owned(),
        )),
    };
    if outcome.is_ok() {
        let grace = args.shutdown_grace;
        let deadline = tokio::time::Instant::now() + grace;
        app.stopping.store(true, Ordering::Release);
        metrics::gauge!(STOPPING).set(1.0);
        tracing::info!(
            target: "hicache_index_serve",
            open = conns.len(),
            "stopping: /readyz answers 503; accepting for {:?} more, then finishing the \
             requests in flight (at most {grace:?} in all)",
            grace / 2
        );
        let drained = async {
            tokio::time::sleep(grace / 2).await;
            let _ = stop_tx.send(true);
            let _ = accepting.await;
            conns.drained(deadline).await
        };
        tokio::select! {
            left = drained => match left {
                0 => tracing::info!(target: "hicache_index_serve", "stopped: every request answered"),
                n => tracing::warn!(target: "hicache_index_serve", "stopped with {n} connections still open (--shutdown-grace ran out)"),
            },
            () = signals.stop() => {
                tracing::warn!(target: "hicache_index_serve", "a second signal: stopping at once");
            }
        }
    }
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

/// Returns once the master (or HA leader) said its publisher is off: an error of the
/// deployment, which `serve` reports and exits on rather than serve an empty index.
async fn events_disabled(index: &QueryHandle) {
    while index.health() != Health::EventsDisabled {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) use hicache_index_options::check_endpoint;

#[cfg(test)]
mod tests;
