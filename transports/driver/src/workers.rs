//! SGLang workers as the source of each model's layout: a thread that polls every worker's
//! served model name and layout document and reports them to the subscriber.
//!
//! ```text
//! every interval, for each worker URL:
//!   GET {url}/v1/models                      -> {"data": [{"id": "<served model name>"}]}
//!   GET {url}/get_hicache_l3_cache_layout    -> one layout document per rank (a list), or one
//!   -> Control::report_worker(url, Some(WorkerInfo { model, layout, layout_problem, no_layout }))
//!   a worker that does not answer /v1/models -> Control::report_worker(url, None): gone
//!   what each poll found                    -> LastPolls (why a worker is gone, for a person)
//! ```
//! The rank documents are merged by [`LayoutDocument::merge_ranks`]; whether the workers of a
//! model agree, and which layout is in force, is the session's decision
//! ([`hicache_index::layout::LayoutVotes`]): this file only does IO and parsing.

use std::collections::BTreeMap;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use hicache_index::layout::LayoutDocument;
use hicache_index::{Layout, WorkerInfo};

use crate::config::{Error, HttpConfig};
use crate::handle::Control;
use crate::http::{HttpError, MasterHttp};

/// SGLang's OpenAI-compatible model list: its served model name (`data[0].id`).
pub const MODELS_PATH: &str = "/v1/models";

/// SGLang's description of its Mooncake object layout.
pub const LAYOUT_PATH: &str = "/get_hicache_l3_cache_layout";

/// Reads the served model name from a `/v1/models` answer (`{"data": [{"id": ...}]}`).
pub fn parse_served_model(body: &[u8]) -> Result<String, String> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("{MODELS_PATH} is not JSON: {e}"))?;
    value
        .get("data")
        .and_then(|d| d.get(0))
        .and_then(|m| m.get("id"))
        .and_then(serde_json::Value::as_str)
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| format!("{MODELS_PATH} names no model (data[0].id)"))
}

/// What a worker's `/get_hicache_l3_cache_layout` answer says it writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayoutAnswer {
    /// The layout of the instance (its ranks' documents merged).
    Layout(Layout),
    /// It advertises no layout, and why (for a person): SGLang 0.5.23's MHA workers never do,
    /// and other launches say `"enabled": false` with a reason.
    NoLayout(String),
}

/// Why an MHA worker of SGLang 0.5.23 advertises no layout (its `describe_l3_object_layout`
/// answers `"enabled": false` for every model that is not MLA).
pub const MHA_NO_LAYOUT: &str = "advertises no layout (MHA workers do not in SGLang 0.5.23)";

/// Why a worker without the layout endpoint advertises none.
pub const NO_LAYOUT_ENDPOINT: &str = "404 on /get_hicache_l3_cache_layout";

/// Reads a `/get_hicache_l3_cache_layout` answer: one document (SGLang 0.5.23 answers one, merged
/// over its PP stages) or a list of rank documents, merged into the instance's layout. Every
/// rank disabled (`"enabled": false`) is no layout, with SGLang's reason ([`MHA_NO_LAYOUT`] for
/// an MHA worker); some ranks disabled and others not is an error.
pub fn parse_layout_answer(body: &[u8], eagle: bool) -> Result<LayoutAnswer, String> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("{LAYOUT_PATH} is not JSON: {e}"))?;
    let ranks = match value {
        serde_json::Value::Array(ranks) => ranks,
        one => vec![one],
    };
    let disabled =
        |r: &serde_json::Value| r.get("enabled") == Some(&serde_json::Value::Bool(false));
    let off = ranks.iter().filter(|r| disabled(r)).count();
    if off > 0 && off == ranks.len() {
        return Ok(LayoutAnswer::NoLayout(why_disabled(&ranks[0])));
    }
    if off > 0 {
        return Err(format!("{off} of {} ranks have no L3 layout", ranks.len()));
    }
    let documents = ranks
        .into_iter()
        .map(serde_json::from_value::<LayoutDocument>)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("a rank's layout document cannot be read: {e}"))?;
    let merged = LayoutDocument::merge_ranks(&documents)?;
    Layout::from_document(&merged)
        .map(|l| LayoutAnswer::Layout(l.with_eagle(eagle)))
        .map_err(|e| format!("invalid layout: {e}"))
}

