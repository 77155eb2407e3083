//! The `hicache-index` binary, run for real: every subcommand, against the shared vectors, the
//! emulated master over real ZeroMQ, and real HTTP (and, with the `nng` feature, pynng) clients.
//! Every process is killed when its test ends; everything stays on 127.0.0.1.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use hicache_index::EventKind;
use hicache_index_emulator::{Emulator, EmulatorConfig};
use hicache_index_testkit::process::{self, http, wait_for, Running, PATIENCE};
use hicache_index_testkit::{object_keys, page_hashes, tokens};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_hicache-index");
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../core/tests/fixtures");

/// Runs the binary to its end (killed after 60 s), with `stdin` as its input.
fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let mut input = child.stdin.take().expect("piped stdin");
    let stdin = stdin.to_owned();
    let feeder = std::thread::spawn(move || {
        let _ = input.write_all(stdin.as_bytes());
    });
    let out = wait_output(child, Duration::from_secs(60));
    let _ = feeder.join();
    out
}

/// Waits for `child` to end and collects its output; kills it after `timeout`.
fn wait_output(mut child: Child, timeout: Duration) -> Output {
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let err = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf);
        buf
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            break status;
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            panic!("{BIN} did not end within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts a failure with exit `code` and exactly one line on stderr containing `says`.
fn assert_fails(out: &Output, code: i32, says: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line expected: {err:?}");
    assert!(err.contains(says), "{err:?} should say {says:?}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Whether a `watch` line (JSON or text) reports a batch.
fn is_batch_line(line: &str) -> bool {
    line.starts_with("seq ") || line.contains("\"seq\":")
}

fn emulator() -> Emulator {
    Emulator::start(EmulatorConfig::default()).expect("the emulator starts")
}

fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(format!("{FIXTURES}/{name}")).expect("the fixture");
    serde_json::from_str(&text).expect("JSON")
}

/// Tokens of a vector: a list, or the Python text `"list(range(a, b))"`.
fn vector_tokens(v: &Value) -> Vec<String> {
    match v {
        Value::Array(list) => list.iter().map(|t| t.to_string()).collect(),
        Value::String(text) => {
            let inner = text
                .strip_prefix("list(range(")
                .and_then(|t| t.strip_suffix("))"))
                .expect("list(range(a, b))");
            let (a, b) = inner.split_once(',').expect("two bounds");
            let (a, b): (u64, u64) = (a.trim().parse().unwrap(), b.trim().parse().unwrap());
            (a..b).map(|t| t.to_string()).collect()
        }
        other => panic!("unexpected tokens {other}"),
    }
}

#[test]
fn hash_prints_the_page_hashes_of_the_shared_vectors() {
    let vectors = fixture("page_hashes.json");
    for v in vectors["vectors"].as_array().unwrap() {
        let page_size = v["page_size"].to_string();
        let mut args = vec!["hash", "--page-size", &page_size];
        if v["eagle"] == true {
            args.push("--eagle");
        }
        let extra_key = v["extra_key"].as_str().map(str::to_owned);
        let cache_salt = v["cache_salt"].as_str().map(str::to_owned);
        if let Some(k) = &extra_key {
            args.extend(["--extra-key", k]);
        }
        if let Some(s) = &cache_salt {
            args.extend(["--cache-salt", s]);
        }
        let tokens = vector_tokens(&v["tokens"]);
        args.extend(tokens.iter().map(String::as_str));
        let out = run(&args, "");
        assert!(out.status.success(), "{}: {}", v["name"], stderr(&out));
        let expected: Vec<&str> = v["page_hashes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_str().unwrap())
            .collect();
        assert_eq!(
            stdout(&out).lines().collect::<Vec<_>>(),
            expected,
            "{}",
            v["name"]
        );
    }
}

#[test]
fn hash_with_an_empty_cache_salt_or_extra_key_prints_the_plain_chain() {
    let plain = run(&["hash", "--page-size", "4", "1,2,3,4,5,6,7,8"], "");
    assert!(plain.status.success(), "{}", stderr(&plain));
    for flag in ["--cache-salt", "--extra-key"] {
        let empty = run(
            &["hash", "--page-size", "4", flag, "", "1,2,3,4,5,6,7,8"],
            "",
        );
        assert!(empty.status.success(), "{}", stderr(&empty));
        assert_eq!(
            stdout(&empty),
            stdout(&plain),
            "{flag} \"\" is no namespace"
        );
        let salted = run(
            &["hash", "--page-size", "4", flag, "s", "1,2,3,4,5,6,7,8"],
            "",
        );
        assert_ne!(stdout(&salted), stdout(&plain), "{flag} s is a namespace");
    }
}

#[test]
fn hash_accepts_comma_lists_and_refuses_bad_tokens() {
    let spaced = run(&["hash", "--page-size", "4", "1", "2", "3", "4"], "");
    let commas = run(&["hash", "--page-size", "4", "1,2,3,4"], "");
    assert!(spaced.status.success() && commas.status.success());
    assert_eq!(stdout(&spaced), stdout(&commas));
    assert_fails(
        &run(&["hash", "--page-size", "4", "1", "x"], ""),
        2,
        "\"x\" is not a token id",
    );
    assert_fails(
        &run(&["hash", "--page-size", "0", "1"], ""),
        2,
        "--page-size must be at least 1",
    );
    assert_fails(
        &run(&["hash", "--page-size", "4", "-5"], ""),
        2,
        "see --help",
    );
    assert_fails(&run(&["hash", "--page-size", "4"], ""), 2, "TOKEN");
}

#[test]
fn keys_prints_the_object_keys_of_the_shared_layouts() {
    let vectors = fixture("object_keys.json");
    let h = vectors["H"].as_str().unwrap();
    for v in vectors["layouts"].as_array().unwrap() {
        let layout = &v["layout"];
        let (tp, pp) = (layout["tp"].to_string(), layout["pp"].to_string());
        let mut args = vec![
            "keys",
            "--page-hash",
            h,
            "--page-size",
            "4",
            "--tp",
            &tp,
            "--pp",
            &pp,
        ];
        if layout["mla"] == true {
            args.push("--mla");
        }
        let lcm = layout["tp_lcm"].as_u64().map(|n| n.to_string());
        if let Some(lcm) = &lcm {
            args.extend(["--tp-lcm", lcm]);
        }
        if let Some(tag) = layout["tag"].as_str() {
            args.extend(["--tag", tag]);
        }
        if let Some(model) = layout["model"].as_str() {
            args.extend(["--model", model]);
        }
        let out = run(&args, "");
        assert!(out.status.success(), "{}: {}", v["name"], stderr(&out));
        let expected: Vec<String> = v["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap().replace("{H}", h))
            .collect();
        assert_eq!(
            stdout(&out).lines().collect::<Vec<_>>(),
            expected,
            "{}",
            v["name"]
        );
    }
}

#[test]
fn keys_describes_dcp_with_pp_and_attention_cp_and_deepseek_v4_pools_by_flags() {
    // Launches SGLang 0.5.23 advertises no layout for (its layout builder raises under DCP).
    let h = "cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72";
    let out = run(
        &[
            "keys",
            "--page-hash",
            h,
            "--page-size",
            "8",
            "--tp",
            "2",
            "--pp",
            "2",
            "--mla",
            "--dcp",
            "2",
            "--cp",
            "2",
            "--pool",
            "indexer",
        ],
        "",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let prefix = "tp2_dcp2_page16_pp2_cp2";
    let mut expected = Vec::new();
    for object in ["k", "indexer"] {
        for p in 0..2 {
            for c in 0..2 {
                for d in 0..2 {
                    expected.push(format!("{prefix}_{h}_dcp{d}_cp{c}_{p}_{object}"));
                }
            }
        }
    }
    let mut got: Vec<String> = stdout(&out).lines().map(str::to_owned).collect();
    got.sort();
    expected.sort();
    assert_eq!(got, expected);
    let out = run(
        &[
            "keys",
            "--page-hash",
            h,
            "--page-size",
            "64",
            "--tp",
            "4",
            "--mla",
            "--pool",
            "deepseek_v4_c1",
            "--pool",
            "deepseek_v4_c2_indexer_scale",
            "--pool",
            "deepseek_v4_c128_rope,trailing=2",
            "--logical-kv",
        ],
        "",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).lines().collect::<Vec<_>>(),
        [
            format!("{h}__deepseek_v4_c1"),
            format!("{h}__deepseek_v4_c2_indexer_scale"),
            format!("{h}__deepseek_v4_c128_rope"),
        ]
    );
}

#[test]
fn keys_refuses_a_bad_hash_and_a_missing_layout_in_one_line() {
    // Issue 29: usage errors the app checks exit 2, as clap's do (they exited 1).
    let h = "cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72";
    assert_fails(
        &run(
            &["keys", "--page-hash", "zz", "--page-size", "4", "--tp", "2"],
            "",
        ),
        2,
        "64 lowercase hex",
    );
    assert_fails(
        &run(&["keys", "--page-hash", h], ""),
        2,
        "--page-size is required",
    );
    assert_fails(
        &run(
            &["keys", "--page-hash", h, "--page-size", "4", "--tp", "0"],
            "",
        ),
        2,
        "invalid layout",
    );
    assert_fails(
        &run(
            &["keys", "--page-hash", h, "--layout", "/nonexistent.json"],
            "",
        ),
        2,
        "cannot read",
    );
}

/// What SGLang 0.5.23 writes for an MLA model with a mamba pool at TP 2: disabled, since the
/// mamba suffixes name TP rank 0 only (`mooncake_store.py`, `describe_l3_object_layout`).
const DISABLED_DOCUMENT: &str = r#"{"enabled": false, "backend": "mooncake", "page_size": 4,
  "hicache_object_layout": {"key_prefix": "m", "is_mla_backend": true, "pp_rank": 0, "pp_size": 1,
    "pools": [{"pool": "kv", "suffixes": ["__k"], "hit_policy": "all_pages"},
              {"pool": "mamba", "suffixes": ["_0_temporal"], "hit_policy": "trailing_pages",
               "trailing_pages": 1}]},
  "reason": "Auxiliary L3 pools are not rank-replicated/MLA"}"#;

#[test]
fn keys_and_serve_refuse_a_disabled_layout_document() {
    let path = std::env::temp_dir().join(format!("hicache-disabled-{}.json", std::process::id()));
    std::fs::write(&path, DISABLED_DOCUMENT).unwrap();
    let file = path.display().to_string();
    let h = "cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72";
    assert_fails(
        &run(&["keys", "--page-hash", h, "--layout", &file], ""),
        2,
        "Auxiliary L3 pools are not rank-replicated/MLA",
    );
    let serve = run(
        &[
            "serve",
            "--events",
            "tcp://127.0.0.1:9",
            "--listen",
            "127.0.0.1:0",
            "--layout",
            &format!("m={file}"),
        ],
        "",
    );
    let err = stderr(&serve);
    assert!(
        !serve.status.success(),
        "serve started with a disabled document: {err}"
    );
    assert!(err.contains("disabled"), "{err}");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn decode_prints_each_captured_message_and_an_error_for_a_bad_line() {
    let text = std::fs::read_to_string(format!("{FIXTURES}/mooncake_frames.jsonl")).unwrap();
    let input = format!("{text}\nnot json\n{{\"frames_hex\": [\"\", \"00\", \"c1\"]}}\n");
    let out = run(&["decode"], &input);
    assert!(out.status.success(), "{}", stderr(&out));
    let printed: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
        .collect();
    let vectors: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(printed.len(), vectors.len() + 2);
    for (v, p) in vectors.iter().zip(&printed) {
        let decoded = &v["decoded"];
        if v.get("frames_hex").is_none() || decoded.is_null() {
            assert!(p["error"].is_string(), "{}: {p}", v["name"]);
            continue;
        }
        let seq = u64::from_str_radix(v["frames_hex"][1].as_str().unwrap(), 16).unwrap();
        assert_eq!(p["seq"], seq, "{}", v["name"]);
        assert_eq!(p["timestamp_ms"], decoded[0], "{}", v["name"]);
        let events = decoded[1].as_array().unwrap();
        assert_eq!(p["events"].as_array().unwrap().len(), events.len());
        for (e, pe) in events.iter().zip(p["events"].as_array().unwrap()) {
            for field in [
                "event_type",
                "object_key",
                "tenant_id",
                "group_id",
                "medium",
                "event_id",
            ] {
                assert_eq!(pe[field], e[field], "{} {field}", v["name"]);
            }
        }
    }
    assert!(printed[vectors.len()]["error"]
        .as_str()
        .unwrap()
        .contains("not JSON"));
    assert!(printed[vectors.len() + 1]["error"].is_string());
}

#[test]
fn decode_reads_a_file_and_fails_in_one_line_on_a_missing_one() {
    let path = format!("{FIXTURES}/mooncake_frames.jsonl");
    let out = run(&["decode", &path], "");
    assert!(out.status.success());
    assert!(stdout(&out).lines().count() >= 3);
    assert_fails(
        &run(&["decode", "/nonexistent.jsonl"], ""),
        1,
        "cannot read /nonexistent.jsonl",
    );
}

#[test]
fn usage_errors_are_one_line_and_exit_2() {
    assert_fails(&run(&["frobnicate"], ""), 2, "unrecognized subcommand");
    assert_fails(&run(&["serve", "--bogus"], ""), 2, "--bogus");
    assert_fails(&run(&["demo", "--duration", "soon"], ""), 2, "duration");
    let help = run(&["--help"], "");
    assert!(help.status.success());
    for sub in ["demo", "serve", "watch", "hash", "keys", "decode"] {
        assert!(stdout(&help).contains(sub), "{sub} in --help");
    }
}

/// Stores probe keys until every watcher has printed a batch (ZeroMQ drops what is published
/// before the subscription arrives); returns the sequence of one more probe, which all see.
fn probe_until(emulator: &Emulator, watchers: &mut [&mut Running]) -> u64 {
    for watcher in watchers.iter_mut() {
        watcher.line("connected", |l| {
            l.contains("connected") && !l.contains("connecting")
        });
    }
    let mut subscribed = vec![false; watchers.len()];
    let mut n = 0;
    let start = Instant::now();
    while subscribed.contains(&false) {
        assert!(start.elapsed() < PATIENCE, "no batch reached every watcher");
        emulator.store([format!("probe-{n}")]);
        n += 1;
        for (watcher, seen) in watchers.iter_mut().zip(&mut subscribed) {
            *seen |= watcher.line_within(Duration::from_millis(100), is_batch_line);
        }
    }
    let seq = emulator.status().published_batches + 1;
    emulator.store(["probe-last".to_owned()]);
    seq
}

/// Starts a JSON and a text watcher of `emulator`'s stream and probes until both follow it;
/// returns them and the sequence of the last probe, which both see.
fn watchers(emulator: &Emulator) -> (Running, Running, u64) {
    let endpoint = emulator.event_endpoint();
    let mut json_watch = Running::start(BIN, &["watch", "--events", &endpoint, "--json"]);
    let mut text_watch = Running::start(BIN, &["watch", "--events", &endpoint]);
    let seq = probe_until(emulator, &mut [&mut json_watch, &mut text_watch]);
    (json_watch, text_watch, seq)
}

#[test]
fn watch_prints_batches_gaps_duplicates_restarts_and_bad_messages() {
    let emulator = emulator();
    let (mut json_watch, mut text_watch, seq) = watchers(&emulator);
    let batch = json_watch.json("the last probe", |v| v["seq"] == seq);
    assert_eq!(
        (batch["events"].as_u64(), batch["stored"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(batch["gap"], Value::Null);

    // A gap: three events lost in the master's queue, then a batch.
    emulator.store_unpublished(["a", "b", "c"].map(String::from));
    emulator.store(["d".to_owned()]);
    let gap = json_watch.json("a gap", |v| !v["gap"].is_null());
    assert_eq!(
        gap["gap"],
        json!({ "expected": seq + 1, "received": seq + 4, "missing": 3 })
    );
    text_watch.line("GAP", |l| {
        l.contains(&format!("GAP: expected {}, 3 missing", seq + 1))
    });

    // The same batch twice: a duplicate. Then the master uses that sequence for other content:
    // a restart.
    let payload = emulator.encode_batch(EventKind::Removed, &["d".to_owned()]);
    let next = (seq + 5).to_be_bytes();
    emulator.send_frames(&[b"", &next, &payload]);
    emulator.send_frames(&[b"", &next, &payload]);
    let dup = json_watch.json("a duplicate", |v| v["duplicate"] == true);
    assert_eq!(
        (dup["seq"].as_u64(), dup["removed"].as_u64()),
        (Some(seq + 5), Some(1))
    );
    emulator.store(["e".to_owned()]);
    let restart = json_watch.json("a restart", |v| !v["restart"].is_null());
    assert_eq!(
        restart["restart"],
        json!({ "last": seq + 5, "received": seq + 5 })
    );
    text_watch.line("RESTART", |l| l.contains("RESTART"));

    // Stray and malformed messages are shown, not applied.
    emulator.send_frames(&[b"other-topic", &next, &payload]);
    emulator.send_frames(&[b"", &[0, 1], &payload]);
    emulator.send_frames(&[b"", &(seq + 6).to_be_bytes(), b"\xc1"]);
    json_watch.json("a stray", |v| v["stray"] == "topic");
    json_watch.json("a bad sequence", |v| v["malformed"].is_string());
    let bad = json_watch.json("a bad payload", |v| v["malformed"].is_string());
    assert!(bad["malformed"].as_str().unwrap().len() > 3);
    text_watch.line("stray", |l| l.starts_with("stray: another topic"));
    text_watch.line("malformed", |l| l.starts_with("malformed: "));

    // The master goes away: the watcher says so and reconnects.
    drop(emulator);
    json_watch.json("a disconnect", |v| v["connection"] == "disconnected");
}

/// Reads the next `lines.len()` lines of `watcher` and asserts each is exactly the one expected.
fn assert_next_lines(watcher: &mut Running, lines: &[String]) {
    for want in lines {
        let got = watcher.line(want, |_| true);
        assert_eq!(&got, want);
    }
}

/// Every line, byte for byte (this test passed unchanged on the hand-written loop `watch` had
/// before it ran on the driver's).
#[test]
fn watch_prints_each_kind_of_message_in_its_exact_format() {
    use hicache_index::{Seq, Timestamp};
    use hicache_index_wire::{encode_payload, MasterFlavor, OwnedBatch, OwnedEvent};
    use EventKind::{Cleared, Removed, Stored, Unknown};

    let emulator = emulator();
    let (mut json_watch, mut text_watch, s) = watchers(&emulator);
    json_watch.json("the last probe", |v| v["seq"] == s);
    text_watch.line("the last probe", |l| l.starts_with(&format!("seq {s} ")));

    let payload = |seq: u64, timestamp: Timestamp, kinds: &[EventKind]| {
        let events = kinds
            .iter()
            .enumerate()
            .map(|(i, &kind)| OwnedEvent::new(kind, format!("key-{seq}-{i}")))
            .collect();
        let batch = OwnedBatch {
            seq: Seq(seq),
            timestamp,
            dp_rank: Some(0),
            events,
        };
        encode_payload(&batch, MasterFlavor::Upstream)
    };
    let seq = |n: u64| (s + n).to_be_bytes();
    let first = payload(
        s + 1,
        Timestamp::Millis(1_700_000_000_123),
        &[Stored, Stored, Removed],
    );
    let after_gap = payload(s + 4, Timestamp::Seconds(1_700_000_001.5), &[Cleared]);
    let other = payload(s + 4, Timestamp::Nil, &[Stored, Unknown]);
    let last = payload(s + 5, Timestamp::Millis(86_399_999), &[]);
    let bad_seq: &[u8] = &[0, 1];
    let messages: [&[&[u8]]; 9] = [
        &[b"", &seq(1), &first],
        &[b"", &seq(4), &after_gap],
        &[b"", &seq(4), &after_gap],
        &[b"", &seq(4), &other],
        &[b"", &seq(5), &last],
        &[b"other", &seq(6), &last],
        &[b"", &seq(6)],
        &[b"", bad_seq, &last],
        &[b"", &seq(6), b"\xc1"],
    ];
    for frames in messages {
        emulator.send_frames(frames);
    }
    let malformed = |frames: &[&[u8]]| {
        hicache_index::decode(frames)
            .expect_err("a malformed message")
            .to_string()
    };
    let bad_seq_error = malformed(messages[7]);
    let bad_payload_error = malformed(messages[8]);
    let text = [
        format!(
            "seq {:<8} 22:13:20.123Z    3 events: 2 stored, 1 removed",
            s + 1
        ),
        format!(
            "seq {:<8} 22:13:21.500Z    1 event: 1 cleared  GAP: expected {}, 2 missing",
            s + 4,
            s + 2
        ),
        format!(
            "seq {:<8} 22:13:21.500Z    1 event: 1 cleared  DUPLICATE of {} (skipped)",
            s + 4,
            s + 4
        ),
        format!(
            "seq {:<8} --:--:--.---Z    2 events: 1 stored, 1 unknown  RESTART: back from {} to {}",
            s + 4,
            s + 4,
            s + 4
        ),
        format!("seq {:<8} 23:59:59.999Z    0 events", s + 5),
        "stray: another topic (\"other\")".to_owned(),
        "stray: 2 frames instead of 3".to_owned(),
        format!("malformed: {bad_seq_error}"),
        format!("malformed: {bad_payload_error}"),
    ];
    let batch_line = |seq: u64, ts: &str, counts: [u8; 5], notes: &str| {
        let [events, stored, removed, cleared, unknown] = counts;
        format!(
            "{{\"seq\":{seq},\"timestamp_ms\":{ts},\"events\":{events},\"stored\":{stored},\
             \"removed\":{removed},\"cleared\":{cleared},\"unknown\":{unknown},{notes}}}"
        )
    };
    let no_notes = "\"gap\":null,\"duplicate\":false,\"restart\":null";
    let json = [
        batch_line(s + 1, "1700000000123", [3, 2, 1, 0, 0], no_notes),
        batch_line(
            s + 4,
            "1700000001500",
            [1, 0, 0, 1, 0],
            &format!(
                "\"gap\":{{\"expected\":{},\"received\":{},\"missing\":2}},\
                 \"duplicate\":false,\"restart\":null",
                s + 2,
                s + 4
            ),
        ),
        batch_line(
            s + 4,
            "1700000001500",
            [1, 0, 0, 1, 0],
            "\"gap\":null,\"duplicate\":true,\"restart\":null",
        ),
        batch_line(
            s + 4,
            "null",
            [2, 1, 0, 0, 1],
            &format!(
                "\"gap\":null,\"duplicate\":false,\"restart\":{{\"last\":{},\"received\":{}}}",
                s + 4,
                s + 4
            ),
        ),
        batch_line(s + 5, "86399999", [0, 0, 0, 0, 0], no_notes),
        "{\"stray\":\"topic\",\"topic\":\"other\"}".to_owned(),
        "{\"frames\":2,\"stray\":\"frame_count\"}".to_owned(),
        json!({ "malformed": bad_seq_error }).to_string(),
        json!({ "malformed": bad_payload_error }).to_string(),
    ];
    assert_next_lines(&mut text_watch, &text);
    assert_next_lines(&mut json_watch, &json);

    // The master goes away: the watcher says so, with the delay of the next attempt.
    drop(emulator);
    let line = text_watch.line("a disconnect", |_| true);
    let delay = line
        .strip_prefix("disconnected; connecting again in ")
        .and_then(|l| l.strip_suffix(" ms"))
        .unwrap_or_else(|| panic!("a disconnect line: {line:?}"));
    assert!(delay.parse::<u64>().is_ok(), "{line:?}");
    let disconnect = json_watch.json("a disconnect", |_| true);
    assert_eq!(disconnect["connection"], "disconnected");
    assert!(disconnect["retry_in_ms"].is_u64(), "{disconnect}");
    assert_eq!(
        disconnect.as_object().map(|o| o.len()),
        Some(2),
        "{disconnect}"
    );
}

#[test]
fn watch_stops_after_count_with_a_summary() {
    let emulator = emulator();
    let endpoint = emulator.event_endpoint();
    let child = Command::new(BIN)
        .args([
            "watch",
            "--events",
            &endpoint,
            "--count",
            "3",
            "--duration",
            "20s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let feeding = stop.clone();
    let feeder = std::thread::spawn(move || {
        let mut n = 0;
        while !feeding.load(std::sync::atomic::Ordering::Relaxed) {
            emulator.store([format!("k-{n}")]);
            n += 1;
            std::thread::sleep(Duration::from_millis(25));
        }
    });
    let out = wait_output(child, Duration::from_secs(30));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = feeder.join();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out)
            .lines()
            .filter(|l| l.starts_with("seq "))
            .count(),
        3,
        "{}",
        stdout(&out)
    );
    assert!(
        stderr(&out).contains("3 messages: 3 batches"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn watch_refuses_a_bad_endpoint_in_one_line() {
    assert_fails(
        &run(&["watch", "--events", "localhost:5557"], ""),
        2,
        "tcp://HOST:PORT",
    );
}

#[test]
fn watch_fails_in_one_line_when_zeromq_refuses_the_endpoint() {
    // Past the syntax check, but libzmq refuses the host: the watch ends, it does not retry.
    let out = run(&["watch", "--events", "tcp://a b:5557"], "");
    assert_fails(
        &out,
        1,
        "cannot subscribe to tcp://a b:5557: Invalid argument",
    );
    assert_eq!(stdout(&out), "connecting to tcp://a b:5557\n");
}

fn query(addr: SocketAddr, body: &Value) -> Value {
    let (status, text) = http(addr, "POST", "/v1/query", body.to_string().as_bytes());
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).expect("a JSON answer")
}

/// Starts `serve` with the LAYOUT flags of these tests (page size 4, TP 2) and `extra`.
fn serve(emulator: &Emulator, extra: &[&str]) -> (Running, SocketAddr) {
    let mut args = vec!["--page-size", "4", "--tp", "2"];
    args.extend_from_slice(extra);
    process::serve(BIN, emulator, &args)
}

#[test]
fn serve_answers_queries_over_http_and_refuses_bad_requests_with_json() {
    let emulator = emulator();
    let (mut service, addr) = serve(
        &emulator,
        &[
            "--max-body-bytes",
            "2000",
            "--verify-interval",
            "300ms",
            "--model",
            "Qwen/Qwen3-8B",
            "--key-prefix",
            "",
        ],
    );
    wait_for("ready", || http(addr, "GET", "/readyz", b"").0 == 200);
    // `--key-prefix ""` makes the keys `_{H}_{r}_{k|v}`.
    let keys: Vec<String> = object_keys(&tokens(1, 3))
        .iter()
        .map(|k| format!("_{k}"))
        .collect();
    emulator.store(keys);
    let ask = json!({ "tokens": tokens(1, 5) });
    wait_for("three pages", || query(addr, &ask)["prefix_pages"] == 3);
    // Issue 29: by default `pages` ends at the first miss; `page_map` asks for every page.
    assert_eq!(query(addr, &ask)["pages"], json!([true, true, true, false]));
    let answer = query(addr, &json!({ "tokens": tokens(1, 5), "page_map": true }));
    assert_eq!(answer["pages"], json!([true, true, true, false, false]));
    assert_eq!(
        (answer["total_pages"].as_u64(), answer["trust"].as_str()),
        (Some(5), Some("live"))
    );
    let hashes: Vec<String> = page_hashes(&tokens(1, 5))
        .iter()
        .map(ToString::to_string)
        .collect();
    let by_hash = query(
        addr,
        &json!({ "page_hashes": hashes, "model": "Qwen/Qwen3-8B", "tenant": "default", "page_map": true }),
    );
    assert_eq!(by_hash["pages"], answer["pages"]);
    let salted = query(
        addr,
        &json!({ "tokens": tokens(1, 5), "cache_salt": "s", "extra_key": null }),
    );
    assert_eq!(salted["prefix_pages"], 0);
    // Issue 28: an empty cache_salt or extra_key is no namespace (SGLang turns "" into None
    // before hashing), so such a request hits the plain pages.
    let empty = query(
        addr,
        &json!({ "tokens": tokens(1, 5), "cache_salt": "", "extra_key": "" }),
    );
    assert_eq!(empty["prefix_pages"], 3, "{empty}");

    for (method, path, body, status, says) in [
        ("POST", "/v1/query", b"{".to_vec(), 400, "malformed"),
        (
            "POST",
            "/v1/query",
            br#"{"tokens": [1], "page_hashes": []}"#.to_vec(),
            400,
            "exactly one",
        ),
        (
            "POST",
            "/v1/query",
            br#"{"page_hashes": ["zz"]}"#.to_vec(),
            400,
            "page_hashes[0]",
        ),
        (
            "POST",
            "/v1/query",
            br#"{"tokens": [1,2,3,4], "model": "other"}"#.to_vec(),
            // Issue 17: 400 with the known models listed (was 404).
            400,
            "known: Qwen/Qwen3-8B",
        ),
        (
            "POST",
            "/v1/query",
            vec![b' '; 3000],
            413,
            "larger than 2000",
        ),
        ("GET", "/v1/query", Vec::new(), 405, "method not allowed"),
        ("GET", "/nope", Vec::new(), 404, "no such endpoint"),
    ] {
        let (got, text) = http(addr, method, path, &body);
        assert_eq!(got, status, "{method} {path}: {text}");
        let error: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON: {text}"));
        assert!(
            error["error"].as_str().unwrap().contains(says),
            "{text} should say {says}"
        );
    }

    let (status, metrics) = http(addr, "GET", "/metrics", b"");
    assert_eq!(status, 200);
    for line in [
        "# TYPE hicache_index_batches_total counter",
        "# TYPE hicache_index_pages gauge",
        "# TYPE hicache_index_unconfirmed_seconds gauge",
        "hicache_index_connected 1",
        "hicache_index_healthy 1",
        "hicache_index_health{state=\"live\"} 1",
        "# TYPE hicache_index_query_duration_seconds histogram",
        "hicache_index_query_duration_seconds_bucket{transport=\"http\",le=\"+Inf\"}",
        "hicache_index_http_rejected_total 5",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    let figure = |name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in\n{metrics}"))
    };
    assert!(figure("hicache_index_batches_total") > 0);
    assert!(figure("hicache_index_resyncs_completed_total") >= 1);
    assert!(figure("hicache_index_pages") >= 3);
    assert!(
        metrics.contains("\nhicache_index_unconfirmed_seconds "),
        "{metrics}"
    );
    assert_eq!(http(addr, "GET", "/healthz", b"").0, 200);

    // SIGTERM stops the service cleanly.
    assert!(service.terminate().success());
}

#[test]
fn readyz_follows_the_index_health() {
    let emulator = emulator();
    let (_service, addr) = serve(&emulator, &[]);
    wait_for("ready", || http(addr, "GET", "/readyz", b"").0 == 200);
    let (_, body) = http(addr, "GET", "/readyz", b"");
    assert_eq!(body, r#"{"health":"live"}"#);
    // The master restarts with its HTTP side down: the index cannot resync, it is not ready.
    emulator.set_http_available(false);
    emulator.restart().expect("the emulator binds again");
    wait_for("not ready", || http(addr, "GET", "/readyz", b"").0 == 503);
    let (_, body) = http(addr, "GET", "/readyz", b"");
    assert!(!body.contains("live"), "{body}");
    assert_eq!(http(addr, "GET", "/healthz", b"").0, 200, "alive all along");
    wait_for("the reason", || {
        http(addr, "GET", "/readyz", b"")
            .1
            .contains(r#""recovering":"the key-list fetch failed; retrying""#)
    });
    emulator.set_http_available(true);
    wait_for("ready again", || http(addr, "GET", "/readyz", b"").0 == 200);
}

#[test]
fn readyz_says_why_an_idle_master_without_status_counters_keeps_the_index_recovering() {
    // An old master gives no `/kv_events/status`; idle after the connect, no batch anchors the
    // key list to the stream: recovering, visibly (issue 26), never live on a guess.
    let emulator = emulator();
    emulator.set_status_available(false);
    let (_service, addr) = serve(&emulator, &[]);
    wait_for("the reason", || {
        let (status, body) = http(addr, "GET", "/readyz", b"");
        status == 503 && body.contains("snapshot unanchored: the master gives no status counters")
    });
    // The master publishes: the stream anchors the next key list, and the index is live.
    emulator.store(object_keys(&tokens(1, 1)));
    wait_for("ready", || http(addr, "GET", "/readyz", b"").0 == 200);
}

#[test]
fn slow_clients_do_not_hold_up_others_and_are_cut_off() {
    let emulator = emulator();
    let (_service, addr) = serve(
        &emulator,
        &["--client-timeout", "5s", "--max-connections", "4"],
    );
    wait_for("ready", || http(addr, "GET", "/readyz", b"").0 == 200);
    // One client stops in the middle of its headers, another in the middle of its body.
    let mut slow_head = TcpStream::connect(addr).unwrap();
    slow_head
        .write_all(b"POST /v1/query HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut slow_body = TcpStream::connect(addr).unwrap();
    slow_body
        .write_all(b"POST /v1/query HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"tokens\"")
        .unwrap();
    let answer = query(addr, &json!({ "tokens": [1, 2, 3, 4] }));
    assert_eq!(answer["total_pages"], 1);
    // Answered while both slow clients are still waiting for theirs: the query did not wait
    // for their timeout (no wall-clock bound, which a loaded machine could break).
    for (stream, what) in [(&slow_head, "headers"), (&slow_body, "body")] {
        stream.set_nonblocking(true).unwrap();
        let peeked = stream.peek(&mut [0u8; 1]);
        assert!(
            matches!(&peeked, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "slow {what} was already answered or closed: {peeked:?}"
        );
        stream.set_nonblocking(false).unwrap();
    }
    // After the client timeout both are answered or closed.
    for (stream, what) in [(&mut slow_head, "headers"), (&mut slow_body, "body")] {
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut response = Vec::new();
        let read = stream.read_to_end(&mut response);
        let text = String::from_utf8_lossy(&response);
        assert!(
            read.is_ok() || !response.is_empty(),
            "slow {what}: {read:?}"
        );
        if what == "body" {
            assert!(text.starts_with("HTTP/1.1 408"), "slow body: {text}");
        }
    }
    // The slots were given back.
    for _ in 0..8 {
        assert_eq!(http(addr, "GET", "/healthz", b"").0, 200);
    }
}

#[test]
fn serve_exits_with_a_clear_error_when_the_masters_publisher_is_off() {
    let emulator = emulator();
    emulator.set_events_enabled(false);
    let endpoint = emulator.event_endpoint();
    let base = emulator.http_base();
    let out = run(
        &[
            "serve",
            "--events",
            &endpoint,
            "--master-http",
            &base,
            "--page-size",
            "4",
            "--tp",
            "2",
            "--listen",
            "127.0.0.1:0",
        ],
        "",
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("hicache-index: error: ") && last.contains("\"enabled\":false"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn serve_refuses_bad_configurations_in_one_line() {
    let layout = ["--page-size", "4", "--tp", "2"];
    let with = |extra: &[&str]| {
        let mut args = vec!["serve"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&layout);
        run(&args, "")
    };
    // Issue 29: the app's own usage errors exit 2, as clap's do (they exited 1).
    assert_fails(&with(&["--events", "127.0.0.1:5557"]), 2, "tcp://HOST:PORT");
    assert_fails(
        &with(&["--events", "tcp://127.0.0.1:0"]),
        2,
        "tcp://HOST:PORT",
    );
    assert_fails(
        &with(&["--events", "tcp://127.0.0.1:1", "--no-verify"]),
        2,
        "--master-http",
    );
    assert_fails(
        &with(&[
            "--events",
            "tcp://127.0.0.1:1",
            "--master-http",
            "ftp://x",
            "--listen",
            "127.0.0.1:0",
        ]),
        2,
        "master HTTP URL",
    );
    assert_fails(
        &with(&[
            "--events",
            "tcp://127.0.0.1:1",
            "--ha-locator",
            "etcd://127.0.0.1:2379",
        ]),
        2,
        "--master-http",
    );
    assert_fails(
        &with(&[
            "--events",
            "tcp://127.0.0.1:1",
            "--master-http",
            "http://127.0.0.1:1",
            "--ha-locator",
            "redis://127.0.0.1:6379",
        ]),
        2,
        "etcd://host:port",
    );
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    assert_fails(
        &with(&["--events", "tcp://127.0.0.1:1", "--listen", &addr]),
        1,
        "cannot listen on",
    );
    assert_fails(
        &run(
            &["serve", "--events", "tcp://127.0.0.1:1", "--page-size", "4"],
            "",
        ),
        2,
        "--tp is required",
    );
    #[cfg(not(feature = "nng"))]
    assert_fails(
        &with(&[
            "--events",
            "tcp://127.0.0.1:1",
            "--nng-listen",
            "tcp://127.0.0.1:9101",
        ]),
        2,
        "built without nng support",
    );
}

/// Runs the demo for `duration` on a small store; checks that it passed, recovered from both
/// faults and had no false hit; returns its output.
fn demo(duration: &str) -> Output {
    let out = run(
        &[
            "demo",
            "--duration",
            duration,
            "--rate",
            "300",
            "--store-pages",
            "3000",
        ],
        "",
    );
    let report = stdout(&out);
    assert!(out.status.success(), "{report}\n{}", stderr(&out));
    for line in [
        "events ingested",
        "latency p50 / p99",
        "hit rate",
        "recovered in",
        "live with new pages in",
        "false hits         0 ",
    ] {
        assert!(report.contains(line), "{line:?} in\n{report}");
    }
    out
}

#[test]
fn demo_ends_with_a_report_and_zero_false_hits() {
    let out = demo("8s");
    assert!(
        stderr(&out).contains("hicache-index demo:"),
        "{}",
        stderr(&out)
    );
    assert_fails(&run(&["demo", "--routers", "0"], ""), 2, "--routers");
}

#[test]
fn demo_runs_on_past_its_duration_until_the_injected_faults_are_recovered_from() {
    // No time at all for the workload: both faults are injected and recovered from after it.
    demo("0s");
}

#[cfg(feature = "nng")]
#[test]
fn serve_answers_pynng_clients_on_nng_like_http() {
    let emulator = emulator();
    let path = std::env::temp_dir().join(format!("hicache-cli-{}.ipc", std::process::id()));
    let url = format!("ipc://{}", path.display());
    let (mut service, addr) = serve(&emulator, &["--nng-listen", &url]);
    service.log_line("the nng URL", |l| l.contains("nng listening on ipc://"));
    wait_for("ready", || http(addr, "GET", "/readyz", b"").0 == 200);
    emulator.store(object_keys(&tokens(1, 3)));
    let ask = json!({ "tokens": tokens(1, 5) });
    wait_for("three pages", || query(addr, &ask)["prefix_pages"] == 3);
    let over_http = query(addr, &ask);
    let python = hicache_index_testkit::peer::venv_python(
        "py-venv-nng",
        &["pynng", "msgpack"],
        "import pynng, msgpack",
    );
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/testkit/py/pynng_client.py"
    );
    let mut child = Command::new(python)
        .args([script, &url])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python starts");
    // Issue 29: a batch over nng too (a map with "queries").
    let requests = json!([ask, { "tokens": [1, 2], "model": "nope" }, { "queries": [ask, { "page_hashes": ["zz"] }] }]);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(requests.to_string().as_bytes())
        .unwrap();
    let out = wait_output(child, Duration::from_secs(60));
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0], over_http);
    assert!(
        lines[1]["error"].as_str().unwrap().contains("model"),
        "{}",
        lines[1]
    );
    assert_eq!(lines[2]["answers"][0], over_http, "{}", lines[2]);
    assert_eq!(lines[2]["answers"][1]["status"], 400, "{}", lines[2]);
    println!(
        "[nng] pynng round trip through the binary: {:.1} µs",
        lines[3]["round_trip_us"]
    );
    let (_, metrics) = http(addr, "GET", "/metrics", b"");
    assert!(
        metrics.contains("hicache_index_query_duration_seconds_count{transport=\"nng\"}"),
        "{metrics}"
    );
    // SIGTERM closes the socket, which removes the socket file.
    assert!(service.terminate().success());
    let _ = std::fs::remove_file(&path);
    // Issue 29: nng carries no token, so a non-loopback nng address is refused unless allowed.
    let base = [
        "serve",
        "--events",
        "tcp://127.0.0.1:5557",
        "--page-size",
        "4",
        "--tp",
        "2",
        "--nng-listen",
        "tcp://0.0.0.0:9101",
        "--check",
    ];
    assert_fails(&run(&base, ""), 2, "refusing a non-loopback nng address");
    let mut allowed = base.to_vec();
    allowed.push("--allow-unauthenticated");
    assert!(run(&allowed, "").status.success());
}
