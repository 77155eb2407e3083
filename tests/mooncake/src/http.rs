//! A tiny blocking HTTP/1.1 client (`GET`, and `POST` for `hicache-index serve`) over
//! `std::net::TcpStream`, and the master's admin calls.
//!
//! The Mooncake master's admin side (cinatra) answers with `Content-Length`; chunked bodies and
//! bodies delimited by the connection's close are read too. Every request has a deadline.
//!
//! It is deliberately not the transports' client (`hicache_index_driver::MasterHttp` and its
//! response reader and `/batch_query_keys` parser): the scenarios judge the index against what
//! this client reads from the master, so a bug in the production client must not be shared by
//! the judge.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

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

/// Sends one request (`Connection: close`) and reads the whole answer, within `timeout`.
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), String> {
    let deadline = Instant::now() + timeout;
    let mut stream =
        TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect {addr}: {e}"))?;
    stream.set_nodelay(true).ok();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: hicache-index-mooncake-tests\r\n\
         Accept: */*\r\nConnection: close\r\n"
    );
    match body {
        Some(body) => request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )),
        None => request.push_str("\r\n"),
    }
    stream
        .set_write_timeout(Some(timeout))
        .and_then(|()| stream.write_all(request.as_bytes()))
        .map_err(|e| format!("send {method} {addr}{}: {e}", short(path)))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        if let Some(done) = parse_response(&buf, false)? {
            return Ok(done);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("{method} {addr}{}: timed out", short(path)));
        }
        stream.set_read_timeout(Some(left)).ok();
        match stream.read(&mut chunk) {
            Ok(0) => {
                return parse_response(&buf, true)?.ok_or_else(|| {
                    format!("{method} {addr}{}: connection closed early", short(path))
                });
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("{method} {addr}{}: {e}", short(path))),
        }
    }
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

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
    }
}

/// Parses a complete response from `buf`; `None` while more bytes are needed. `closed`: the
/// peer closed, so a body without length ends here.
pub(crate) fn parse_response(buf: &[u8], closed: bool) -> Result<Option<(u16, Vec<u8>)>, String> {
    let Some(head_end) = find(buf, b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| "response head is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(value.parse::<usize>().map_err(|_| "bad Content-Length")?);
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            && value.to_ascii_lowercase().contains("chunked")
        {
            chunked = true;
        }
    }
    let body = &buf[head_end + 4..];
    if chunked {
        return Ok(dechunk(body)?.map(|b| (status, b)));
    }
    match length {
        Some(n) if body.len() >= n => Ok(Some((status, body[..n].to_vec()))),
        Some(_) => Ok(None),
        None if closed => Ok(Some((status, body.to_vec()))),
        None => Ok(None),
    }
}

/// Decodes a chunked body; `None` while incomplete.
fn dechunk(mut body: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = find(body, b"\r\n") else {
            return Ok(None);
        };
        let size_text = std::str::from_utf8(&body[..line_end]).map_err(|_| "bad chunk size")?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| "bad chunk size")?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Ok(Some(out));
        }
        if body.len() < size + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

pub(crate) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
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

    #[test]
    fn reads_content_length_chunked_and_close_delimited_bodies() {
        let fixed = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcdef";
        assert_eq!(
            parse_response(fixed, false).unwrap(),
            Some((200, b"abc".to_vec()))
        );
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n1\r\nc\r\n0\r\n\r\n";
        assert_eq!(
            parse_response(chunked, false).unwrap(),
            Some((200, b"abc".to_vec()))
        );
        let open = b"HTTP/1.1 404 Not Found\r\n\r\nnope";
        assert_eq!(parse_response(open, false).unwrap(), None);
        assert_eq!(
            parse_response(open, true).unwrap(),
            Some((404, b"nope".to_vec()))
        );
    }

    #[test]
    fn percent_encodes_all_but_unreserved() {
        let mut s = String::new();
        percent_encode("a-b_c.d~e/f,g", &mut s);
        assert_eq!(s, "a-b_c.d~e%2Ff%2Cg");
    }
}
