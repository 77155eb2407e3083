//! `serve` for several models at once (issue 17), run for real: two layout files, and SGLang
//! workers played by small HTTP servers on 127.0.0.1, fed by the emulated master over ZeroMQ.
//!
//! The layout documents are SGLang's: `DSV4` is the document SGLang's own unit test of
//! `MooncakeStore.describe_l3_object_layout` expects (sgl-project/sglang
//! `test/.../hicache/test_hicache_l3_object_layout.py`,
//! `test_layout_reports_suffixes_prefix_and_hit_policy`); the MHA document has the same shape
//! with the KV pool of TP 2 (`_{r}_k`, `_{r}_v`, `mooncake_store.py`'s MHA suffixes), split per
//! PP rank as the endpoint answers it (one document per rank, `pp_rank`/`pp_size` set).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};

use hicache_index::layout::LayoutDocument;
use hicache_index::{Layout, Namespace};
use hicache_index_emulator::{Emulator, EmulatorConfig};
use hicache_index_testkit::process::{self, http, wait_for, Running};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_hicache-index");

/// SGLang's DeepSeek-V4 document (see the module docs), model `my-model` with tag `tag`.
const DSV4: &str = include_str!("../../core/tests/fixtures/sglang_dsv4_layout.json");

/// One PP rank's document of an MHA model served as `other` (TP 2, PP 2, page size 64).
fn mha_rank(pp_rank: u32) -> Value {
    let s = |r: u32, kv: &str| format!("_{r}_{pp_rank}_{kv}");
    json!({
        "backend": "mooncake",
        "page_size": 64,
        "hicache_object_layout": {
            "key_prefix": "other",
            "is_mla_backend": false,
            "pp_rank": pp_rank,
            "pp_size": 2,
            "pools": [{"pool": "kv", "suffixes": [s(0, "k"), s(0, "v"), s(1, "k"), s(1, "v")],
                       "hit_policy": "all_pages"}]
        }
    })
}

/// The MHA model's whole document (both ranks merged), as a file would hold it.
fn mha_document() -> String {
    let ranks: Vec<LayoutDocument> = [0, 1]
        .iter()
        .map(|&r| serde_json::from_value(mha_rank(r)).unwrap())
        .collect();
    serde_json::to_string(&LayoutDocument::merge_ranks(&ranks).unwrap()).unwrap()
}

fn layout_of(document: &str) -> Layout {
    let doc: LayoutDocument = serde_json::from_str(document).unwrap();
    Layout::from_document(&doc).unwrap()
}

/// `pages` pages of tokens, distinct per `seed`.
fn tokens(seed: u32, pages: u32) -> Vec<u32> {
    (0..pages * 64).map(|i| seed * 1_000_000 + i).collect()
}

/// Every object key of the pages of `tokens` under `layout`.
fn keys(layout: &Layout, tokens: &[u32]) -> Vec<String> {
    layout
        .page_hashes(tokens, Namespace::NONE)
        .flat_map(|h| layout.object_keys(&h).collect::<Vec<_>>())
        .collect()
}

/// A file in a directory of this test run, removed with it.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("hicache-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `serve` running (killed when dropped) and its HTTP address.
struct Serve {
    _service: Running,
    addr: SocketAddr,
}

impl Serve {
    fn start(emulator: &Emulator, extra: &[&str]) -> Serve {
        let (service, addr) = process::serve(BIN, emulator, extra);
        Serve {
            _service: service,
            addr,
        }
    }