/// Says why a disabled document advertises no layout: [`MHA_NO_LAYOUT`] for an MHA worker's,
/// else `disabled: <SGLang's reason>`.
fn why_disabled(document: &serde_json::Value) -> String {
    let mla = document
        .get("hicache_object_layout")
        .and_then(|l| l.get("is_mla_backend"))
        .and_then(serde_json::Value::as_bool);
    let reason = document.get("reason").and_then(serde_json::Value::as_str);
    match (mla, reason) {
        (Some(false), _) => MHA_NO_LAYOUT.to_owned(),
        (_, Some(reason)) => format!("disabled: {reason}"),
        (_, None) => "disabled (no reason given)".to_owned(),
    }
}

/// What one poll of a worker found: `None` when the worker did not answer its model list (it
/// is gone); otherwise its model and layout, why the layout cannot be used, or why it
/// advertises none (a worker without the layout endpoint, 404: [`NO_LAYOUT_ENDPOINT`]).
pub fn worker_info(
    models: Result<Vec<u8>, HttpError>,
    layout: impl FnOnce() -> Result<Vec<u8>, HttpError>,
    eagle: bool,
) -> Result<WorkerInfo, String> {
    let model = match models.map(|body| parse_served_model(&body)) {
        Ok(Ok(model)) => model,
        Ok(Err(why)) => return Err(why),
        Err(e) => return Err(format!("GET {MODELS_PATH}: {e}")),
    };
    let (layout, layout_problem, no_layout) = match layout() {
        Ok(body) => match parse_layout_answer(&body, eagle) {
            Ok(LayoutAnswer::Layout(layout)) => (Some(layout), None, None),
            Ok(LayoutAnswer::NoLayout(why)) => (None, None, Some(why)),
            Err(why) => (None, Some(why), None),
        },
        Err(HttpError::Status(404)) => (None, None, Some(NO_LAYOUT_ENDPOINT.to_owned())),
        Err(e) => (None, Some(format!("GET {LAYOUT_PATH}: {e}")), None),
    };
    Ok(WorkerInfo {
        event_endpoint: None,
        model: Some(model),
        layout,
        layout_problem,
        no_layout,
    })
}

/// What the last poll of each worker found, shared with whoever reports on the workers: for
/// each URL polled so far, `None` when it answered its model list, or why it did not.
#[derive(Clone, Debug, Default)]
pub struct LastPolls(Arc<Mutex<BTreeMap<String, Option<String>>>>);

impl LastPolls {
    /// Returns why `url` did not answer its model list at its last poll (`Some(None)`: it did;
    /// `None`: it was not polled yet).
    pub fn get(&self, url: &str) -> Option<Option<String>> {
        self.0.lock().ok()?.get(url).cloned()
    }

    fn set(&self, url: &str, outcome: Option<String>) {
        if let Ok(mut polls) = self.0.lock() {
            polls.insert(url.to_owned(), outcome);
        }
    }
}

/// Polls SGLang workers on a thread of its own until dropped.
#[derive(Debug)]
pub struct WorkerPoller {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    last: LastPolls,
}

