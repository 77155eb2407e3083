//! `serve` as an operator runs it in production (issue 29), for real: the binary against the
//! emulated master over ZeroMQ and real HTTP on 127.0.0.1, Python's Prometheus parser and
//! OpenAPI validator in a venv under target/, openssl and curl for TLS. Every process is killed
//! when its test ends.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use hicache_index_emulator::{Emulator, EmulatorConfig};
use hicache_index_testkit::process::{self, http, wait_for, Running, PATIENCE};
use hicache_index_testkit::{object_keys, tokens};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_hicache-index");
/// The manual of the binary, which holds the production configuration file.
const MANUAL: &str = include_str!("../../docs/cli.md");

fn emulator() -> Emulator {
    Emulator::start(EmulatorConfig::default()).expect("the emulator starts")
}

/// Starts `serve` against `emulator` with page size 4, TP 2 and `extra`.
fn serve(emulator: &Emulator, extra: &[&str]) -> (Running, SocketAddr) {
    serve_env(emulator, extra, &[])
}

fn serve_env(emulator: &Emulator, extra: &[&str], env: &[(&str, &str)]) -> (Running, SocketAddr) {
    let mut args = vec!["--page-size", "4", "--tp", "2"];
    args.extend_from_slice(extra);
    process::serve_with(BIN, emulator, &args, env)
}

/// Runs the binary to its end (killed after 60 s).
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    let child = command.spawn().expect("the binary starts");
    let started = Instant::now();
    let output = std::thread::spawn(move || child.wait_with_output());
    while !output.is_finished() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{args:?} hangs"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    output.join().unwrap().expect("its output")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A folder of this test, removed with it.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("hicache-prod-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
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

/// One HTTP/1.1 request with extra headers over a fresh connection: status and body.
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &[u8],
) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("the service accepts");
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    parse_response(&response)
}

fn parse_response(response: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(response);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The figure of an unlabelled sample in a Prometheus text.
fn figure(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} in\n{metrics}"))
}

/// The venv's Python with the checkers' packages.
fn python() -> PathBuf {
    hicache_index_testkit::peer::venv_python(
        "py-venv-serve",
        &["prometheus_client", "jsonschema", "openapi-spec-validator"],
        "import prometheus_client, jsonschema, openapi_spec_validator",
    )
}

/// Runs a checker script of `tests/py` with `args`; returns its JSON verdict.
fn check(script: &str, args: &[&Path]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/py")
        .join(script);
    let out = Command::new(python())
        .arg(script)
        .args(args)
        .output()
        .expect("python runs");
    assert!(out.status.success(), "{}", stderr(&out));
    json_of(String::from_utf8_lossy(&out.stdout).trim())
}