    fn post(&self, body: &Value) -> (u16, Value) {
        let (status, text) = http(self.addr, "POST", "/v1/query", body.to_string().as_bytes());
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    fn ask(&self, body: &Value) -> Value {
        let (status, answer) = self.post(body);
        assert_eq!(status, 200, "{answer}");
        answer
    }

    fn readyz(&self) -> Value {
        serde_json::from_str(&http(self.addr, "GET", "/readyz", b"").1).unwrap()
    }
}

fn prefix(serve: &Serve, model: &str, tokens: &[u32]) -> u64 {
    serve.ask(&json!({ "tokens": tokens, "model": model }))["prefix_pages"]
        .as_u64()
        .expect("a prefix")
}

/// What a fake SGLang worker answers: its model list and layout bodies (no layout body: a 404,
/// as an SGLang without the endpoint); `None`: it is gone (connections are closed unanswered).
type WorkerState = Arc<Mutex<Option<(String, Option<String>)>>>;

/// An SGLang worker played on 127.0.0.1: `GET /v1/models` and `GET /get_hicache_l3_cache_layout`
/// answer what its state holds; anything else is a 404.
fn fake_worker(model: &str, layout: Option<String>) -> (String, WorkerState) {
    let models = json!({"object": "list", "data": [
        {"id": model, "object": "model", "owned_by": "sglang", "root": model, "max_model_len": 4096}
    ]})
    .to_string();
    let state: WorkerState = Arc::new(Mutex::new(Some((models, layout))));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shared = state.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.ends_with(b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let target = String::from_utf8_lossy(&head)
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_owned();
            let Some((models, layout)) = shared.lock().unwrap().clone() else {
                continue; // gone: the connection closes unanswered
            };
            let (status, body) = match (target.as_str(), layout) {
                ("/v1/models", _) => ("200 OK", models),
                ("/get_hicache_l3_cache_layout", Some(layout)) => ("200 OK", layout),
                _ => ("404 Not Found", String::from("{}")),
            };
            let _ = stream.write_all(
                format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        }
    });
    (url, state)
}

#[test]
fn two_layout_files_answer_each_models_pages_only_for_that_model() {
    let emulator = Emulator::start(EmulatorConfig::default()).expect("the emulator starts");
    let dir = TempDir::new("two-layouts");
    let dsv4 = dir.file("dsv4.json", DSV4);
    let mha = dir.file("mha.json", &mha_document());
    let serve = Serve::start(
        &emulator,
        &[
            "--layout",
            &format!("my-model={dsv4}"),
            "--layout",
            &format!("other={mha}"),
        ],
    );
    wait_for("ready", || serve.readyz()["health"] == "live");
    let (a, b) = (layout_of(DSV4), layout_of(&mha_document()));
    let (ta, tb) = (tokens(1, 3), tokens(2, 2));
    emulator.store(keys(&a, &ta));
    emulator.store(keys(&b, &tb));
    wait_for("my-model's pages", || prefix(&serve, "my-model", &ta) == 3);
    wait_for("other's pages", || prefix(&serve, "other", &tb) == 2);
    assert_eq!(
        prefix(&serve, "other", &ta),
        0,
        "my-model's pages are not other's"
    );
    assert_eq!(
        prefix(&serve, "my-model", &tb),
        0,
        "other's pages are not my-model's"
    );
    let models = json!(["my-model", "other"]);
    let (status, error) = serve.post(&json!({ "tokens": ta }));
    assert_eq!((status, &error["models"]), (400, &models), "{error}");
    let (status, error) = serve.post(&json!({ "tokens": ta, "model": "third" }));
    assert_eq!((status, &error["models"]), (400, &models), "{error}");
    assert!(
        error["error"].as_str().unwrap().contains("third"),
        "{error}"
    );
    let ready = serve.readyz();
    assert_eq!(ready["models"]["other"]["layout"], "configured", "{ready}");
}

#[test]
fn two_documents_for_one_model_are_a_startup_error() {
    let dir = TempDir::new("same-model");
    let one = dir.file("a.json", DSV4);
    let out = Command::new(BIN)
        .args([
            "serve",
            "--events",
            "tcp://127.0.0.1:9",
            "--listen",
            "127.0.0.1:0",
            "--layout",
            &format!("m={one}"),
            "--layout",
            &format!("m={one}"),
        ])
        .output()
        .expect("the binary runs");
    let err = String::from_utf8_lossy(&out.stderr);
    // A usage error: exit 2 (issue 29; it was 1).
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("two documents for model m"), "{err}");
}

