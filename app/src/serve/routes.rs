//! The HTTP routes: the query handlers, `/metrics`, `/healthz`, `/readyz`, `/openapi.json`, their
//! answers, and the index's state exported at each scrape.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use hicache_index::layout::ModelVerdict;
use hicache_index::Health;
use hicache_index_api::{respond_batch_json, respond_json, ApiError, Limits};
use hicache_index_driver::report;
use hicache_index_driver::workers::LastPolls;
use hicache_index_tokio::QueryHandle;
use http_body_util::{BodyExt, Limited};

use crate::layout_report;

use super::app::App;
use super::openapi;
use super::telemetry::{self, MODEL_LAYOUT_CONFLICT, MODEL_WORKERS};

pub(super) fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/query", post(query))
        .route("/v1/query_batch", post(query_batch))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/openapi.json", get(openapi_json))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(app)
}

/// `POST /v1/query`: the JSON query of `hicache_index_api`.
async fn query(State(app): State<Arc<App>>, body: Body) -> Response {
    answer(&app, body, respond_json).await
}

/// `POST /v1/query_batch`: several queries in one body (`{"queries": [...]}`).
async fn query_batch(State(app): State<Arc<App>>, body: Body) -> Response {
    answer(&app, body, respond_batch_json).await
}

/// Reads a body and answers it with `respond` (timed from the read body to the encoded answer).
async fn answer(
    app: &App,
    body: Body,
    respond: fn(&QueryHandle, &[u8], &Limits) -> (u16, String),
) -> Response {
    let body = match read_body(body, app).await {
        Ok(body) => body,
        Err(response) => {
            app.rejected.increment(1);
            return response;
        }
    };
    let start = Instant::now();
    let (status, text) = respond(&app.index, &body, &app.limits);
    if status != 200 {
        app.rejected.increment(1);
    }
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    let response = json(status, text);
    app.http_latency.record(start.elapsed());
    response
}

/// `GET /openapi.json`: the API document.
async fn openapi_json() -> Response {
    json(StatusCode::OK, openapi::document())
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

/// Exports the index's counters and health as they are now, through the `metrics` facade.
fn export_now(index: &QueryHandle, workers: &[String], polls: &LastPolls) {
    report::export_counters(&index.counters());
    report::export_health(index.health());
    report::export_running(index.is_running());
    report::export_memo(&index.memo_stats());
    let leader = index.status().and_then(|s| s.leader);
    report::export_leader(leader.as_ref().and_then(|l| l.address.as_deref()));
    export_models(index);
    if let Some((workers, models)) = index.read(|s| layout_report::snapshot(s, workers, polls)) {
        layout_report::export(&workers, &models);
    }
}

/// Exports, per model its workers advertise, whether its layout is in doubt and how many
/// workers vote for it.
fn export_models(index: &QueryHandle) {
    let models = index
        .read(|s| {
            let votes = s.models().votes();
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
        telemetry::render(&app.prometheus, &app.process),
    )
        .into_response()
}

/// `GET /healthz`: the process answers.
async fn healthz() -> Response {
    json(StatusCode::OK, r#"{"status":"alive"}"#.to_owned())
}

/// `GET /readyz`: 200 only while the index is live and the service is not stopping (503 while
/// `reconciling` too: answers are served, but a hit may be an object the master just dropped).
async fn readyz(State(app): State<Arc<App>>) -> Response {
    let health = app.index.health();
    let stopping = app.stopping.load(Ordering::Acquire);
    let status = if health == Health::Live && !stopping {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let shown = if stopping {
        "stopping"
    } else {
        health.as_str()
    };
    let mut body = serde_json::json!({ "health": shown });
    let session = app.index.status();
    if let Some(why) = session.as_ref().and_then(|s| s.recovering) {
        // Why the index is recovering (issue 26): fetching, retrying, unproven, no status...
        body["recovering"] = serde_json::Value::from(why.describe());
    }
    let counters = session.as_ref().map(|s| s.counters);
    if let Some(c) = counters.filter(|c| c.store_changes > 0 || c.reconciles_started > 0) {
        // Once the master's store signals moved: how long the index's content has gone without
        // the master's confirmation, what the signals asked for and what the reconciles changed
        // (issue 27; every figure is in /metrics too).
        body["store"] = serde_json::json!({
            "unconfirmed_seconds": c.unconfirmed_ms as f64 / 1e3,
            "changes_seen": c.store_changes,
            "reconciles_started": c.reconciles_started,
            "reconciles_completed": c.reconciles_completed,
            "reconciled_removed": c.reconciled_removed,
            "reconciled_restored": c.reconciled_restored,
        });
    }
    let failures = app.index.failures();
    if !failures.is_empty() {
        body["reason"] = format!("{shown}: {}", failures.join("; ")).into();
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
    if let Some(leader) = session.and_then(|s| s.leader) {
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
        "no such endpoint (POST /v1/query, /v1/query_batch; GET /metrics, /healthz, /readyz, /openapi.json)",
    )
}

async fn method_not_allowed() -> Response {
    error_json(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed (POST /v1/query, /v1/query_batch; GET /metrics, /healthz, /readyz, /openapi.json)",
    )
}

fn api_error(error: &ApiError) -> Response {
    let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::BAD_REQUEST);
    json(status, error.to_json())
}

/// A JSON error body `{"error": message}` with `status`.
pub(super) fn error_json(status: StatusCode, message: &str) -> Response {
    json(status, serde_json::json!({ "error": message }).to_string())
}

fn json(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