#[test]
fn an_unknown_field_is_a_400_naming_it_and_errors_repeat_little_of_the_input() {
    let emulator = emulator();
    let (_service, addr) = serve(&emulator, &[]);
    let body = br#"{"tokens": [1,2,3,4], "cachesalt": "oops"}"#;
    let (status, text) = http(addr, "POST", "/v1/query", body);
    assert_eq!(status, 400, "{text}");
    assert!(
        json_of(&text)["error"]
            .as_str()
            .unwrap()
            .contains("cachesalt"),
        "{text}"
    );
    let long = "m".repeat(3 << 20);
    let body = format!(r#"{{"tokens": [1,2,3,4], "model": "{long}"}}"#);
    let (status, text) = request(addr, "POST", "/v1/query", &[], body.as_bytes());
    assert_eq!(status, 400);
    assert!(text.len() < 1024, "{} bytes answered", text.len());
}

/// Asks `path` with `body` (`Value::Null`: a GET) and records the exchange for the checker (a
/// request answered 200 is held against the request schema too; a refused one need not fit).
fn exchange(addr: SocketAddr, exchanges: &mut Vec<Value>, path: &str, body: Value) -> (u16, Value) {
    let (method, bytes) = match &body {
        Value::Null => ("GET", Vec::new()),
        b => ("POST", b.to_string().into_bytes()),
    };
    let (status, text) = http(addr, method, path, &bytes);
    let answer = json_of(&text);
    let mut x = json!({ "method": method, "path": path, "status": status, "answer": answer });
    if !body.is_null() && status == 200 {
        x["request"] = body;
    }
    exchanges.push(x);
    (status, answer)
}

#[test]
fn the_api_document_describes_every_route_and_real_answers_match_it() {
    let emulator = emulator();
    let (_service, addr) = serve(&emulator, &["--model", "m"]);
    wait_for("ready", || http(addr, "GET", "/readyz", b"").0 == 200);
    emulator.store(object_keys(&tokens(1, 2)).iter().map(|k| format!("m_{k}")));
    let ask = json!({ "tokens": tokens(1, 3) });
    wait_for("two pages", || {
        json_of(&http(addr, "POST", "/v1/query", ask.to_string().as_bytes()).1)["prefix_pages"] == 2
    });
    let mut x = Vec::new();
    exchange(addr, &mut x, "/v1/query", ask.clone());
    exchange(
        addr,
        &mut x,
        "/v1/query",
        json!({ "tokens": tokens(1, 3), "page_map": true, "model": "m" }),
    );
    exchange(addr, &mut x, "/v1/query", json!({ "page_hashes": ["zz"] }));
    exchange(
        addr,
        &mut x,
        "/v1/query",
        json!({ "tokens": [1], "model": "other" }),
    );
    let batch =
        json!({ "queries": [ask, { "page_hashes": ["zz"] }, { "tokens": [1], "model": "x" }] });
    let (status, answers) = exchange(addr, &mut x, "/v1/query_batch", batch);
    assert_eq!(
        (status, answers["answers"].as_array().map(Vec::len)),
        (200, Some(3))
    );
    exchange(
        addr,
        &mut x,
        "/v1/query_batch",
        json!({ "queries": [], "extra": 1 }),
    );
    exchange(addr, &mut x, "/readyz", Value::Null);
    exchange(addr, &mut x, "/healthz", Value::Null);
    let (status, document) = http(addr, "GET", "/openapi.json", b"");
    assert_eq!(status, 200);
    let dir = TempDir::new("openapi");
    let doc = dir.file("openapi.json", &document);
    let xs = dir.file("exchanges.json", &Value::Array(x).to_string());
    let verdict = check("check_openapi.py", &[Path::new(&doc), Path::new(&xs)]);
    assert_eq!(verdict["problems"], json!([]), "{verdict}");
    assert_eq!(verdict["checked"], 8);
    let doc = json_of(&document);
    for path in [
        "/v1/query",
        "/v1/query_batch",
        "/metrics",
        "/healthz",
        "/readyz",
        "/openapi.json",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} documented");
    }
}

#[test]
fn a_query_missing_at_its_first_page_hashes_one_page_and_a_batch_answers_several() {
    let emulator = emulator();
    let (_service, addr) = serve(&emulator, &[]);
    wait_for("ready", || http(addr, "GET", "/readyz", b"").0 == 200);
    emulator.store(object_keys(&tokens(1, 3)));
    let present = json!({ "tokens": tokens(1, 5) });
    wait_for("three pages", || {
        json_of(&http(addr, "POST", "/v1/query", present.to_string().as_bytes()).1)["prefix_pages"]
            == 3
    });
    let hashed = || {
        figure(
            &http(addr, "GET", "/metrics", b"").1,
            "hicache_index_prefix_memo_misses_total",
        )
    };
    let before = hashed();
    // 16,384 tokens (4,096 pages of 4) none of which is stored: one page hashed.
    let absent: Vec<u32> = (500_000..516_384).collect();
    let (status, text) = http(
        addr,
        "POST",
        "/v1/query",
        json!({ "tokens": absent }).to_string().as_bytes(),
    );
    let answer = json_of(&text);
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        (
            answer["prefix_pages"].as_u64(),
            answer["total_pages"].as_u64()
        ),
        (Some(0), Some(4096))
    );
    assert_eq!(
        answer["pages"],
        json!([false]),
        "the pages until the first miss"
    );
    assert_eq!(
        hashed() - before,
        1.0,
        "one page hashed, not the request's 4,096"
    );
    let full = json!({ "tokens": absent, "page_map": true });
    let answer = json_of(&http(addr, "POST", "/v1/query", full.to_string().as_bytes()).1);
    assert_eq!(answer["pages"].as_array().map(Vec::len), Some(4096));
    let batch =
        json!({ "queries": [present, { "tokens": absent }, { "tokens": [1], "tenent": "x" }] });
    let (status, text) = http(
        addr,
        "POST",
        "/v1/query_batch",
        batch.to_string().as_bytes(),
    );
    assert_eq!(status, 400, "an unknown field refuses the batch: {text}");
    let batch = json!({ "queries": [present, { "tokens": absent }, { "page_hashes": ["zz"] }] });
    let (status, text) = http(
        addr,
        "POST",
        "/v1/query_batch",
        batch.to_string().as_bytes(),
    );
    assert_eq!(status, 200, "{text}");
    let answers = json_of(&text)["answers"].clone();
    assert_eq!(answers[0]["prefix_pages"], 3);
    assert_eq!(answers[0]["pages"], json!([true, true, true, false]));
    assert_eq!(answers[1]["prefix_pages"], 0);
    assert_eq!(answers[2]["status"], 400);
}