#[test]
fn workers_teach_each_models_layout_and_a_disagreeing_worker_makes_its_model_miss() {
    let emulator = Emulator::start(EmulatorConfig::default()).expect("the emulator starts");
    // Two workers serve my-model, one serves other (answering per PP rank).
    let dsv4_ranks = format!("[{DSV4}]");
    let (a1, _a1_state) = fake_worker("my-model", Some(dsv4_ranks.clone()));
    let (a2, a2_state) = fake_worker("my-model", Some(dsv4_ranks.clone()));
    let (b, _b_state) = fake_worker("other", Some(json!([mha_rank(1), mha_rank(0)]).to_string()));
    let workers = format!("{a1},{a2},{b}");
    let serve = Serve::start(
        &emulator,
        &["--workers", &workers, "--worker-poll-interval", "100ms"],
    );
    wait_for("both models agreed", || {
        let r = serve.readyz();
        r["health"] == "live"
            && r["models"]["my-model"]["layout"] == "agreed"
            && r["models"]["my-model"]["workers"] == 2
            && r["models"]["other"]["layout"] == "agreed"
    });
    let (a, bl) = (layout_of(DSV4), layout_of(&mha_document()));
    let (ta, tb) = (tokens(3, 3), tokens(4, 2));
    emulator.store(keys(&a, &ta));
    emulator.store(keys(&bl, &tb));
    wait_for("my-model's pages", || prefix(&serve, "my-model", &ta) == 3);
    wait_for("other's pages", || prefix(&serve, "other", &tb) == 2);
    assert_eq!(prefix(&serve, "other", &ta), 0);
    assert_eq!(prefix(&serve, "my-model", &tb), 0);
    let (status, error) = serve.post(&json!({ "tokens": ta }));
    assert_eq!(
        (status, &error["models"]),
        (400, &json!(["my-model", "other"])),
        "{error}"
    );

    // a2 changes its layout (another trailing window: other hits, same keys): my-model is in
    // doubt, other is not.
    let changed = DSV4.replace(r#""trailing_pages": 2"#, r#""trailing_pages": 4"#);
    a2_state.lock().unwrap().as_mut().unwrap().1 = Some(format!("[{changed}]"));
    wait_for("my-model in doubt", || {
        serve.readyz()["models"]["my-model"]["layout"] == "conflict"
    });
    let doubt = serve.ask(&json!({ "tokens": ta, "model": "my-model" }));
    assert_eq!(doubt["prefix_pages"], 0, "{doubt}");
    assert_eq!(doubt["trust"], "layout_conflict", "{doubt}");
    assert!(doubt["reason"].as_str().unwrap().contains(&a2), "{doubt}");
    assert_eq!(prefix(&serve, "other", &tb), 2, "other is untouched");
    let reason = serve.readyz()["models"]["my-model"]["reason"].clone();
    assert!(reason.as_str().unwrap().contains(&a2), "{reason}");
    let (_, metrics) = http(serve.addr, "GET", "/metrics", b"");
    assert!(
        metrics.contains(r#"hicache_index_model_layout_conflict{model="my-model"} 1"#),
        "{metrics}"
    );

    // a2 agrees again: my-model hits again.
    a2_state.lock().unwrap().as_mut().unwrap().1 = Some(dsv4_ranks);
    wait_for("my-model agreed", || prefix(&serve, "my-model", &ta) == 3);

    // a2 is unreadable (half its PP ranks): in doubt; a2 goes away: consistent again.
    a2_state.lock().unwrap().as_mut().unwrap().1 = Some(json!([mha_rank(0)]).to_string());
    wait_for("my-model in doubt", || {
        serve.ask(&json!({ "tokens": ta, "model": "my-model" }))["trust"] == "layout_conflict"
    });
    *a2_state.lock().unwrap() = None;
    wait_for("a2 gone", || {
        serve.readyz()["models"]["my-model"]["workers"] == 1
    });
    wait_for("my-model agreed", || prefix(&serve, "my-model", &ta) == 3);
}

/// SGLang 0.5.23's answer for an MHA model (`describe_l3_object_layout` in `mooncake_store.py`:
/// every non-MLA model is disabled, with no pools), here Qwen/Qwen3-8B at TP 2.
const MHA_DISABLED: &str = r#"{"enabled": false, "backend": "mooncake", "page_size": 64,
  "hicache_object_layout": {"pools": [], "key_prefix": "Qwen-Qwen3-8B", "is_mla_backend": false,
                            "pp_rank": 0, "pp_size": 1},
  "reason": "External L3 lookup requires rank-replicated/MLA pools"}"#;

/// SGLang 0.5.23's answer for an MLA model (DeepSeek-V3, any TP): one replicated K object.
const MLA: &str = r#"{"enabled": true, "backend": "mooncake", "page_size": 64,
  "hicache_object_layout": {
    "pools": [{"pool": "kv", "suffixes": ["__k"], "hit_policy": "all_pages"}],
    "key_prefix": "deepseek-ai-DeepSeek-V3", "is_mla_backend": true, "pp_rank": 0, "pp_size": 1}}"#;

