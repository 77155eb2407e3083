//! Unit tests of the master's HTTP side: URLs and request bytes, the response reader, the
//! jobs' parsers.

use std::io::{Read, Write};
use std::time::Duration;

use hicache_index::{EventsStatus, Seq, Watermark};

use crate::config::HttpConfig;

use super::*;

fn master(url: &str) -> MasterHttp {
    MasterHttp::new(url, HttpConfig::default()).expect("a valid URL")
}

#[test]
fn urls_parse_into_host_port_and_base() {
    let m = master("http://10.0.0.5:9003");
    assert_eq!(m.addr(), ("10.0.0.5", 9003));
    let m = master("http://master/admin/");
    assert_eq!(m.addr(), ("master", 80));
    assert!(String::from_utf8(m.request("/get_all_keys"))
        .unwrap()
        .starts_with("GET /admin/get_all_keys HTTP/1.1\r\nHost: master:80\r\n"));
    assert_eq!(master("http://[::1]:9003").addr(), ("::1", 9003));
    for bad in ["https://x", "http://", "http://h:notaport", "ftp://h:1"] {
        assert!(
            MasterHttp::new(bad, HttpConfig::default()).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn key_lists_are_split_to_keep_targets_short_and_encoded() {
    let config = HttpConfig {
        max_target_bytes: 200,
        ..HttpConfig::default()
    };
    let m = MasterHttp::new("http://h:1", config).expect("a valid URL");
    let keys: Vec<String> = (0..50).map(|i| format!("model/a,b_{i:04}_k")).collect();
    let targets = m.batch_query_targets(&keys);
    assert!(targets.len() > 1);
    let mut seen = 0;
    for t in &targets {
        assert!(t.len() <= 200, "{t}");
        assert!(!t.contains('/') || t.starts_with("/batch_query_keys?keys="));
        seen += t.split('=').nth(1).unwrap().split(',').count();
    }
    assert_eq!(seen, 50);
    assert!(targets[0].contains("model%2Fa%2Cb_0000_k"));
}

#[test]
fn responses_with_length_chunks_or_close_are_read() {
    let mut r = ResponseReader::new(1 << 20);
    assert_eq!(
        r.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab"),
        Ok(None)
    );
    assert_eq!(r.feed(b"cde"), Ok(Some(b"abcde".to_vec())));

    let mut r = ResponseReader::new(1 << 20);
    let chunked =
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
    let (a, b) = chunked.split_at(50);
    assert_eq!(r.feed(a), Ok(None));
    assert_eq!(r.feed(b), Ok(Some(b"abcde".to_vec())));

    let mut r = ResponseReader::new(1 << 20);
    assert_eq!(r.feed(b"HTTP/1.0 200 OK\r\n\r\nk1\nk2\n"), Ok(None));
    assert_eq!(r.feed(b""), Ok(Some(b"k1\nk2\n".to_vec())));
}

#[test]
fn a_chunked_body_fed_one_byte_at_a_time_is_decoded_once() {
    let answer: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
        3;ext=1\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n";
    let mut r = ResponseReader::new(1 << 20);
    // The body is complete with the last chunk's size line (trailers are not read).
    let end = answer.len() - 2;
    for (i, b) in answer[..end].iter().enumerate() {
        let got = r.feed(std::slice::from_ref(b));
        if i + 1 < end {
            assert_eq!(got, Ok(None), "after {} bytes", i + 1);
        } else {
            assert_eq!(got, Ok(Some(b"abc0123456789abcdef".to_vec())));
        }
    }
}

#[test]
fn chunked_bodies_past_the_limit_or_with_bad_sizes_are_errors() {
    let mut r = ResponseReader::new(4);
    let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(r.feed(head), Ok(None));
    assert_eq!(r.feed(b"5\r\nabcde\r\n"), Err(HttpError::TooLarge));
    let mut r = ResponseReader::new(1 << 20);
    assert_eq!(r.feed(head), Ok(None));
    assert!(matches!(r.feed(b"zz\r\n"), Err(HttpError::Malformed(_))));
    let mut r = ResponseReader::new(1 << 20);
    assert_eq!(r.feed(head), Ok(None));
    assert!(matches!(r.feed(b"2\r\nabXY"), Err(HttpError::Malformed(_))));
}

#[test]
fn urls_with_credentials_a_query_or_a_fragment_are_refused() {
    for bad in [
        "http://u:p@h:1",
        "http://h:1/?x=1",
        "http://h:1/#f",
        "http://h:99999",
    ] {
        assert!(
            MasterHttp::new(bad, HttpConfig::default()).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn bad_statuses_truncation_and_oversize_are_errors() {
    let mut r = ResponseReader::new(1 << 20);
    assert_eq!(
        r.feed(b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n"),
        Err(HttpError::Status(503))
    );
    let mut r = ResponseReader::new(1 << 20);
    assert_eq!(
        r.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab"),
        Ok(None)
    );
    assert!(matches!(r.feed(b""), Err(HttpError::Malformed(_))));
    let mut r = ResponseReader::new(4);
    assert_eq!(
        r.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n"),
        Err(HttpError::TooLarge)
    );
    let mut r = ResponseReader::new(1 << 20);
    assert!(matches!(
        r.feed(b"SSH-2.0\r\n\r\n"),
        Err(HttpError::Malformed(_))
    ));
}

#[test]
fn batch_query_answers_name_each_key() {
    let body = br#"{"success":true,"data":{"a":{"ok":true,"size":3},"b":{"ok":false},"c":{}}}"#;
    let mut found = parse_batch_query(body).unwrap();
    found.sort();
    assert_eq!(found, vec![("a".into(), true), ("b".into(), false)]);
    assert!(parse_batch_query(br#"{"success":false}"#).is_err());
    assert!(parse_batch_query(b"<html>").is_err());
}

/// A server on loopback that answers one connection with `answer` (nothing if `None`) and
/// returns the request it read.
fn serve_once(answer: Option<&'static [u8]>) -> (String, std::thread::JoinHandle<Vec<u8>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("a connection");
        let mut request = Vec::new();
        let mut buf = [0u8; 1024];
        while !request.ends_with(b"\r\n\r\n") {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        match answer {
            Some(answer) => stream.write_all(answer).expect("the answer is written"),
            // Silent until the client gives up and closes.
            None => while stream.read(&mut buf).is_ok_and(|n| n > 0) {},
        }
        request
    });
    (url, server)
}

#[test]
fn get_reads_the_body_of_a_real_response() {
    let (url, server) = serve_once(Some(
        b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nk1\nk2\n",
    ));
    assert_eq!(master(&url).get("/get_all_keys"), Ok(b"k1\nk2\n".to_vec()));
    let request = server.join().expect("the server ends");
    assert!(request.starts_with(b"GET /get_all_keys HTTP/1.1\r\n"));
}

#[test]
fn get_gives_up_on_a_silent_server_with_a_timeout() {
    let (url, server) = serve_once(None);
    let config = HttpConfig {
        request_timeout: Duration::from_millis(200),
        ..HttpConfig::default()
    };
    let m = MasterHttp::new(&url, config).expect("a valid URL");
    assert_eq!(m.get("/get_all_keys"), Err(HttpError::Timeout));
    server.join().expect("the server ends");
}

#[test]
fn a_job_that_cannot_run_reports_its_request_as_failed() {
    let outcome = HttpJob::Snapshot { request: 7 }.failed(HttpError::Timeout);
    assert_eq!(
        outcome,
        HttpOutcome::Snapshot {
            request: 7,
            watermark: None,
            keys: Err(HttpError::Timeout)
        }
    );
    let job = HttpJob::Verify {
        request: 8,
        keys: vec!["k".into()],
    };
    assert_eq!(job.request(), 8);
    assert!(matches!(
        job.failed(HttpError::Timeout),
        HttpOutcome::Verify { request: 8, ref results, error: Some(HttpError::Timeout) }
            if results.is_empty()
    ));
}

#[test]
fn the_watermark_is_published_batches_plus_dropped_events() {
    let body = br#"{"enabled":true,"published_batches":70,"dropped_events":11593,"skipped_unparsed_keys":0}"#;
    assert_eq!(parse_watermark(body), Some(Seq(11_663).into()));
    let body =
        br#"{"enabled":true,"published_batches":70,"published_events":1200,"dropped_events":3}"#;
    let seen = Watermark {
        seq: Seq(73),
        events: Some(1200),
    };
    assert_eq!(parse_watermark(body), Some(seen));
    assert_eq!(parse_watermark(br#"{"enabled":true}"#), None);
    assert_eq!(parse_watermark(b"not found"), None);
}

/// `/metrics` of a real Mooncake master 0.3.14 with one store client mounted (captured on
/// loopback, spec section 8).
const REAL_METRICS: &[u8] = include_bytes!("mooncake_0_3_14_metrics.txt");

#[test]
fn the_real_masters_metrics_give_every_store_signal() {
    let signals = parse_signals(REAL_METRICS).expect("the Prometheus text format");
    for family in hicache_index::signals::STORE_SIGNAL_FAMILIES {
        assert!(signals.get(family).is_some(), "{family} missing");
    }
    assert_eq!(
        signals.get("master_remount_segment_requests_total"),
        Some(1)
    );
    assert_eq!(
        signals.get("master_unmount_segment_requests_total"),
        Some(0)
    );
}

#[test]
fn a_moved_counter_is_a_change_and_other_families_are_not_watched() {
    let before = parse_signals(REAL_METRICS).expect("parses");
    let text = String::from_utf8(REAL_METRICS.to_vec()).expect("UTF-8");
    let moved = text.replace(
        "master_unmount_segment_requests_total 0",
        "master_unmount_segment_requests_total 1",
    );
    let after = parse_signals(moved.as_bytes()).expect("parses");
    assert_eq!(
        after.changed_since(&before),
        Some("master_unmount_segment_requests_total")
    );
    let other = text.replace("master_active_clients 1", "master_active_clients 2");
    let other = parse_signals(other.as_bytes()).expect("parses");
    assert_eq!(other.changed_since(&before), None);
    let none = parse_signals(b"# HELP x y\n# TYPE x counter\nx_total 3\n").expect("parses");
    assert!(none.is_empty());
}

#[test]
fn events_status_tells_enabled_disabled_and_inactive_apart() {
    assert_eq!(
        parse_events_status(Some(br#"{"enabled":true,"published_batches":0}"#)),
        EventsStatus::Enabled
    );
    assert_eq!(
        parse_events_status(Some(br#"{"enabled":false}"#)),
        EventsStatus::Disabled
    );
    assert_eq!(
        parse_events_status(Some(
            br#"{"success":false,"error_code":-1011,"error_message":"service plane is not active"}"#
        )),
        EventsStatus::Inactive
    );
    assert_eq!(parse_events_status(None), EventsStatus::Unknown);
}