#[test]
fn an_unreachable_master_is_named_once_with_its_url_and_readyz_says_why() {
    let emulator = emulator();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let events = emulator.event_endpoint();
    let mut service = Running::start_with(
        BIN,
        &[
            "serve",
            "--events",
            &events,
            "--master-http",
            &url,
            "--page-size",
            "4",
            "--tp",
            "2",
            "--listen",
            "127.0.0.1:0",
        ],
        &[("RUST_LOG", "info")],
    );
    let addr = service.http_address();
    service.log_line("the failure named", |l| {
        l.contains("WARN") && l.contains(&url)
    });
    // Six seconds of retries: 0.5-1 s, then doubling.
    std::thread::sleep(Duration::from_secs(6));
    let (status, text) = http(addr, "GET", "/readyz", b"");
    assert_eq!(status, 503);
    let reason = json_of(&text)["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        reason.contains(&format!("key list unreachable at {url}")),
        "{text}"
    );
    assert!(reason.contains("tries"), "{text}");
    let logs = service.logs().to_vec();
    let warnings: Vec<&String> = logs.iter().filter(|l| l.contains("WARN")).collect();
    // One episode each: the key list's, and the store signals' (the watch reads `/metrics`).
    for episode in ["key list unreachable", "store signals unreachable"] {
        let named = warnings.iter().filter(|l| l.contains(episode)).count();
        assert!(named <= 1, "{episode} named {named} times: {warnings:#?}");
    }
    let warnings: Vec<&&String> = warnings
        .iter()
        .filter(|l| !l.contains("store signals unreachable"))
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "one warning for the episode: {warnings:#?}"
    );
    assert!(
        !logs
            .iter()
            .any(|l| l.contains("WARN") && l.contains("index cleared")),
        "{logs:#?}"
    );
    // The key list's episode (the store signals' has its own backoff, named after it).
    let key_list = reason
        .split("; ")
        .find(|e| e.contains("key list unreachable"))
        .unwrap_or_else(|| panic!("the key list's episode in {reason}"));
    let tries: u64 = key_list
        .rsplit(", ")
        .next()
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a count of tries in {reason}"));
    assert!(
        (2..=5).contains(&tries),
        "backed off: {tries} tries in 6 s ({reason})"
    );
}