/// SGLang 0.5.23's answer for an MLA model at PP 2: its two stages' documents merged by
/// `merge_l3_layouts` (`hicache_storage.py`), every stage's pools in turn and `"pp_rank": null`.
const MLA_PP2_MERGED: &str = r#"{"enabled": true, "backend": "mooncake", "page_size": 64,
  "hicache_object_layout": {
    "pools": [{"pool": "kv", "suffixes": ["_0_k"], "hit_policy": "all_pages"},
              {"pool": "kv", "suffixes": ["_1_k"], "hit_policy": "all_pages"}],
    "key_prefix": "deepseek-ai-DeepSeek-V3-pp", "is_mla_backend": true, "pp_rank": null,
    "pp_size": 2}}"#;

/// SGLang 0.5.23's answer for DeepSeek-V4 (a logical KV anchor, so no `kv` pool), with the pools
/// of an fp8 launch: compressed pools and their rope halves on every page, SWA-fed states on the
/// last two.
const DSV4_POOLS: &str = r#"{"enabled": true, "backend": "mooncake", "page_size": 64,
  "hicache_object_layout": {
    "pools": [
      {"pool": "swa", "suffixes": ["__swa"], "hit_policy": "trailing_pages", "trailing_pages": 2},
      {"pool": "deepseek_v4_c4", "suffixes": ["__deepseek_v4_c4"], "hit_policy": "all_pages"},
      {"pool": "deepseek_v4_c4_rope", "suffixes": ["__deepseek_v4_c4_rope"],
       "hit_policy": "all_pages"},
      {"pool": "deepseek_v4_c128_rope", "suffixes": ["__deepseek_v4_c128_rope"],
       "hit_policy": "all_pages"},
      {"pool": "deepseek_v4_c4_state", "suffixes": ["__deepseek_v4_c4_state"],
       "hit_policy": "trailing_pages", "trailing_pages": 2}],
    "key_prefix": "deepseek-ai-DeepSeek-V4", "is_mla_backend": true, "pp_rank": 0, "pp_size": 1}}"#;

