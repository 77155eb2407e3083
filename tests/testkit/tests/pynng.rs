//! The nng query service over a real subscriber following the emulated master, asked by pynng
//! (the client Python routers use) and directly through `reply`.

use std::io::Write;
use std::process::{Command, Stdio};

use hicache_index::{Config, ModelLayout, ResyncConfig};
use hicache_index_api::{Limits, QueryAnswer, QueryRequest};
use hicache_index_driver::{QueryHandle, SubscriberConfig};
use hicache_index_testkit::runtimes::Tokio;
use hicache_index_testkit::{
    layout, object_keys, page_hashes, prefix, tokens, wait_subscribed, wait_until, EmulatorPeer,
    Peer, Runtime, PATIENCE,
};
use serde_json::{json, Value};

/// A subscriber whose index holds the first 3 of the 5 pages of `tokens(1, 5)`.
fn index_with_three_pages() -> (EmulatorPeer, QueryHandle, <Tokio as Runtime>::Running) {
    let peer = EmulatorPeer::start();
    let config = SubscriberConfig::new(Config {
        endpoint: Some(peer.event_endpoint()),
        layouts: vec![ModelLayout {
            model: None,
            layout: layout(),
        }],
        resync: Some(ResyncConfig::default()),
        ..Config::default()
    })
    .with_master_http(peer.http_base());
    let (query, _control, running) = Tokio::spawn(config);
    wait_subscribed(&peer, &query);
    peer.store(&object_keys(&tokens(1, 3)));
    wait_until(&query, "three pages", PATIENCE, || {
        prefix(&query, &tokens(1, 5)) == 3
    });
    (peer, query, running)
}

fn decode(bytes: &[u8]) -> Value {
    rmp_serde::from_slice(bytes).expect("a msgpack map")
}

fn ipc_url(name: &str) -> String {
    let path = std::env::temp_dir().join(format!("hicache-nng-{}-{name}.ipc", std::process::id()));
    format!("ipc://{}", path.display())
}

#[test]
fn reply_answers_msgpack_maps_and_errors_as_maps() {
    let (_peer, query, _running) = index_with_three_pages();
    let limits = Limits {
        max_body_bytes: 4096,
        ..Limits::default()
    };
    let wide: Vec<u64> = tokens(1, 5).iter().map(|&t| u64::from(t)).collect();
    let request = QueryRequest {
        tokens: Some(wide),
        ..QueryRequest::default()
    };
    let body = rmp_serde::to_vec_named(&request).unwrap();
    let answer: QueryAnswer =
        rmp_serde::from_slice(&hicache_index_nng::reply(&query, &body, &limits)).unwrap();
    assert_eq!(answer.prefix_pages, 3);
    // Issue 29: `pages` ends at the first miss unless the request asks for the whole map.
    assert_eq!(answer.pages, vec![true, true, true, false]);
    assert_eq!(answer.trust, "live");
    let whole = QueryRequest {
        page_map: true,
        ..request.clone()
    };
    let body = rmp_serde::to_vec_named(&whole).unwrap();
    let answer: QueryAnswer =
        rmp_serde::from_slice(&hicache_index_nng::reply(&query, &body, &limits)).unwrap();
    assert_eq!(answer.pages, vec![true, true, true, false, false]);
    // A batch: a map with "queries".
    let batch =
        rmp_serde::to_vec_named(&json!({ "queries": [request, { "page_hashes": ["zz"] }] }))
            .unwrap();
    let answers = decode(&hicache_index_nng::reply(&query, &batch, &limits));
    assert_eq!(answers["answers"][0]["prefix_pages"], 3, "{answers}");
    assert_eq!(answers["answers"][1]["status"], 400, "{answers}");

    for (bad, says) in [
        (b"\xc1".to_vec(), "malformed"),
        (b"not msgpack at all".to_vec(), "malformed"),
        (
            rmp_serde::to_vec_named(&json!({"tokens": [1], "page_hashes": []})).unwrap(),
            "exactly one",
        ),
        (vec![0x90; 5000], "larger than 4096"),
        (
            rmp_serde::to_vec_named(&json!({"tokens": [1, 2, 3, 4], "model": "nope"})).unwrap(),
            "model",
        ),
    ] {
        let answer = decode(&hicache_index_nng::reply(&query, &bad, &limits));
        let error = answer["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{answer} should say {says:?}");
    }
}

