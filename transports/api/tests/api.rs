//! The shared request and answer, through their public API (the tools' tests are beside
//! their code in the `hicache-index-app` crate).

use hicache_index::{
    Config, EventKind, Instant, Layout, ModelLayout, Namespace, PageHashes, Session, SglangParams,
};
use hicache_index_api::{
    answer, respond_batch_json, respond_json, respond_msgpack, ApiError, Limits, QueryRequest,
    MAX_ECHO_BYTES,
};
use hicache_index_shortcuts::Shortcuts;
use hicache_index_wire::{encode_message, MasterFlavor, OwnedBatch, OwnedEvent};
use quickcheck_macros::quickcheck;
use serde_json::Value;

fn session_with_first_page(layout: &Layout) -> Session {
    let mut session = Session::new(Config {
        layouts: vec![ModelLayout {
            model: None,
            layout: layout.clone(),
        }],
        ..Config::default()
    })
    .unwrap();
    let tokens: Vec<u32> = (1..=10).collect();
    let first = layout.page_hashes(&tokens, Namespace::NONE).next().unwrap();
    let events = layout
        .object_keys(&first)
        .map(|k| OwnedEvent::new(EventKind::Stored, k))
        .collect();
    let batch = OwnedBatch {
        seq: hicache_index::Seq(1),
        timestamp: hicache_index::Timestamp::Millis(1),
        dp_rank: Some(0),
        events,
    };
    let frames = encode_message(b"", &batch, MasterFlavor::Upstream);
    let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let _ = session.feed(Instant::ZERO, &refs);
    session
}

