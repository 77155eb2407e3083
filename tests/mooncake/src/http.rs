//! A blocking HTTP/1.1 client (`GET`, and `POST` for `hicache-index serve`) on `ureq`, and the
//! master's admin calls. Every request has a deadline.
//!
//! It is deliberately not the transports' client (`hicache_index_driver::MasterHttp` and its
//! response reader and `/batch_query_keys` parser): the scenarios judge the index against what
//! this client reads from the master, so a bug in the production client must not be shared by
//! the judge.

use std::net::SocketAddr;
use std::time::Duration;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// The master's answer to `GET /kv_events/status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvEventsStatus {
    /// Whether the publisher is on.
    pub enabled: bool,
    /// Batches sent.
    pub published_batches: u64,
    /// Events sent.
    pub published_events: u64,
    /// Events dropped by the master's bounded queue (each skips one sequence number).
    pub dropped_events: u64,
    /// The whole JSON document, for fields this struct does not name.
    pub raw: String,
}

/// Sends `GET path` to `addr` and returns the status code and body, within `timeout`.
pub fn get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<(u16, Vec<u8>), String> {
    request(addr, "GET", path, None, timeout)
}

/// Sends `POST path` with a JSON `body` to `addr` and returns the status code and body, within
/// `timeout`.
pub fn post_json(
    addr: SocketAddr,
    path: &str,
    body: &str,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), String> {
    request(addr, "POST", path, Some(body), timeout)
}

/// The largest body read (a key list of the load scenario is a few MB).
const MAX_BODY: u64 = 1 << 30;

/// Sends one request and reads the whole answer, whatever its status, within `timeout`.
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .user_agent("hicache-index-mooncake-tests")
        .build()
        .into();
    let url = format!("http://{addr}{path}");
    let fail = |e: ureq::Error| format!("{method} {addr}{}: {e}", short(path));
    let mut response = match body {
        Some(body) => agent
            .post(&url)
            .header("Content-Type", "application/json")
            .send(body),
        None => agent.get(&url).call(),
    }
    .map_err(fail)?;
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(MAX_BODY)
        .read_to_vec()
        .map_err(fail)?;
    Ok((status, body))
}

/// Sends `GET path` and returns the body of a `200` answer as text.
pub fn get_ok(addr: SocketAddr, path: &str, timeout: Duration) -> Result<String, String> {
    let (status, body) = get(addr, path, timeout)?;
    let text =
        String::from_utf8(body).map_err(|_| format!("GET {}: body is not UTF-8", short(path)))?;
    if status != 200 {
        return Err(format!(
            "GET {}: status {status}: {}",
            short(path),
            short(&text)
        ));
    }
    Ok(text)
}

/// `GET /get_all_keys`: every key of the default tenant, one per line, verbatim (a line ends in
/// `\n` only; nothing is trimmed).
pub fn get_all_keys(addr: SocketAddr, timeout: Duration) -> Result<Vec<String>, String> {
    let body = get_ok(addr, "/get_all_keys", timeout)?;
    Ok(body
        .split('\n')
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect())
}

/// `GET /batch_query_keys?keys=...`: whether each key exists, in the order asked.
///
/// Asks in slices of at most 256 keys so that no request line grows past a few tens of KiB.
pub fn batch_query_keys(
    addr: SocketAddr,
    keys: &[String],
    timeout: Duration,
) -> Result<Vec<(String, bool)>, String> {
    let mut out = Vec::with_capacity(keys.len());
    for slice in keys.chunks(256) {
        let mut path = String::from("/batch_query_keys?keys=");
        for (i, key) in slice.iter().enumerate() {
            if i > 0 {
                path.push(',');
            }
            percent_encode(key, &mut path);
        }
        let body = get_ok(addr, &path, timeout)?;
        let doc: serde_json::Value = serde_json::from_str(&body)
            .map_err(|e| format!("batch_query_keys: {e}: {}", short(&body)))?;
        if doc["success"] != serde_json::Value::Bool(true) {
            return Err(format!("batch_query_keys: not a success: {}", short(&body)));
        }
        let data = doc["data"]
            .as_object()
            .ok_or_else(|| format!("batch_query_keys: no data: {}", short(&body)))?;
        for key in slice {
            let entry = data
                .get(key)
                .ok_or_else(|| format!("batch_query_keys: no answer for {key}"))?;
            out.push((key.clone(), entry["ok"] == serde_json::Value::Bool(true)));
        }
    }
    Ok(out)
}

/// `GET /kv_events/status`.
pub fn kv_events_status(addr: SocketAddr, timeout: Duration) -> Result<KvEventsStatus, String> {
    let raw = get_ok(addr, "/kv_events/status", timeout)?;
    let doc: serde_json::Value =
        serde_json::from_str(&raw).map_err(|e| format!("kv_events/status: {e}: {raw}"))?;
    let n = |f: &str| doc[f].as_u64().unwrap_or(0);
    Ok(KvEventsStatus {
        enabled: doc["enabled"].as_bool().unwrap_or(false),
        published_batches: n("published_batches"),
        published_events: n("published_events"),
        dropped_events: n("dropped_events"),
        raw,
    })
}

/// Everything but RFC 3986's unreserved characters (`A-Z a-z 0-9 - . _ ~`).
const KEY_ENCODE_SET: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(s: &str, out: &mut String) {
    out.extend(utf8_percent_encode(s, KEY_ENCODE_SET));
}

/// The first 200 characters of `s`, for error messages.
fn short(s: &str) -> &str {
    match s.char_indices().nth(200) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers one connection on loopback with `answer` and closes it.
    fn serve_once(answer: &'static [u8]) -> SocketAddr {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
        let addr = listener.local_addr().expect("an address");
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().expect("a connection");
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            stream.write_all(answer).expect("the answer is written");
        });
        addr
    }

    #[test]
    fn reads_content_length_chunked_and_close_delimited_bodies() {
        let timeout = Duration::from_secs(5);
        let fixed = serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcdef");
        assert_eq!(get(fixed, "/", timeout).unwrap(), (200, b"abc".to_vec()));
        let chunked = serve_once(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n1\r\nc\r\n0\r\n\r\n",
        );
        assert_eq!(get(chunked, "/", timeout).unwrap(), (200, b"abc".to_vec()));
        let open = serve_once(b"HTTP/1.1 404 Not Found\r\n\r\nnope");
        assert_eq!(get(open, "/", timeout).unwrap(), (404, b"nope".to_vec()));
    }

    #[test]
    fn percent_encodes_all_but_unreserved() {
        let mut s = String::new();
        percent_encode("a-b_c.d~e/f,g", &mut s);
        assert_eq!(s, "a-b_c.d~e%2Ff%2Cg");
    }
}