impl WorkerPoller {
    /// Starts polling `urls` (`http://host:port`) every `interval`, each request within
    /// `http.request_timeout`, reporting to `control`; `eagle` is the EAGLE mode of the layouts
    /// (documents do not carry it). The first round runs at once.
    pub fn spawn(
        urls: &[String],
        interval: Duration,
        http: HttpConfig,
        eagle: bool,
        control: Control,
    ) -> Result<WorkerPoller, Error> {
        let workers = urls
            .iter()
            .map(|url| {
                let client = MasterHttp::new(url, http).map_err(|_| {
                    Error::Workers(format!(
                        "worker URL {url:?} is not http://host[:port][/path]"
                    ))
                })?;
                Ok((url.clone(), client))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let (stop, stopped) = mpsc::channel::<()>();
        let last = LastPolls::default();
        let polls = last.clone();
        let thread = std::thread::Builder::new()
            .name("hicache-workers".into())
            .spawn(move || loop {
                for (url, client) in &workers {
                    let info =
                        worker_info(client.get(MODELS_PATH), || client.get(LAYOUT_PATH), eagle);
                    polls.set(url, info.as_ref().err().cloned());
                    if !control.report_worker(url, info.ok()) {
                        return;
                    }
                }
                match stopped.recv_timeout(interval) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
            })
            .map_err(|e| Error::Workers(e.to_string()))?;
        Ok(WorkerPoller {
            stop: Some(stop),
            thread: Some(thread),
            last,
        })
    }

    /// Returns what the last poll of each worker found (a handle that follows the polls).
    pub fn last_polls(&self) -> LastPolls {
        self.last.clone()
    }
}

impl Drop for WorkerPoller {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rank document as SGLang's `describe_l3_object_layout` writes it (its unit test
    /// `test_layout_suffixes_embed_the_pp_rank`, with the MHA KV pool of TP 1 added).
    fn rank(pp_rank: u32) -> serde_json::Value {
        serde_json::json!({
            "backend": "mooncake",
            "page_size": 4,
            "hicache_object_layout": {
                "key_prefix": "m", "is_mla_backend": false, "pp_rank": pp_rank, "pp_size": 2,
                "pools": [{"pool": "kv", "suffixes": [format!("_0_{pp_rank}_k"), format!("_0_{pp_rank}_v")],
                           "hit_policy": "all_pages"}]
            }
        })
    }

    #[test]
    fn the_served_model_name_is_the_first_id_of_v1_models() {
        let body = br#"{"object":"list","data":[{"id":"Qwen/Qwen3-8B","object":"model","root":"Qwen/Qwen3-8B","max_model_len":32768}]}"#;
        assert_eq!(parse_served_model(body).unwrap(), "Qwen/Qwen3-8B");
        assert!(parse_served_model(br#"{"data":[]}"#).is_err());
        assert!(parse_served_model(b"<html>").is_err());
    }

    #[test]
    fn a_list_of_rank_documents_is_merged_and_a_lone_document_read() {
        let both = serde_json::json!([rank(1), rank(0)]).to_string();
        let LayoutAnswer::Layout(layout) = parse_layout_answer(both.as_bytes(), false).unwrap()
        else {
            panic!("a layout")
        };
        let suffixes: Vec<&str> = layout.suffixes().map(|(s, _)| s).collect();
        assert_eq!(suffixes, ["_0_0_k", "_0_0_v", "_0_1_k", "_0_1_v"]);
        let half = serde_json::json!([rank(0)]).to_string();
        let err = parse_layout_answer(half.as_bytes(), false).unwrap_err();
        assert!(err.contains("PP rank 1"), "{err}");
        let mut lone = rank(0);
        lone["hicache_object_layout"]["pp_size"] = 1.into();
        assert!(matches!(
            parse_layout_answer(lone.to_string().as_bytes(), true),
            Ok(LayoutAnswer::Layout(l)) if l.eagle
        ));
    }

    #[test]
    fn a_worker_without_l3_advertises_no_layout_and_says_why() {
        assert_eq!(
            parse_layout_answer(br#"{"enabled": false}"#, false),
            Ok(LayoutAnswer::NoLayout("disabled (no reason given)".into()))
        );
        // SGLang 0.5.23's MHA answer (describe_l3_object_layout, mooncake_store.py).
        let mha = br#"{"enabled": false, "backend": "mooncake", "page_size": 64,
            "hicache_object_layout": {"pools": [], "key_prefix": "m", "is_mla_backend": false,
                                      "pp_rank": 0, "pp_size": 1},
            "reason": "External L3 lookup requires rank-replicated/MLA pools"}"#;
        assert_eq!(
            parse_layout_answer(mha, false),
            Ok(LayoutAnswer::NoLayout(MHA_NO_LAYOUT.into()))
        );
        let other = br#"{"enabled": false, "page_size": null, "backend": null,
            "hicache_object_layout": {"pools": []}, "reason": "Hierarchical cache is disabled"}"#;
        assert_eq!(
            parse_layout_answer(other, false),
            Ok(LayoutAnswer::NoLayout(
                "disabled: Hierarchical cache is disabled".into()
            ))
        );
        let mixed = serde_json::json!([{"enabled": false}, rank(0)]).to_string();
        assert!(parse_layout_answer(mixed.as_bytes(), false).is_err());
    }

    #[test]
    fn a_poll_reports_gone_model_only_or_a_problem() {
        let models = || Ok(br#"{"data":[{"id":"m"}]}"#.to_vec());
        let gone = worker_info(Err(HttpError::Timeout), || unreachable!(), false).unwrap_err();
        assert!(
            gone.contains("/v1/models") && gone.contains("timed out"),
            "{gone}"
        );
        let old = worker_info(models(), || Err(HttpError::Status(404)), false).unwrap();
        assert_eq!(
            (old.model.as_deref(), &old.layout, &old.layout_problem),
            (Some("m"), &None, &None)
        );
        assert_eq!(old.no_layout.as_deref(), Some(NO_LAYOUT_ENDPOINT));
        let slow = worker_info(models(), || Err(HttpError::Timeout), false).unwrap();
        assert!(slow.layout_problem.unwrap().contains("timed out"));
        let both = serde_json::json!([rank(0), rank(1)])
            .to_string()
            .into_bytes();
        let fine = worker_info(models(), || Ok(both), false).unwrap();
        assert!(fine.layout.is_some() && fine.layout_problem.is_none());
    }
}