#[test]
fn a_json_token_query_answers_prefix_pages_and_map() {
    let layout = Layout::from_sglang(&SglangParams::new(4, 2)).unwrap();
    let session = session_with_first_page(&layout);
    let q = QueryRequest::from_json(br#"{"tokens": [1,2,3,4,5,6,7,8,9,10]}"#, &Limits::default())
        .unwrap();
    let a = answer(&session, &q).unwrap();
    assert_eq!(
        (a.prefix_pages, a.pages.clone(), a.total_pages),
        (1, vec![true, false], 2)
    );
    let json: Value = serde_json::from_str(&a.to_json()).unwrap();
    assert_eq!(json["prefix_pages"], 1);
    assert_eq!(json["trust"], "disconnected");
}

#[test]
fn a_page_hash_query_in_msgpack_answers_the_same() {
    let layout = Layout::from_sglang(&SglangParams::new(4, 2)).unwrap();
    let session = session_with_first_page(&layout);
    let tokens: Vec<u64> = (1..=10).collect();
    let hashes: Vec<String> = PageHashes::new(&tokens, 4, false, Namespace::NONE)
        .map(|h| h.to_string())
        .collect();
    let request = QueryRequest {
        page_hashes: Some(hashes),
        ..QueryRequest::default()
    };
    let body = rmp_serde::to_vec_named(&request).unwrap();
    let q = QueryRequest::from_msgpack(&body, &Limits::default()).unwrap();
    let a = answer(&session, &q).unwrap();
    assert_eq!(a.pages, vec![true, false]);
    let back: hicache_index_api::QueryAnswer = rmp_serde::from_slice(&a.to_msgpack()).unwrap();
    assert_eq!(back, a);
}

#[test]
fn a_namespaced_query_misses_plain_pages() {
    let layout = Layout::from_sglang(&SglangParams::new(4, 2)).unwrap();
    let session = session_with_first_page(&layout);
    let body = br#"{"tokens": [1,2,3,4,5,6,7,8], "cache_salt": "tenant-a"}"#;
    let a = answer(
        &session,
        &QueryRequest::from_json(body, &Limits::default()).unwrap(),
    )
    .unwrap();
    assert_eq!(a.prefix_pages, 0);
}

#[test]
fn bad_requests_get_typed_errors_with_4xx_statuses() {
    let limits = Limits {
        max_body_bytes: 64,
        max_tokens: 4,
        max_page_hashes: 2,
        ..Limits::default()
    };
    let cases: Vec<(&[u8], u16)> = vec![
        (b"{", 400),
        (b"[1,2,3]", 400),
        (b"{}", 400),
        (br#"{"tokens": [1], "page_hashes": []}"#, 400),
        (br#"{"tokens": [1,2,3,4,5]}"#, 413),
        (br#"{"tokens": [-1]}"#, 400),
        (br#"{"tokens": [1.5]}"#, 400),
        (br#"{"page_hashes": ["zz"]}"#, 400),
        (br#"{"page_hashes": ["a","b","c"]}"#, 413),
        (&[b' '; 65], 413),
    ];
    for (body, status) in cases {
        let err = QueryRequest::from_json(body, &limits).unwrap_err();
        assert_eq!(
            err.status(),
            status,
            "{} -> {err}",
            String::from_utf8_lossy(body)
        );
        let json: Value = serde_json::from_str(&err.to_json()).unwrap();
        assert!(json["error"].is_string());
    }
}

#[test]
fn an_unknown_model_is_a_400() {
    // Issue 17: 400 with the list of known models (was 404 without one).
    let layout = Layout::from_sglang(&SglangParams::new(4, 2)).unwrap();
    let session = session_with_first_page(&layout);
    let q = QueryRequest::from_json(br#"{"tokens": [1], "model": "nope"}"#, &Limits::default())
        .unwrap();
    let err = answer(&session, &q).unwrap_err();
    assert_eq!(err.status(), 400);
    let json: serde_json::Value = serde_json::from_str(&err.to_json()).unwrap();
    assert!(
        json["error"].as_str().unwrap().contains("\"nope\""),
        "{json}"
    );
    assert!(json["models"].is_array(), "{json}");
}

#[test]
fn tokens_above_u32_hash_in_the_wide_form() {
    let layout = Layout::from_sglang(&SglangParams::new(4, 2)).unwrap();
    let session = session_with_first_page(&layout);
    let body = br#"{"tokens": [1,2,3,4294967296,5,6,7,8]}"#;
    let a = answer(
        &session,
        &QueryRequest::from_json(body, &Limits::default()).unwrap(),
    )
    .unwrap();
    assert_eq!((a.prefix_pages, a.total_pages), (0, 2));
}

#[quickcheck]
fn request_decoding_never_panics(body: Vec<u8>) -> bool {
    let limits = Limits::default();
    let _ = QueryRequest::from_json(&body, &limits);
    let _ = QueryRequest::from_msgpack(&body, &limits);
    true
}

#[test]
fn errors_read_as_one_line() {
    let e = ApiError::TooMany {
        what: "tokens",
        limit: 4,
    };
    assert_eq!(e.to_string(), "more than 4 tokens");
}

#[test]
fn a_msgpack_length_claiming_billions_is_refused_before_decoding() {
    let mut body = vec![0xdd; 22];
    body.extend_from_slice(br#"{"tokens":[1]}"#);
    let err = QueryRequest::from_msgpack(&body, &Limits::default()).unwrap_err();
    assert!(err.to_string().contains("claims more"), "{err}");
}

fn two_model_session() -> Session {
    let layout = |tp| Layout::from_sglang(&SglangParams::new(4, tp)).unwrap();
    Session::new(Config {
        layouts: vec![
            ModelLayout {
                model: Some("alpha".into()),
                layout: layout(2),
            },
            ModelLayout {
                model: Some("beta".into()),
                layout: layout(4),
            },
        ],
        ..Config::default()
    })
    .unwrap()
}

#[test]
fn a_request_without_a_model_among_two_is_a_400_listing_both() {
    let session = two_model_session();
    let q = QueryRequest::from_json(br#"{"tokens": [1,2,3,4]}"#, &Limits::default()).unwrap();
    let err = answer(&session, &q).unwrap_err();
    assert_eq!(err.status(), 400);
    let json: Value = serde_json::from_str(&err.to_json()).unwrap();
    assert_eq!(json["models"], serde_json::json!(["alpha", "beta"]));
    let named = QueryRequest::from_json(
        br#"{"tokens": [1,2,3,4], "model": "beta"}"#,
        &Limits::default(),
    )
    .unwrap();
    assert_eq!(answer(&session, &named).unwrap().total_pages, 1);
    let unknown = QueryRequest::from_json(
        br#"{"tokens": [1,2,3,4], "model": "gamma"}"#,
        &Limits::default(),
    )
    .unwrap();
    let err = answer(&session, &unknown).unwrap_err();
    assert_eq!(err.status(), 400);
    assert!(err.to_string().contains("alpha, beta"), "{err}");
}

#[test]
fn a_model_whose_workers_disagree_answers_a_miss_with_the_reason() {
    let mut session = Session::new(Config::default()).unwrap();
    let worker = |tp| hicache_index::WorkerInfo {
        model: Some("m".into()),
        layout: Some(Layout::from_sglang(&SglangParams::new(4, tp)).unwrap()),
        ..hicache_index::WorkerInfo::default()
    };
    let _ = session.handle_worker(Instant::ZERO, "http://w1", Some(worker(2)));
    let _ = session.handle_worker(Instant::ZERO, "http://w2", Some(worker(4)));
    let q = QueryRequest::from_json(
        br#"{"tokens": [1,2,3,4], "model": "m"}"#,
        &Limits::default(),
    )
    .unwrap();
    let a = answer(&session, &q).unwrap();
    assert_eq!((a.prefix_pages, a.trust.as_str()), (0, "layout_conflict"));
    let json: Value = serde_json::from_str(&a.to_json()).unwrap();
    assert!(
        json["reason"].as_str().unwrap().contains("http://w2"),
        "{json}"
    );
    // Without a model, the one model known is still the one asked about.
    let q = QueryRequest::from_json(br#"{"tokens": [1,2,3,4]}"#, &Limits::default()).unwrap();
    assert_eq!(answer(&session, &q).unwrap().trust, "layout_conflict");
}

#[test]
fn an_unknown_field_is_a_400_naming_it() {
    // A typo of `cache_salt` would otherwise be answered from the unsalted namespace.
    let body = br#"{"tokens": [1,2,3,4], "cachesalt": "oops"}"#;
    let err = QueryRequest::from_json(body, &Limits::default()).unwrap_err();
    assert_eq!(err.status(), 400);
    assert!(
        err.to_string().contains("unknown field `cachesalt`"),
        "{err}"
    );
    let body = rmp_serde::to_vec_named(&serde_json::json!({"tokens": [1], "tenent": "x"})).unwrap();
    let err = QueryRequest::from_msgpack(&body, &Limits::default()).unwrap_err();
    assert!(err.to_string().contains("tenent"), "{err}");
}

#[test]
fn errors_repeat_at_most_a_few_hundred_bytes_of_the_input() {
    let layout = Layout::from_sglang(&SglangParams::new(4, 2)).unwrap();
    let session = session_with_first_page(&layout);
    let long = "m".repeat(3 << 20);
    for body in [
        format!(r#"{{"tokens": [1], "model": "{long}"}}"#),
        format!(r#"{{"tokens": [1], "{long}": 1}}"#),
        format!(r#"{{"tokens": "{long}"}}"#),
    ] {
        let limits = Limits {
            max_body_bytes: 8 << 20,
            ..Limits::default()
        };
        let (status, text) = respond_json(&session, body.as_bytes(), &limits);
        assert_eq!(status, 400, "{}", &text[..100]);
        let error: Value = serde_json::from_str(&text).unwrap();
        let message = error["error"].as_str().unwrap();
        assert!(
            message.len() < MAX_ECHO_BYTES + 100,
            "{} bytes",
            message.len()
        );
        assert!(message.contains("..."), "{message}");
    }
}

#[test]
fn a_prefix_query_answers_pages_until_the_first_miss_and_a_page_map_every_page() {
    let layout = Layout::from_sglang(&SglangParams::new(4, 2)).unwrap();
    let session = session_with_first_page(&layout);
    let tokens: Vec<u32> = (1..=40).collect();
    let body = serde_json::json!({ "tokens": tokens }).to_string();
    let (status, text) = respond_json(&session, body.as_bytes(), &Limits::default());
    let a: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(status, 200);
    assert_eq!(a["pages"], serde_json::json!([true, false]), "{a}");
    assert_eq!(
        (a["prefix_pages"].as_u64(), a["total_pages"].as_u64()),
        (Some(1), Some(10))
    );
    let body = serde_json::json!({ "tokens": tokens, "page_map": true }).to_string();
    let (_, text) = respond_json(&session, body.as_bytes(), &Limits::default());
    let a: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(a["pages"].as_array().unwrap().len(), 10, "{a}");
    assert_eq!(a["prefix_pages"], 1);
}

#[test]
fn a_batch_answers_each_query_in_order_and_refuses_only_the_bad_ones() {
    let layout = Layout::from_sglang(&SglangParams::new(4, 2)).unwrap();
    let session = session_with_first_page(&layout);
    let batch = serde_json::json!({ "queries": [
        { "tokens": [1,2,3,4,5,6,7,8] },
        { "page_hashes": ["zz"] },
        { "tokens": [1,2,3,4], "model": "nope" },
        { "tokens": [9,9,9,9] },
    ]});
    let (status, text) =
        respond_batch_json(&session, batch.to_string().as_bytes(), &Limits::default());
    assert_eq!(status, 200, "{text}");
    let answers: Value = serde_json::from_str(&text).unwrap();
    let answers = answers["answers"].as_array().unwrap();
    assert_eq!(answers.len(), 4);
    assert_eq!(answers[0]["prefix_pages"], 1);
    assert_eq!(answers[1]["status"], 400);
    assert!(answers[1]["error"]
        .as_str()
        .unwrap()
        .contains("page_hashes[0]"));
    assert!(answers[2]["error"].as_str().unwrap().contains("nope"));
    assert_eq!(answers[3]["prefix_pages"], 0);
    // The same over msgpack, single and batch.
    let body = rmp_serde::to_vec_named(&batch).unwrap();
    let back: Value =
        rmp_serde::from_slice(&respond_msgpack(&session, &body, &Limits::default())).unwrap();
    assert_eq!(back["answers"].as_array().unwrap().len(), 4, "{back}");
    assert_eq!(back["answers"][0]["prefix_pages"], 1);
    let body = rmp_serde::to_vec_named(&serde_json::json!({ "tokens": [1,2,3,4] })).unwrap();
    let back: Value =
        rmp_serde::from_slice(&respond_msgpack(&session, &body, &Limits::default())).unwrap();
    assert_eq!(back["prefix_pages"], 1);
    // Too many queries, or an unknown field anywhere, refuse the whole batch.
    let limits = Limits {
        max_batch_queries: 2,
        ..Limits::default()
    };
    let (status, _) = respond_batch_json(&session, batch.to_string().as_bytes(), &limits);
    assert_eq!(status, 413);
    let (status, text) = respond_batch_json(
        &session,
        br#"{"queries": [{"tokens": [1], "x": 1}]}"#,
        &limits,
    );
    assert_eq!(status, 400);
    assert!(text.contains("unknown field `x`"), "{text}");
}