#[test]
fn pynng_gets_the_same_answers_as_http_in_msgpack() {
    let (_peer, query, _running) = index_with_three_pages();
    let url = ipc_url("pynng");
    let service = hicache_index_nng::serve(query, &url).expect("the service listens");
    let hashes: Vec<String> = page_hashes(&tokens(1, 5))
        .iter()
        .map(ToString::to_string)
        .collect();
    let requests = json!([
        { "tokens": tokens(1, 5), "page_map": true },
        { "page_hashes": hashes, "page_map": true },
        { "tokens": tokens(1, 5), "tenant": "default", "extra_key": "user-7" },
        { "tokens": tokens(1, 5), "model": "unknown" },
        { "tokens": tokens(1, 5), "page_hashes": [] },
        { "raw_hex": "c1c1c1" },
    ]);
    let python = hicache_index_testkit::peer::venv_python(
        "py-venv-nng",
        &["pynng", "msgpack"],
        "import pynng, msgpack",
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/pynng_client.py");
    let mut child = Command::new(python)
        .arg(script)
        .arg(&url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(requests.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().expect("python ends");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 7, "{lines:?}");
    for answer in &lines[..2] {
        assert_eq!(answer["prefix_pages"], 3, "{answer}");
        assert_eq!(answer["pages"], json!([true, true, true, false, false]));
        assert_eq!(answer["total_pages"], 5);
        assert_eq!(answer["trust"], "live");
    }
    assert_eq!(
        lines[2]["prefix_pages"], 0,
        "a namespaced request misses plain pages"
    );
    for (answer, says) in lines[3..6]
        .iter()
        .zip(["model", "exactly one", "malformed"])
    {
        let error = answer["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{answer} should say {says:?}");
    }
    let round_trip = lines[6]["round_trip_us"].as_f64().unwrap();
    println!("[nng] pynng round trip, 5-page token query over ipc: {round_trip:.1} µs");
    assert!(round_trip < 5_000.0, "{round_trip} µs a round trip");
    service.close();
}

#[test]
fn a_busy_url_is_an_error_not_a_panic() {
    let (_peer, query, _running) = index_with_three_pages();
    let url = ipc_url("busy");
    let first = hicache_index_nng::serve(query.clone(), &url).expect("the first listens");
    let second = hicache_index_nng::serve(query.clone(), &url);
    let error = second.expect_err("the address is taken").to_string();
    assert!(error.contains(&url), "{error}");
    let bad = hicache_index_nng::serve(query, "nonsense://x").expect_err("a bad URL");
    assert!(
        bad.to_string()
            .starts_with("cannot serve nng on nonsense://x"),
        "{bad}"
    );
    drop(first);
}

#[test]
fn a_rust_req_client_gets_answers_in_microseconds() {
    let (_peer, query, _running) = index_with_three_pages();
    let url = ipc_url("rust-req");
    let _service = hicache_index_nng::serve(query, &url).expect("the service listens");
    let client = nng::Socket::new(nng::Protocol::Req0).unwrap();
    client.dial(&url).unwrap();
    let body = rmp_serde::to_vec_named(&json!({ "tokens": tokens(1, 5) })).unwrap();
    let rounds = 2000;
    let start = std::time::Instant::now();
    for _ in 0..rounds {
        client.send(body.as_slice()).unwrap();
        let answer = client.recv().unwrap();
        assert_eq!(decode(&answer)["prefix_pages"], 3);
    }
    let micros = start.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
    println!("[nng] Rust REQ round trip, 5-page token query over ipc: {micros:.1} µs");
}