#[test]
fn an_unreachable_event_endpoint_is_named_once_and_ends_at_info_when_it_comes() {
    let emulator = emulator();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let events = format!("tcp://127.0.0.1:{port}");
    let mut service = Running::start_with(
        BIN,
        &[
            "serve",
            "--events",
            &events,
            "--page-size",
            "4",
            "--tp",
            "2",
            "--listen",
            "127.0.0.1:0",
        ],
        &[("RUST_LOG", "info")],
    );
    let addr = service.http_address();
    service.log_line("the failure named", |l| {
        l.contains("WARN") && l.contains(&events)
    });
    std::thread::sleep(Duration::from_secs(2));
    let text = http(addr, "GET", "/readyz", b"").1;
    assert!(
        json_of(&text)["reason"]
            .as_str()
            .unwrap_or("")
            .contains(&events),
        "{text}"
    );
    // The master comes up on that port: the episode ends, at INFO.
    let late = Emulator::start(EmulatorConfig {
        event_port: port,
        ..EmulatorConfig::default()
    })
    .expect("the master binds the port");
    service.log_line("the end of the episode", |l| {
        l.contains("INFO") && l.contains("reachable again")
    });
    let warnings = service.logs().iter().filter(|l| l.contains("WARN")).count();
    assert_eq!(warnings, 1, "{:#?}", service.logs());
    drop((late, emulator));
}

/// Writes an HTTP request's head on a new keep-alive connection and reads its answer.
fn keep_alive(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 512];
    let n = stream.read(&mut buf).unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    stream
}

/// Starts a query whose body is still to come: the connection is busy.
fn busy(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .write_all(b"POST /v1/query HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\n\r\n{\"tokens\"")
        .unwrap();
    stream
}

#[test]
fn past_max_connections_an_idle_connection_is_closed_and_else_a_fast_503() {
    let emulator = emulator();
    let (_service, addr) = serve(
        &emulator,
        &["--max-connections", "2", "--client-timeout", "20s"],
    );
    let (_a, _b) = (keep_alive(addr), keep_alive(addr));
    // Two idle connections open: a third is served, the idle one closed to make room.
    let (status, _) = http(addr, "GET", "/healthz", b"");
    assert_eq!(status, 200);
    let metrics = http(addr, "GET", "/metrics", b"").1;
    assert!(
        figure(&metrics, "hicache_index_http_connections_closed_idle_total") >= 1.0,
        "{metrics}"
    );
    // Two busy connections: a new one is answered 503 at once (it waited silently before).
    let (_c, _d) = (busy(addr), busy(addr));
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let (status, text) = http(addr, "GET", "/healthz", b"");
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("too many connections"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answered at once: {:?}",
        started.elapsed()
    );
    drop((_c, _d));
    wait_for("room again", || http(addr, "GET", "/healthz", b"").0 == 200);
    let metrics = http(addr, "GET", "/metrics", b"").1;
    assert!(
        figure(&metrics, "hicache_index_http_connections_rejected_total") >= 1.0,
        "{metrics}"
    );
    assert!(
        figure(&metrics, "hicache_index_http_connections_open") >= 1.0,
        "{metrics}"
    );
}

