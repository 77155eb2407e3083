//! What `serve` knows of each worker's and each model's layout, and why not: the `workers` and
//! `models` of `/readyz`, the per-worker and per-model gauges of `/metrics`, and a log line the
//! first time a worker or a model is seen and on every change (WARN unless it is fine).
//!
//! ```text
//! worker   advertised   its layout takes part in its model's (or the layout given wins)
//!          no_layout    it advertises none (an MHA worker, a 404, "enabled": false + reason)
//!          unusable     what it advertises cannot be read (ranks disagree, a timeout, ...)
//!          unreachable  it does not answer GET /v1/models (it left its model's vote)
//!          pending      not polled yet (not logged)
//! model    configured   --layout or the flags give it: ready, whatever the workers say
//!          agreed       its workers advertise the same keys: ready
//!          conflict     they disagree or one cannot be read: not ready, misses
//!          none         none of them advertises a layout: not ready, misses
//! ```
//! `/readyz`'s status stays the index's health: a model without a layout is reported per model
//! (`"ready": false`) and the other models answer as before.

use std::collections::BTreeMap;
use std::time::Duration;

use hicache_index::layout::ModelVerdict;
use hicache_index::{Layout, Session};
use hicache_index_driver::workers::LastPolls;
use hicache_index_tokio::QueryHandle;

/// What to do about a model none of whose workers advertises a layout.
pub(crate) const GIVE_A_LAYOUT: &str = "give --layout MODEL=FILE or the layout flags";

/// The gauge of each worker's state: 1 for the state it is in, 0 for the others.
pub(crate) const WORKER_LAYOUT: &str = "hicache_index_worker_layout";

/// The gauge of each model's readiness: 1 while it has a layout to answer with.
pub(crate) const MODEL_READY: &str = "hicache_index_model_ready";

/// The states of [`WORKER_LAYOUT`].
const WORKER_STATES: [&str; 5] = [
    "advertised",
    "no_layout",
    "unusable",
    "unreachable",
    "pending",
];

/// What one worker of `--workers` gave at its last poll.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct WorkerReport {
    /// The worker's URL, as given.
    pub(crate) url: String,
    /// The model it serves.
    pub(crate) model: Option<String>,
    /// One of [`WORKER_STATES`].
    pub(crate) state: &'static str,
    /// What it learned (for `advertised`) or why not, for a person.
    pub(crate) reason: String,
    /// Whether what it advertises decides its model's layout (false when one is given for it).
    pub(crate) used: bool,
    /// The layout it advertises, if any.
    pub(crate) layout: Option<Layout>,
}

/// What one model's layout is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ModelReport {
    /// The model's name.
    pub(crate) model: String,
    /// `configured`, `agreed`, `conflict` or `none`.
    pub(crate) layout: &'static str,
    /// Whether it has a layout to answer with.
    pub(crate) ready: bool,
    /// How many workers serve it now.
    pub(crate) workers: usize,
    /// Why it is not ready, or what to know although it is (a given layout beside workers that
    /// advertise none).
    pub(crate) reason: Option<String>,
}

/// Reads what `session` knows of the workers named by `urls` (with what their last poll found,
/// `polls`) and of every model.
pub(crate) fn snapshot(
    session: &Session,
    urls: &[String],
    polls: &LastPolls,
) -> (Vec<WorkerReport>, Vec<ModelReport>) {
    let session_models = session.models();
    let configured = |model: &str| {
        session_models
            .configured()
            .iter()
            .find(|ml| ml.model.as_deref() == Some(model))
            .map(|ml| &ml.layout)
    };
    let known: BTreeMap<&str, &hicache_index::WorkerInfo> = session_models.workers().collect();
    let workers: Vec<WorkerReport> = urls
        .iter()
        .map(|url| {
            let Some(info) = known.get(url.as_str()) else {
                let (state, reason) = match polls.get(url) {
                    Some(Some(why)) => ("unreachable", why),
                    // Not polled yet, or its answer is on its way to the session.
                    _ => ("pending", "not polled yet".to_owned()),
                };
                return WorkerReport {
                    url: url.clone(),
                    model: None,
                    state,
                    reason,
                    used: false,
                    layout: None,
                };
            };
            let given = info.model.as_deref().and_then(configured);
            let (state, why) = match (&info.layout, &info.layout_problem) {
                (_, Some(problem)) => ("unusable", problem.clone()),
                (Some(layout), None) => ("advertised", describe(layout)),
                (None, None) => (
                    "no_layout",
                    info.no_layout
                        .clone()
                        .unwrap_or_else(|| "advertises no layout".into()),
                ),
            };
            let reason = match (given, &info.layout) {
                (Some(g), Some(l)) if !l.same_keys(g) => {
                    format!("{why}; other keys than the layout given for its model, which is used")
                }
                (Some(_), _) => format!("{why}; the layout given for its model is used"),
                (None, _) if state == "no_layout" => format!("{why}: {GIVE_A_LAYOUT}"),
                (None, _) => why,
            };
            WorkerReport {
                url: url.clone(),
                model: info.model.clone(),
                state,
                reason,
                used: given.is_none() && info.model.is_some(),
                layout: info.layout.clone(),
            }
        })
        .collect();

    let serving = |model: &str| {
        known
            .values()
            .filter(|info| info.model.as_deref() == Some(model))
            .count()
    };
    let mut models: BTreeMap<String, ModelReport> = BTreeMap::new();
    for name in session_models
        .configured()
        .iter()
        .filter_map(|ml| ml.model.clone())
    {
        let mine: Vec<&WorkerReport> = workers
            .iter()
            .filter(|w| w.model.as_deref() == Some(name.as_str()))
            .collect();
        let reason = (!mine.is_empty() && mine.iter().all(|w| w.state == "no_layout"))
            .then(|| "its workers advertise no layout; the layout given for it is used".to_owned());
        models.insert(
            name.clone(),
            ModelReport {
                workers: serving(&name),
                model: name,
                layout: "configured",
                ready: true,
                reason,
            },
        );
    }
    let votes = session_models.votes();
    for (model, verdict) in votes.verdicts() {
        if models.contains_key(model) {
            continue;
        }
        let (layout, ready, reason) = match verdict {
            ModelVerdict::Agreed(_) => ("agreed", true, None),
            ModelVerdict::Conflict { reason } => ("conflict", false, Some(reason.clone())),
            ModelVerdict::NoLayout { reason } => {
                ("none", false, Some(format!("{reason}: {GIVE_A_LAYOUT}")))
            }
        };
        models.insert(
            model.to_owned(),
            ModelReport {
                model: model.to_owned(),
                layout,
                ready,
                workers: votes.voters(model),
                reason,
            },
        );
    }
    (workers, models.into_values().collect())
}