/// `serve` with its log (stderr) in a file: running until dropped.
struct LoggedServe {
    child: std::process::Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl LoggedServe {
    fn start(emulator: &Emulator, dir: &TempDir, extra: &[&str]) -> LoggedServe {
        let log = dir.0.join("serve.log");
        let (events, base) = (emulator.event_endpoint(), emulator.http_base());
        let child = Command::new(BIN)
            .args(["serve", "--events", &events, "--master-http", &base])
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the binary starts");
        // Every log line goes to stderr, the file: the one that says where HTTP listens.
        let mut addr = None;
        wait_for("the HTTP address in the log", || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            addr = text.lines().find_map(|l| {
                let after = l.split("http listening on http://").nth(1)?;
                let end = after
                    .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':'))
                    .unwrap_or(after.len());
                after[..end].parse().ok()
            });
            addr.is_some()
        });
        let addr = addr.expect("an address");
        LoggedServe { child, addr, log }
    }

    fn readyz(&self) -> (u16, Value) {
        let (status, text) = http(self.addr, "GET", "/readyz", b"");
        (status, serde_json::from_str(&text).unwrap())
    }

    fn ask(&self, model: &str, tokens: &[u32]) -> Value {
        let body = json!({ "tokens": tokens, "model": model }).to_string();
        let (status, text) = http(self.addr, "POST", "/v1/query", body.as_bytes());
        assert_eq!(status, 200, "{text}");
        serde_json::from_str(&text).unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for LoggedServe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn workers_playing_sglangs_documents_end_in_the_state_the_manual_describes_with_the_reason() {
    let emulator = Emulator::start(EmulatorConfig::default()).expect("the emulator starts");
    let dir = TempDir::new("sglang-documents");
    let (mha, _mha) = fake_worker("Qwen/Qwen3-8B", Some(MHA_DISABLED.into()));
    let (mla, _mla) = fake_worker("deepseek-ai/DeepSeek-V3", Some(MLA.into()));
    let (pp, _pp) = fake_worker("deepseek-ai/DeepSeek-V3-pp", Some(MLA_PP2_MERGED.into()));
    let (dsv4, _dsv4) = fake_worker("deepseek-ai/DeepSeek-V4", Some(DSV4_POOLS.into()));
    let (old, _old) = fake_worker("old-sglang", None);
    let workers = [&mha, &mla, &pp, &dsv4, &old].map(String::as_str).join(",");
    let serve = LoggedServe::start(
        &emulator,
        &dir,
        &["--workers", &workers, "--worker-poll-interval", "100ms"],
    );
    wait_for("every model reported", || {
        serve.readyz().1["models"].as_object().map(|m| m.len()) == Some(5)
    });
    let (status, ready) = serve.readyz();
    // The overall answer is the index's health, as without workers; each model says its own.
    wait_for("live", || serve.readyz().0 == 200);
    let models = &ready["models"];
    let expect = |model: &str, layout: &str, is_ready: bool| {
        let m = &models[model];
        assert_eq!(
            (m["layout"].as_str(), m["ready"].as_bool()),
            (Some(layout), Some(is_ready)),
            "{model}: {ready}"
        );
    };
    expect("Qwen/Qwen3-8B", "none", false);
    expect("old-sglang", "none", false);
    expect("deepseek-ai/DeepSeek-V3", "agreed", true);
    expect("deepseek-ai/DeepSeek-V3-pp", "agreed", true);
    expect("deepseek-ai/DeepSeek-V4", "agreed", true);
    let reason = |v: &Value| v["reason"].as_str().unwrap_or_default().to_owned();
    let mha_reason = reason(&models["Qwen/Qwen3-8B"]);
    assert!(
        mha_reason.contains("advertises no layout (MHA workers do not in SGLang 0.5.23)")
            && mha_reason.contains("give --layout MODEL=FILE or the layout flags")
            && mha_reason.contains(&mha),
        "{mha_reason}"
    );
    assert!(
        reason(&models["old-sglang"]).contains("404 on /get_hicache_l3_cache_layout"),
        "{ready}"
    );
    // Per worker: what it learned, or why not.
    let w = &ready["workers"];
    assert_eq!(w[&mha]["layout"], "no_layout", "{ready}");
    assert_eq!(w[&old]["layout"], "no_layout", "{ready}");
    assert_eq!(
        (w[&mla]["layout"].as_str(), w[&mla]["objects"].as_u64()),
        (Some("advertised"), Some(1)),
        "{ready}"
    );
    assert_eq!(w[&pp]["objects"], 2, "the merged stages' objects: {ready}");
    assert_eq!(
        w[&pp]["key_prefix"], "deepseek-ai-DeepSeek-V3-pp",
        "{ready}"
    );
    assert_eq!(w[&dsv4]["objects"], 5, "{ready}");
    let _ = status;

    // A model without a layout answers misses with the reason (it used to be 400 "unknown").
    let t = tokens(5, 2);
    let miss = serve.ask("Qwen/Qwen3-8B", &t);
    assert_eq!(
        (miss["trust"].as_str(), miss["prefix_pages"].as_u64()),
        (Some("no_layout"), Some(0)),
        "{miss}"
    );
    assert!(
        miss["reason"]
            .as_str()
            .unwrap()
            .contains("MHA workers do not"),
        "{miss}"
    );
    // The merged PP layout is the one in force: a page is a hit only with both stages' objects.
    let merged = layout_of(MLA_PP2_MERGED);
    emulator.store(keys(&merged, &t));
    wait_for("the PP model's pages", || {
        serve.ask("deepseek-ai/DeepSeek-V3-pp", &t)["prefix_pages"] == 2
    });
    let dsv4_layout = layout_of(DSV4_POOLS);
    let t4 = tokens(6, 3);
    emulator.store(keys(&dsv4_layout, &t4));
    wait_for("the DeepSeek-V4 model's pages", || {
        serve.ask("deepseek-ai/DeepSeek-V4", &t4)["prefix_pages"] == 3
    });

    let (_, metrics) = http(serve.addr, "GET", "/metrics", b"");
    for line in [
        r#"hicache_index_model_ready{model="Qwen/Qwen3-8B"} 0"#.to_owned(),
        r#"hicache_index_model_ready{model="deepseek-ai/DeepSeek-V3-pp"} 1"#.to_owned(),
        format!(r#"hicache_index_worker_layout{{worker="{mha}",state="no_layout"}} 1"#),
        format!(r#"hicache_index_worker_layout{{worker="{pp}",state="advertised"}} 1"#),
    ] {
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
    }
    // A line for each worker, the first time: WARN unless its layout is learned (and none for
    // a worker not polled yet).
    for (url, level, says) in [
        (&mha, "WARN", "MHA workers do not"),
        (&old, "WARN", "404"),
        (&pp, "INFO", "2 objects a page"),
    ] {
        let logged = |l: &str| l.contains(level) && l.contains(url.as_str()) && l.contains(says);
        wait_for(&format!("{url}: {says} logged"), || {
            serve.log().lines().any(logged)
        });
    }
    let model_line = |l: &str| l.contains("WARN") && l.contains("model Qwen/Qwen3-8B: layout none");
    assert!(serve.log().lines().any(model_line), "{}", serve.log());
    assert!(!serve.log().contains("not polled yet"), "{}", serve.log());
}

#[test]
fn a_layout_given_for_an_mha_model_is_used_while_its_workers_advertise_none() {
    let emulator = Emulator::start(EmulatorConfig::default()).expect("the emulator starts");
    let dir = TempDir::new("mha-given");
    let (mha, mha_state) = fake_worker("Qwen/Qwen3-8B", Some(MHA_DISABLED.into()));
    let serve = LoggedServe::start(
        &emulator,
        &dir,
        &[
            "--workers",
            &mha,
            "--worker-poll-interval",
            "100ms",
            "--page-size",
            "64",
            "--tp",
            "2",
            "--model",
            "Qwen/Qwen3-8B",
        ],
    );
    wait_for("the worker reported", || {
        serve.readyz().1["workers"][&mha]["layout"] == "no_layout"
    });
    let ready = serve.readyz().1;
    let model = &ready["models"]["Qwen/Qwen3-8B"];
    assert_eq!(
        (model["layout"].as_str(), model["ready"].as_bool()),
        (Some("configured"), Some(true)),
        "{ready}"
    );
    assert!(
        model["reason"]
            .as_str()
            .unwrap()
            .contains("the layout given for it is used"),
        "{ready}"
    );
    let worker = ready["workers"][&mha]["reason"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        worker.contains("MHA workers do not")
            && worker.contains("is used")
            && !worker.contains("give --layout"),
        "{worker}"
    );
    let layout = hicache_index::Layout::from_sglang(&{
        let mut p = hicache_index::SglangParams::new(64, 2);
        p.model = Some("Qwen/Qwen3-8B".into());
        p
    })
    .unwrap();
    let t = tokens(7, 2);
    emulator.store(keys(&layout, &t));
    wait_for("the given layout's pages", || {
        serve.ask("Qwen/Qwen3-8B", &t)["prefix_pages"] == 2
    });
    // The worker stops answering: reported as unreachable, and logged on the change.
    *mha_state.lock().unwrap() = None;
    wait_for("unreachable", || {
        serve.readyz().1["workers"][&mha]["layout"] == "unreachable"
    });
    wait_for("the change logged", || {
        serve
            .log()
            .lines()
            .any(|l| l.contains("WARN") && l.contains("unreachable"))
    });
    assert_eq!(
        serve.ask("Qwen/Qwen3-8B", &t)["prefix_pages"],
        2,
        "the given layout stays"
    );
}