#[test]
fn metrics_follow_the_prometheus_conventions() {
    let emulator = emulator();
    let (_service, addr) = serve(&emulator, &[]);
    wait_for("ready", || http(addr, "GET", "/readyz", b"").0 == 200);
    let _ = http(addr, "POST", "/v1/query", br#"{"tokens": [1,2,3,4]}"#);
    let _ = http(addr, "POST", "/v1/query", b"{");
    let dir = TempDir::new("metrics");
    let first = dir.file("first.txt", &http(addr, "GET", "/metrics", b"").1);
    let _ = http(addr, "POST", "/v1/query_batch", br#"{"queries": []}"#);
    let second = dir.file("second.txt", &http(addr, "GET", "/metrics", b"").1);
    let verdict = check("check_metrics.py", &[Path::new(&first), Path::new(&second)]);
    assert_eq!(verdict["problems"], json!([]), "{verdict}");
    assert!(verdict["families"].as_u64().unwrap() > 80, "{verdict}");
    assert_eq!(verdict["build_info"]["version"], env!("CARGO_PKG_VERSION"));
}

#[test]
fn sigterm_turns_readyz_503_and_finishes_the_request_in_flight_before_exiting_0() {
    let emulator = emulator();
    let (mut service, addr) = serve(&emulator, &["--shutdown-grace", "4s"]);
    wait_for("ready", || http(addr, "GET", "/readyz", b"").0 == 200);
    let body = br#"{"tokens": [1,2,3,4]}"#;
    let mut in_flight = TcpStream::connect(addr).unwrap();
    in_flight.set_read_timeout(Some(PATIENCE)).unwrap();
    let head = format!(
        "POST /v1/query HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    in_flight.write_all(head.as_bytes()).unwrap();
    in_flight.write_all(&body[..5]).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    service.signal("TERM");
    wait_for("readyz 503", || http(addr, "GET", "/readyz", b"").0 == 503);
    let (_, text) = http(addr, "GET", "/readyz", b"");
    assert_eq!(json_of(&text)["health"], "stopping");
    assert!(
        service.try_wait().is_none(),
        "still running for the request in flight"
    );
    in_flight.write_all(&body[5..]).unwrap();
    let mut answer = vec![0u8; 4096];
    let n = in_flight.read(&mut answer).unwrap();
    let (status, text) = parse_response(&answer[..n]);
    assert_eq!(status, 200, "the request in flight is answered: {text}");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = service.try_wait() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "no exit within the grace"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn sighup_is_logged_and_ignored() {
    let emulator = emulator();
    let (mut service, addr) = serve(&emulator, &[]);
    service.signal("HUP");
    service.log_line("SIGHUP ignored", |l| l.contains("SIGHUP ignored"));
    assert!(service.try_wait().is_none(), "SIGHUP killed serve");
    assert_eq!(http(addr, "GET", "/healthz", b"").0, 200);
}

#[test]
fn settings_come_from_flags_then_the_environment_then_the_file() {
    let dir = TempDir::new("precedence");
    let file = dir.file(
        "serve.toml",
        "events = \"tcp://127.0.0.1:5557\"\npage-size = 4\ntp = 2\nmax-body-bytes = 1000\nverify_sample = 7\nclient-timeout = \"3s\"\nlayout = []\n",
    );
    let out = run(
        &[
            "serve",
            "--config",
            &file,
            "--client-timeout",
            "5s",
            "--check",
        ],
        &[
            ("HICACHE_INDEX_VERIFY_SAMPLE", "8"),
            ("HICACHE_INDEX_CLIENT_TIMEOUT", "4s"),
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let config = json_of(
        err.trim()
            .strip_prefix("hicache-index: configuration ok: ")
            .unwrap_or(&err),
    );
    let setting = |name: &str| (config[name]["value"].clone(), config[name]["from"].clone());
    assert_eq!(setting("max-body-bytes"), (json!("1000"), json!("file")));
    assert_eq!(setting("verify-sample"), (json!("8"), json!("env")));
    assert_eq!(setting("client-timeout"), (json!("5s"), json!("flag")));
    assert_eq!(setting("max-tokens").1, json!("default"));
    // A key that is no flag, and a file that cannot be read, are usage errors in one line.
    let bad = dir.file(
        "bad.toml",
        "events = \"tcp://127.0.0.1:5557\"\nmax-bodybytes = 1\n",
    );
    for (config, says) in [
        (bad.as_str(), "unknown key \"max-bodybytes\""),
        ("/nonexistent.toml", "cannot read"),
    ] {
        let out = run(&["serve", "--config", config, "--check"], &[]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
        assert!(stderr(&out).contains(says), "{}", stderr(&out));
    }
}

/// The production configuration file of `docs/cli.md` (the `toml` block after its marker).
fn manual_config() -> String {
    let at = MANUAL
        .find("<!-- production config -->")
        .expect("the manual's marker");
    let rest = &MANUAL[at..];
    let start = rest.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let end = rest[start..].find("```").expect("its end");
    rest[start..start + end].to_owned()
}

/// Writes a self-signed certificate for 127.0.0.1 and its key with openssl; returns both paths.
fn certificate(dir: &TempDir) -> (String, String) {
    let (cert, key) = (dir.0.join("cert.pem"), dir.0.join("key.pem"));
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
        ])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "{}", stderr(&out));
    (cert.display().to_string(), key.display().to_string())
}

#[test]
fn the_manuals_production_configuration_passes_check() {
    let dir = TempDir::new("manual");
    let file = dir.file("serve.toml", &manual_config());
    let token = dir.file("token", "a-long-random-token\n");
    let (cert, key) = certificate(&dir);
    // The file names /etc paths; the environment points them at this test's files.
    let env = [
        ("HICACHE_INDEX_AUTH_TOKEN_FILE", token.as_str()),
        ("HICACHE_INDEX_TLS_CERT", cert.as_str()),
        ("HICACHE_INDEX_TLS_KEY", key.as_str()),
    ];
    let out = run(&["serve", "--config", &file, "--check"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let config = json_of(
        stderr(&out)
            .trim()
            .strip_prefix("hicache-index: configuration ok: ")
            .unwrap(),
    );
    assert_eq!(config["listen"]["from"], "file", "{config}");
    assert_eq!(config["auth-token-file"]["from"], "env");
}

#[test]
fn logs_go_to_stderr_as_json_with_a_startup_line_and_an_access_log_at_debug() {
    let emulator = emulator();
    let (mut service, addr) = serve_env(
        &emulator,
        &[
            "--log-format",
            "json",
            "--log-level",
            "info,hicache_index_access=debug",
            "--shutdown-grace",
            "200ms",
        ],
        &[],
    );
    assert_eq!(http(addr, "GET", "/healthz", b"").0, 200);
    service.log_line("the access log", |l| l.contains("/healthz"));
    assert!(service.terminate().success());
    let logs = service.logs().to_vec();
    let lines: Vec<Value> = logs.iter().map(|l| json_of(l)).collect();
    let start = &lines[0]["fields"];
    assert_eq!(start["version"], env!("CARGO_PKG_VERSION"), "{}", lines[0]);
    assert!(start["features"].is_string(), "{}", lines[0]);
    assert!(
        start["configuration"]
            .as_str()
            .unwrap()
            .contains("\"events\""),
        "{}",
        lines[0]
    );
    let access = lines
        .iter()
        .find(|l| l["fields"]["path"] == "/healthz")
        .expect("an access line");
    assert_eq!(
        (
            access["level"].as_str(),
            access["fields"]["status"].as_u64()
        ),
        (Some("DEBUG"), Some(200))
    );
    assert!(
        !service.line_within(Duration::from_millis(100), |_| true),
        "nothing on stdout"
    );
}

#[test]
fn listen_takes_a_host_name_and_version_lists_the_features() {
    let emulator = emulator();
    let (_service, addr) = serve(&emulator, &["--listen", "localhost:0"]);
    assert!(addr.ip().is_loopback(), "{addr}");
    assert_eq!(http(addr, "GET", "/healthz", b"").0, 200);
    let out = run(&["--version"], &[]);
    let version = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        version.contains("features: ") && version.contains("ha"),
        "{version}"
    );
}

#[test]
fn a_token_guards_the_query_routes_and_the_metrics_when_asked() {
    let emulator = emulator();
    let dir = TempDir::new("token");
    let token = dir.file("token", "s3cret-token\n");
    let (_service, addr) = serve(&emulator, &["--auth-token-file", &token]);
    let body = br#"{"tokens": [1,2,3,4]}"#;
    let good = "Authorization: Bearer s3cret-token";
    assert_eq!(request(addr, "POST", "/v1/query", &[], body).0, 401);
    assert_eq!(
        request(
            addr,
            "POST",
            "/v1/query",
            &["Authorization: Bearer nope"],
            body
        )
        .0,
        401
    );
    assert_eq!(
        request(addr, "POST", "/v1/query_batch", &[], br#"{"queries": []}"#).0,
        401
    );
    assert_eq!(request(addr, "POST", "/v1/query", &[good], body).0, 200);
    for open in ["/healthz", "/readyz", "/openapi.json", "/metrics"] {
        assert_ne!(
            request(addr, "GET", open, &[], b"").0,
            401,
            "{open} is open"
        );
    }
    let (_strict, strict) = serve(&emulator, &["--auth-token-file", &token, "--metrics-auth"]);
    assert_eq!(request(strict, "GET", "/metrics", &[], b"").0, 401);
    assert_eq!(request(strict, "GET", "/metrics", &[good], b"").0, 200);
}

#[test]
fn a_non_loopback_listen_is_refused_without_a_token_unless_allowed() {
    let dir = TempDir::new("open");
    let token = dir.file("token", "t0ken\n");
    let base = [
        "serve",
        "--events",
        "tcp://127.0.0.1:5557",
        "--page-size",
        "4",
        "--tp",
        "2",
        "--listen",
        "0.0.0.0:0",
        "--check",
    ];
    let out = run(&base, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1);
    assert!(
        stderr(&out).contains("--allow-unauthenticated"),
        "{}",
        stderr(&out)
    );
    let mut allowed = base.to_vec();
    allowed.push("--allow-unauthenticated");
    assert_eq!(run(&allowed, &[]).status.code(), Some(0));
    let mut with_token = base.to_vec();
    with_token.extend(["--auth-token-file", token.as_str()]);
    assert_eq!(run(&with_token, &[]).status.code(), Some(0));
}

#[test]
fn tls_serves_https_with_the_given_certificate() {
    let emulator = emulator();
    let dir = TempDir::new("tls");
    let (cert, key) = certificate(&dir);
    let mut args = vec!["--tls-cert", cert.as_str(), "--tls-key", key.as_str()];
    args.extend(["--page-size", "4", "--tp", "2"]);
    let (endpoint, base) = (emulator.event_endpoint(), emulator.http_base());
    let mut all = vec![
        "serve",
        "--events",
        &endpoint,
        "--master-http",
        &base,
        "--listen",
        "127.0.0.1:0",
    ];
    all.extend(args);
    let mut service = Running::start(BIN, &all);
    let line = service.log_line("the HTTPS address", |l| {
        l.contains("http listening on https://")
    });
    let addr: SocketAddr = line
        .rsplit("https://")
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert", &cert])
        .arg(format!("https://{addr}/healthz"))
        .output()
        .expect("curl runs");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        r#"{"status":"alive"}"#
    );
    // Plain HTTP to the TLS port gets no answer.
    let mut plain = TcpStream::connect(addr).unwrap();
    plain.set_read_timeout(Some(PATIENCE)).unwrap();
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    let _ = plain.read_to_end(&mut buf);
    assert!(
        !buf.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf)
    );
}

#[test]
fn the_default_build_follows_an_ha_cluster() {
    // Mooncake HA is in the default build (it needed --features ha and a system protoc).
    let out = run(
        &[
            "serve",
            "--events",
            "tcp://127.0.0.1:5557",
            "--master-http",
            "http://127.0.0.1:9003",
            "--ha-locator",
            "etcd://127.0.0.1:2379",
            "--page-size",
            "4",
            "--tp",
            "2",
            "--check",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn an_event_host_that_does_not_resolve_is_named_in_the_log() {
    // In a network namespace of its own with only loopback up, so that the resolver's query
    // goes nowhere (no packet leaves this machine): the lookup fails at once.
    let script = format!(
        "ip link set lo up && exec {BIN} serve --events tcp://mooncake-master.invalid:5557 \
         --page-size 4 --tp 2 --listen 127.0.0.1:0 --shutdown-grace 100ms"
    );
    let mut service = Running::start_with(
        "unshare",
        &["--net", "sh", "-c", &script],
        &[("RUST_LOG", "info")],
    );
    let line = service.log_line("the unresolvable host named", |l| {
        l.contains("does not resolve")
    });
    assert!(
        line.contains("WARN") && line.contains("mooncake-master.invalid"),
        "{line}"
    );
    let warnings = service.logs().iter().filter(|l| l.contains("WARN")).count();
    assert!(
        warnings <= 2,
        "the episode's two lines at most: {:#?}",
        service.logs()
    );
    assert!(
        !service.logs().iter().any(|l| l.contains("index cleared")),
        "no clear of an empty index: {:#?}",
        service.logs()
    );
}
