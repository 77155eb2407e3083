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

/// What a fake SGLang worker answers: its model list and layout bodies; `None`: it is gone
/// (connections are closed unanswered).
type WorkerState = Arc<Mutex<Option<(String, String)>>>;

/// An SGLang worker played on 127.0.0.1: `GET /v1/models` and `GET /get_hicache_l3_cache_layout`
/// answer what its state holds; anything else is a 404.
fn fake_worker(model: &str, layout: String) -> (String, WorkerState) {
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
            let (status, body) = match target.as_str() {
                "/v1/models" => ("200 OK", models),
                "/get_hicache_l3_cache_layout" => ("200 OK", layout),
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
    let (a1, _a1_state) = fake_worker("my-model", dsv4_ranks.clone());
    let (a2, a2_state) = fake_worker("my-model", dsv4_ranks.clone());
    let (b, _b_state) = fake_worker("other", json!([mha_rank(1), mha_rank(0)]).to_string());
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
    a2_state.lock().unwrap().as_mut().unwrap().1 = format!("[{changed}]");
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
    a2_state.lock().unwrap().as_mut().unwrap().1 = dsv4_ranks;
    wait_for("my-model agreed", || prefix(&serve, "my-model", &ta) == 3);

    // a2 is unreadable (half its PP ranks): in doubt; a2 goes away: consistent again.
    a2_state.lock().unwrap().as_mut().unwrap().1 = json!([mha_rank(0)]).to_string();
    wait_for("my-model in doubt", || {
        serve.ask(&json!({ "tokens": ta, "model": "my-model" }))["trust"] == "layout_conflict"
    });
    *a2_state.lock().unwrap() = None;
    wait_for("a2 gone", || {
        serve.readyz()["models"]["my-model"]["workers"] == 1
    });
    wait_for("my-model agreed", || prefix(&serve, "my-model", &ta) == 3);
}