/// Says what a layout is in a few words: its objects a page, key prefix and page size.
fn describe(layout: &Layout) -> String {
    let prefix = match &layout.key_prefix {
        Some(p) => format!("key prefix {p:?}"),
        None => "no key prefix".to_owned(),
    };
    format!(
        "{} objects a page, {prefix}, {} tokens a page",
        layout.object_count(),
        layout.page_size
    )
}

/// The `workers` of `/readyz`: each worker's URL with its model, state and reason (and, for a
/// worker that advertises a layout, its objects a page and key prefix).
pub(crate) fn workers_json(workers: &[WorkerReport]) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for w in workers {
        let mut entry = serde_json::json!({
            "layout": w.state, "reason": w.reason, "used": w.used,
        });
        if let Some(model) = &w.model {
            entry["model"] = model.clone().into();
        }
        if let Some(layout) = &w.layout {
            entry["objects"] = layout.object_count().into();
            entry["key_prefix"] = layout.key_prefix.clone().into();
            entry["page_size"] = layout.page_size.into();
        }
        out.insert(w.url.clone(), entry);
    }
    serde_json::Value::Object(out)
}

/// The `models` of `/readyz`: each model's layout state, readiness, workers and reason.
pub(crate) fn models_json(models: &[ModelReport]) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for m in models {
        let mut entry = serde_json::json!({ "layout": m.layout, "ready": m.ready });
        if m.layout != "configured" || m.workers > 0 {
            entry["workers"] = m.workers.into();
        }
        if let Some(reason) = &m.reason {
            entry["reason"] = reason.clone().into();
        }
        out.insert(m.model.clone(), entry);
    }
    serde_json::Value::Object(out)
}

/// Exports [`WORKER_LAYOUT`] and [`MODEL_READY`].
pub(crate) fn export(workers: &[WorkerReport], models: &[ModelReport]) {
    for w in workers {
        for state in WORKER_STATES {
            metrics::gauge!(WORKER_LAYOUT, "worker" => w.url.clone(), "state" => state)
                .set(f64::from(u8::from(state == w.state)));
        }
    }
    for m in models {
        metrics::gauge!(MODEL_READY, "model" => m.model.clone()).set(f64::from(u8::from(m.ready)));
    }
}

/// The line logged for a worker and for a model, which is logged again when it changes, and
/// whether it is fine (a worker whose layout is learned, a ready model).
fn lines(workers: &[WorkerReport], models: &[ModelReport]) -> BTreeMap<String, (String, bool)> {
    let mut out = BTreeMap::new();
    for w in workers.iter().filter(|w| w.state != "pending") {
        let model = w
            .model
            .as_deref()
            .map(|m| format!(" (model {m})"))
            .unwrap_or_default();
        out.insert(
            format!("worker {}", w.url),
            (
                format!("worker {}{model}: {}: {}", w.url, w.state, w.reason),
                // Learned, or nothing learned beside the layout given for its model.
                w.state == "advertised" || (w.state == "no_layout" && !w.used),
            ),
        );
    }
    for m in models {
        let ready = if m.ready { "ready" } else { "not ready" };
        let reason = m
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        out.insert(
            format!("model {}", m.model),
            (
                format!("model {}: layout {}, {ready}{reason}", m.model, m.layout),
                m.ready,
            ),
        );
    }
    out
}

/// Logs what each worker and model is, the first time and on every change (at WARN, or at INFO
/// for a worker whose layout is learned and a ready model), reading the session every `period`
/// until the task is dropped. `period` SHOULD be under half the worker
/// poll interval: a worker's state lasts at least one interval, so no change is missed.
pub(crate) async fn log_changes(
    index: QueryHandle,
    urls: Vec<String>,
    polls: LastPolls,
    period: Duration,
) {
    let mut said: BTreeMap<String, (String, bool)> = BTreeMap::new();
    loop {
        if let Some((workers, models)) = index.read(|s| snapshot(s, &urls, &polls)) {
            for (key, (line, fine)) in lines(&workers, &models) {
                if said.get(&key).map(|(l, _)| l) == Some(&line) {
                    continue;
                }
                if fine {
                    tracing::info!(target: "hicache_index_serve", "{line}");
                } else {
                    tracing::warn!(target: "hicache_index_serve", "{line}");
                }
                said.insert(key, (line, fine));
            }
        }
        tokio::time::sleep(period).await;
    }
}
