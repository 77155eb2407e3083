//! SGLang workers as the source of each model's layout: a thread that polls every worker's
//! served model name and layout document and reports them to the subscriber.
//!
//! ```text
//! every interval, for each worker URL:
//!   GET {url}/v1/models                      -> {"data": [{"id": "<served model name>"}]}
//!   GET {url}/get_hicache_l3_cache_layout    -> one layout document per rank (a list), or one
//!   -> Control::report_worker(url, Some(WorkerInfo { model, layout, layout_problem }))
//!   a worker that does not answer /v1/models -> Control::report_worker(url, None): gone
//! ```
//! The rank documents are merged by [`LayoutDocument::merge_ranks`]; whether the workers of a
//! model agree, and which layout is in force, is the session's decision
//! ([`hicache_index::layout::LayoutVotes`]): this file only does IO and parsing.

use std::sync::mpsc;
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

/// Reads a `/get_hicache_l3_cache_layout` answer: a list of rank documents (or one document),
/// merged into the instance's layout. `Ok(None)`: the worker has no Mooncake L3 layout
/// (`"enabled": false` on every rank).
pub fn parse_layout_answer(body: &[u8], eagle: bool) -> Result<Option<Layout>, String> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("{LAYOUT_PATH} is not JSON: {e}"))?;
    let ranks = match value {
        serde_json::Value::Array(ranks) => ranks,
        one => vec![one],
    };
    let disabled =
        |r: &serde_json::Value| r.get("enabled") == Some(&serde_json::Value::Bool(false));
    let off = ranks.iter().filter(|r| disabled(r)).count();
    if off == ranks.len() {
        return Ok(None);
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
        .map(|l| Some(l.with_eagle(eagle)))
        .map_err(|e| format!("invalid layout: {e}"))
}

/// What one poll of a worker found: `None` when the worker did not answer its model list (it
/// is gone); otherwise its model and layout, or why the layout cannot be used. A worker
/// without the layout endpoint (404: an SGLang before it) advertises its model only.
pub fn worker_info(
    models: Result<Vec<u8>, HttpError>,
    layout: impl FnOnce() -> Result<Vec<u8>, HttpError>,
    eagle: bool,
) -> Option<WorkerInfo> {
    let model = match models.map(|body| parse_served_model(&body)) {
        Ok(Ok(model)) => model,
        Ok(Err(_)) | Err(_) => return None,
    };
    let (layout, layout_problem) = match layout() {
        Ok(body) => match parse_layout_answer(&body, eagle) {
            Ok(layout) => (layout, None),
            Err(why) => (None, Some(why)),
        },
        Err(HttpError::Status(404)) => (None, None),
        Err(e) => (None, Some(format!("GET {LAYOUT_PATH}: {e}"))),
    };
    Some(WorkerInfo {
        event_endpoint: None,
        model: Some(model),
        layout,
        layout_problem,
    })
}

/// Polls SGLang workers on a thread of its own until dropped.
#[derive(Debug)]
pub struct WorkerPoller {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
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
        let thread = std::thread::Builder::new()
            .name("hicache-workers".into())
            .spawn(move || loop {
                for (url, client) in &workers {
                    let info =
                        worker_info(client.get(MODELS_PATH), || client.get(LAYOUT_PATH), eagle);
                    if !control.report_worker(url, info) {
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
        })
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
        let layout = parse_layout_answer(both.as_bytes(), false)
            .unwrap()
            .unwrap();
        let suffixes: Vec<&str> = layout.suffixes().map(|(s, _)| s).collect();
        assert_eq!(suffixes, ["_0_0_k", "_0_0_v", "_0_1_k", "_0_1_v"]);
        let half = serde_json::json!([rank(0)]).to_string();
        let err = parse_layout_answer(half.as_bytes(), false).unwrap_err();
        assert!(err.contains("PP rank 1"), "{err}");
        let mut lone = rank(0);
        lone["hicache_object_layout"]["pp_size"] = 1.into();
        assert!(
            parse_layout_answer(lone.to_string().as_bytes(), true)
                .unwrap()
                .unwrap()
                .eagle
        );
    }

    #[test]
    fn a_worker_without_l3_advertises_no_layout() {
        assert_eq!(
            parse_layout_answer(br#"{"enabled": false}"#, false),
            Ok(None)
        );
        let mixed = serde_json::json!([{"enabled": false}, rank(0)]).to_string();
        assert!(parse_layout_answer(mixed.as_bytes(), false).is_err());
    }

    #[test]
    fn a_poll_reports_gone_model_only_or_a_problem() {
        let models = || Ok(br#"{"data":[{"id":"m"}]}"#.to_vec());
        assert_eq!(
            worker_info(Err(HttpError::Timeout), || unreachable!(), false),
            None
        );
        let old = worker_info(models(), || Err(HttpError::Status(404)), false).unwrap();
        assert_eq!(
            (old.model.as_deref(), &old.layout, &old.layout_problem),
            (Some("m"), &None, &None)
        );
        let slow = worker_info(models(), || Err(HttpError::Timeout), false).unwrap();
        assert!(slow.layout_problem.unwrap().contains("timed out"));
        let both = serde_json::json!([rank(0), rank(1)])
            .to_string()
            .into_bytes();
        let fine = worker_info(models(), || Ok(both), false).unwrap();
        assert!(fine.layout.is_some() && fine.layout_problem.is_none());
    }
}
