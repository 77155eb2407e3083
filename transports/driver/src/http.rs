//! The master's HTTP admin side: request bytes, an HTTP/1.1 response reader (sans IO, on
//! `httparse`), a blocking `GET`, and the three jobs the core asks for. URLs are parsed by `url`,
//! keys percent-encoded by `percent-encoding`.
//!
//! Every job runs on a thread of its own ([`HttpJob::run`], started by the [`crate::Driver`]),
//! never on the runtime's workers: reading a key list of tens of megabytes takes a CPU for a
//! while, and the loop must keep taking events meanwhile.
//! ```text
//! Effect::FetchSnapshot -> GET {base}/kv_events/status             -> watermark
//!                          GET {base}/get_all_keys                 -> lines  -> snapshot chunks
//! Effect::VerifyKeys    -> GET {base}/batch_query_keys?keys=k1,k2  -> {"success":true,
//!                          (split so every target stays short)         "data":{"k1":{"ok":true}}}
//!                                                                     -> handle_verify_result
//! Effect::ReadStatus    -> GET {base}/kv_events/status             -> Input::Status
//! ```

use std::fmt;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use hicache_index::{Seq, Watermark};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use url::{Host, Url};

use crate::config::{Error, HttpConfig};

/// Where the master's HTTP side is, and the client's limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MasterHttp {
    host: String,
    port: u16,
    base_path: String,
    config: HttpConfig,
}

/// Why an HTTP request to the master failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HttpError {
    /// Connecting, writing or reading failed.
    Io(String),
    /// The request did not complete within the timeout.
    Timeout,
    /// The master answered with a status other than 200.
    Status(u16),
    /// The answer was not a readable HTTP response or not the JSON expected.
    Malformed(&'static str),
    /// The body was larger than allowed.
    TooLarge,
    /// `/kv_events/status` said `"enabled":false`: the master publishes no events.
    EventsDisabled,
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Io(e) => write!(f, "io error: {e}"),
            HttpError::Timeout => f.write_str("timed out"),
            HttpError::Status(s) => write!(f, "status {s}"),
            HttpError::Malformed(what) => write!(f, "malformed answer: {what}"),
            HttpError::TooLarge => f.write_str("answer too large"),
            HttpError::EventsDisabled => f.write_str("the master's KV event publisher is off"),
        }
    }
}

impl std::error::Error for HttpError {}

impl From<std::io::Error> for HttpError {
    fn from(e: std::io::Error) -> HttpError {
        HttpError::Io(e.to_string())
    }
}

impl MasterHttp {
    /// Parses `http://host[:port][/path]` (port 80 by default) with the `url` crate; a URL
    /// with credentials, a query or a fragment is refused.
    pub fn new(url: &str, config: HttpConfig) -> Result<MasterHttp, Error> {
        let bad = || Error::MasterHttpUrl(url.to_owned());
        let parsed = Url::parse(url).map_err(|_| bad())?;
        if parsed.scheme() != "http"
            || !parsed.username().is_empty()
            || parsed.password().is_some()
            || parsed.query().is_some()
            || parsed.fragment().is_some()
        {
            return Err(bad());
        }
        let host = match parsed.host().ok_or_else(bad)? {
            Host::Domain(name) if !name.is_empty() => name.to_owned(),
            Host::Domain(_) => return Err(bad()),
            Host::Ipv4(ip) => ip.to_string(),
            Host::Ipv6(ip) => ip.to_string(),
        };
        Ok(MasterHttp {
            host,
            port: parsed.port_or_known_default().ok_or_else(bad)?,
            base_path: parsed.path().trim_end_matches('/').to_owned(),
            config,
        })
    }

    /// Returns the same client for another host (an HA leader's), port and path kept.
    pub fn with_host(&self, host: &str) -> MasterHttp {
        MasterHttp {
            host: host.to_owned(),
            ..self.clone()
        }
    }

    /// Returns the base URL (`http://host:port/path`), for messages.
    pub fn url(&self) -> String {
        match self.host.contains(':') {
            true => format!("http://[{}]:{}{}", self.host, self.port, self.base_path),
            false => format!("http://{}:{}{}", self.host, self.port, self.base_path),
        }
    }

    /// The host and port to connect to.
    pub fn addr(&self) -> (&str, u16) {
        (&self.host, self.port)
    }

    /// The time allowed for one request.
    pub fn timeout(&self) -> Duration {
        self.config.request_timeout
    }

    /// The bytes of a `GET` for `target` (a path under the base, with its query).
    pub fn request(&self, target: &str) -> Vec<u8> {
        let host = if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        };
        format!(
            "GET {}{target} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: hicache-index\r\n\
             Accept: */*\r\nConnection: close\r\n\r\n",
            self.base_path
        )
        .into_bytes()
    }

    /// A reader for one response, with this client's body limit.
    pub fn response_reader(&self) -> ResponseReader {
        ResponseReader::new(self.config.max_body_bytes)
    }

    /// One blocking `GET` of `target` over a fresh connection, connect to last byte within
    /// [`MasterHttp::timeout`]. Call it off the event loop (it blocks the calling thread).
    pub fn get(&self, target: &str) -> Result<Vec<u8>, HttpError> {
        let deadline = Instant::now() + self.timeout();
        let left = || {
            deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
                .ok_or(HttpError::Timeout)
        };
        let mut stream = None;
        let mut failure = HttpError::Io(format!("{} does not resolve", self.host));
        for addr in (self.host.as_str(), self.port).to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, left()?) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => failure = timed_out(e),
            }
        }
        let mut stream = stream.ok_or(failure)?;
        stream.set_write_timeout(Some(left()?))?;
        stream.write_all(&self.request(target)).map_err(timed_out)?;
        let mut reader = self.response_reader();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            stream.set_read_timeout(Some(left()?))?;
            let n = match stream.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(timed_out(e)),
            };
            if let Some(body) = reader.feed(&buf[..n])? {
                return Ok(body);
            }
        }
    }

    /// The targets that ask about `keys`, split so each stays within the target limit.
    pub fn batch_query_targets(&self, keys: &[String]) -> Vec<String> {
        const PATH: &str = "/batch_query_keys?keys=";
        let limit = self.config.max_target_bytes.max(PATH.len() + 64);
        let mut targets = Vec::new();
        let mut current = String::from(PATH);
        for key in keys {
            let mut encoded = String::new();
            percent_encode(key, &mut encoded);
            let fresh = current.len() == PATH.len();
            if !fresh && current.len() + 1 + encoded.len() > limit {
                targets.push(std::mem::replace(&mut current, String::from(PATH)));
            }
            if current.len() > PATH.len() {
                current.push(',');
            }
            current.push_str(&encoded);
        }
        if current.len() > PATH.len() {
            targets.push(current);
        }
        targets
    }
}

/// An IO error, or [`HttpError::Timeout`] when a socket timeout ran out.
fn timed_out(e: std::io::Error) -> HttpError {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => HttpError::Timeout,
        _ => e.into(),
    }
}

/// Everything but RFC 3986's unreserved characters (`A-Z a-z 0-9 - . _ ~`) is percent-encoded
/// in a key of `/batch_query_keys?keys=` (a `,` in a key must not split it).
const KEY_ENCODE_SET: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes `s` into `out` with [`KEY_ENCODE_SET`].
fn percent_encode(s: &str, out: &mut String) {
    out.extend(utf8_percent_encode(s, KEY_ENCODE_SET));
}

/// The longest response head accepted.
const MAX_HEAD_BYTES: usize = 64 << 10;

/// The most header lines accepted in a response head.
const MAX_HEADERS: usize = 64;

/// Reads one HTTP/1.1 response, sans IO: feed it what the socket gives, in order.
///
/// The head is parsed by `httparse`, chunk sizes by `httparse::parse_chunk_size`; the body is
/// decoded as it arrives (each byte once, whatever the framing), and only input not decoded yet
/// is kept apart from it.
#[derive(Debug)]
pub struct ResponseReader {
    /// Input not consumed yet: the head until it is complete, then a partial chunk line.
    pending: Vec<u8>,
    body: Vec<u8>,
    max_body: usize,
    state: State,
}

/// Where a [`ResponseReader`] stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading the status line and headers.
    Head,
    /// A `Content-Length` body with this many bytes still to come.
    Length(usize),
    /// Chunked: the next thing is a chunk-size line.
    ChunkSize,
    /// Chunked: this many bytes of the current chunk still to come.
    ChunkData(usize),
    /// Chunked: the CRLF after a chunk's data.
    ChunkEnd,
    /// No framing: the body ends when the peer closes.
    UntilClose,
    /// The body is complete.
    Done,
}

impl ResponseReader {
    /// Makes a reader accepting bodies up to `max_body` bytes.
    pub fn new(max_body: usize) -> ResponseReader {
        ResponseReader {
            pending: Vec::new(),
            body: Vec::new(),
            max_body,
            state: State::Head,
        }
    }

    /// Takes the next bytes read (an empty slice means the peer closed the connection) and
    /// returns the body once the response is complete and its status is 200.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Option<Vec<u8>>, HttpError> {
        let eof = bytes.is_empty();
        let input = bytes;
        if self.state == State::Head {
            if self.pending.len() + input.len() > MAX_HEAD_BYTES.saturating_add(self.max_body) {
                return Err(HttpError::TooLarge);
            }
            self.pending.extend_from_slice(input);
            let Some((status, state, head_len)) = parse_head(&self.pending)? else {
                return if eof {
                    Err(HttpError::Malformed("connection closed before the headers"))
                } else {
                    Ok(None)
                };
            };
            if status != 200 {
                return Err(HttpError::Status(status));
            }
            if let State::Length(n) = state {
                if n > self.max_body {
                    return Err(HttpError::TooLarge);
                }
                // One allocation for a large key list instead of a copy at every doubling.
                self.body.reserve_exact(n);
            }
            self.state = state;
            let rest = self.pending.split_off(head_len);
            self.pending.clear();
            return self.take(&rest, eof);
        }
        if !self.pending.is_empty() {
            // Only a partial chunk-size line waits here: join it with what follows.
            let mut joined = std::mem::take(&mut self.pending);
            joined.extend_from_slice(input);
            return self.take(&joined, eof);
        }
        self.take(input, eof)
    }

    /// Decodes `input` (body bytes after the head) into the body.
    fn take(&mut self, mut input: &[u8], eof: bool) -> Result<Option<Vec<u8>>, HttpError> {
        loop {
            match self.state {
                State::Head => unreachable!("the head is parsed before any body byte"),
                State::Done => return Ok(Some(std::mem::take(&mut self.body))),
                State::Length(0) => self.state = State::Done,
                State::Length(left) | State::ChunkData(left) => {
                    let n = left.min(input.len());
                    self.append(&input[..n])?;
                    input = &input[n..];
                    self.state = match self.state {
                        State::Length(_) => State::Length(left - n),
                        _ if left == n => State::ChunkEnd,
                        _ => State::ChunkData(left - n),
                    };
                    if n < left {
                        return self.wait(eof);
                    }
                }
                State::ChunkEnd => match input {
                    [b'\r', b'\n', rest @ ..] => {
                        input = rest;
                        self.state = State::ChunkSize;
                    }
                    [b'\r'] | [] => return self.keep(input, eof),
                    _ => return Err(HttpError::Malformed("chunk without its CRLF")),
                },
                State::ChunkSize => match httparse::parse_chunk_size(input) {
                    Ok(httparse::Status::Complete((_, 0))) => {
                        // The last chunk: trailers, if any, are not read (Connection: close).
                        self.state = State::Done;
                    }
                    Ok(httparse::Status::Complete((used, size))) => {
                        let size = usize::try_from(size).map_err(|_| HttpError::TooLarge)?;
                        if self.body.len().saturating_add(size) > self.max_body {
                            return Err(HttpError::TooLarge);
                        }
                        input = &input[used..];
                        self.state = State::ChunkData(size);
                    }
                    Ok(httparse::Status::Partial) if input.len() > MAX_HEAD_BYTES => {
                        return Err(HttpError::Malformed("chunk size"));
                    }
                    Ok(httparse::Status::Partial) => return self.keep(input, eof),
                    Err(httparse::InvalidChunkSize) => {
                        return Err(HttpError::Malformed("chunk size"));
                    }
                },
                State::UntilClose => {
                    self.append(input)?;
                    if eof {
                        self.state = State::Done;
                    } else {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Appends decoded body bytes, within the body limit.
    fn append(&mut self, bytes: &[u8]) -> Result<(), HttpError> {
        if self.body.len() + bytes.len() > self.max_body {
            return Err(HttpError::TooLarge);
        }
        self.body.extend_from_slice(bytes);
        Ok(())
    }

    /// Keeps undecoded `input` for the next call.
    fn keep(&mut self, input: &[u8], eof: bool) -> Result<Option<Vec<u8>>, HttpError> {
        self.pending.extend_from_slice(input);
        self.wait(eof)
    }

    /// More input is needed: an error if the peer closed.
    fn wait(&self, eof: bool) -> Result<Option<Vec<u8>>, HttpError> {
        if eof {
            Err(HttpError::Malformed("connection closed mid-body"))
        } else {
            Ok(None)
        }
    }
}

/// Parses a complete response head: its status, how its body is framed, and its length.
fn parse_head(buf: &[u8]) -> Result<Option<(u16, State, usize)>, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => {
            return Err(HttpError::Malformed("headers too long"));
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HttpError::Malformed("headers")),
        Err(_) => return Err(HttpError::Malformed("status line or headers")),
    };
    let status = response.code.ok_or(HttpError::Malformed("status line"))?;
    let mut state = State::UntilClose;
    let mut length = None;
    for header in response.headers.iter() {
        let value = std::str::from_utf8(header.value)
            .map_err(|_| HttpError::Malformed("headers"))?
            .trim();
        if header.name.eq_ignore_ascii_case("transfer-encoding")
            && value.to_ascii_lowercase().contains("chunked")
        {
            state = State::ChunkSize;
        } else if header.name.eq_ignore_ascii_case("content-length") {
            let n: usize = value
                .parse()
                .map_err(|_| HttpError::Malformed("content-length"))?;
            if length.is_some_and(|m| m != n) {
                return Err(HttpError::Malformed("content-length"));
            }
            length = Some(n);
        }
    }
    if let (Some(n), State::UntilClose) = (length, state) {
        state = State::Length(n);
    }
    Ok(Some((status, state, head_len)))
}

/// Work the core asked for over HTTP, run on a thread of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpJob {
    /// `GET /get_all_keys` for the fetch `request`.
    Snapshot {
        /// The core's request number.
        request: u64,
    },
    /// `GET /kv_events/status` for the status check `request`.
    Status {
        /// The core's request number.
        request: u64,
    },
    /// `GET /batch_query_keys` for the verification `request`.
    Verify {
        /// The core's request number.
        request: u64,
        /// The keys to check.
        keys: Vec<String>,
    },
}

/// What an [`HttpJob`] found, handed back to the driver loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpOutcome {
    /// The watermark and the key list (one key per line), or why the list could not be had.
    Snapshot {
        /// The core's request number.
        request: u64,
        /// Where the master's stream stood before the list was read (`/kv_events/status`);
        /// `None` when the master did not tell.
        watermark: Option<Watermark>,
        /// The body of `/get_all_keys`, as the master sent it (split it with
        /// [`hicache_index::snapshot_lines`]).
        keys: Result<Vec<u8>, HttpError>,
    },
    /// The master's status, or why it could not be read.
    Status {
        /// The core's request number.
        request: u64,
        /// What `/kv_events/status` said (`Ok(None)`: it gave no counters).
        watermark: Result<Option<Watermark>, HttpError>,
    },
    /// Which keys exist; keys the master did not answer about are left out.
    Verify {
        /// The core's request number.
        request: u64,
        /// Each answered key and whether it exists.
        results: Vec<(String, bool)>,
        /// The first failure, when some part of the key list could not be checked.
        error: Option<HttpError>,
    },
}

impl HttpJob {
    /// The core's request number of the job.
    pub fn request(&self) -> u64 {
        match self {
            HttpJob::Snapshot { request }
            | HttpJob::Status { request }
            | HttpJob::Verify { request, .. } => *request,
        }
    }

    /// What the job found when it could not run at all.
    pub fn failed(self, error: HttpError) -> HttpOutcome {
        match self {
            HttpJob::Snapshot { request } => HttpOutcome::Snapshot {
                request,
                watermark: None,
                keys: Err(error),
            },
            HttpJob::Status { request } => HttpOutcome::Status {
                request,
                watermark: Err(error),
            },
            HttpJob::Verify { request, .. } => HttpOutcome::Verify {
                request,
                results: Vec::new(),
                error: Some(error),
            },
        }
    }

    /// The job to report as failed if it cannot be started: itself, without its keys.
    pub fn without_keys(&self) -> HttpJob {
        match self {
            HttpJob::Verify { request, .. } => HttpJob::Verify {
                request: *request,
                keys: Vec::new(),
            },
            other => other.clone(),
        }
    }

    /// Runs the job with blocking `GET`s to `http`; call it off the event loop.
    pub fn run(self, http: &MasterHttp) -> HttpOutcome {
        match self {
            HttpJob::Snapshot { request } => {
                // The watermark first: every batch after it must then reach the stream.
                let status = http.get("/kv_events/status");
                let disabled = status.as_deref().is_ok_and(|body| {
                    crate::leader::parse_events_status(Some(body))
                        == hicache_index::EventsStatus::Disabled
                });
                let watermark = status.ok().and_then(|body| parse_watermark(&body));
                let keys = match disabled {
                    true => Err(HttpError::EventsDisabled),
                    false => http.get("/get_all_keys"),
                };
                HttpOutcome::Snapshot {
                    request,
                    watermark,
                    keys,
                }
            }
            HttpJob::Status { request } => HttpOutcome::Status {
                request,
                watermark: http
                    .get("/kv_events/status")
                    .map(|body| parse_watermark(&body)),
            },
            HttpJob::Verify { request, keys } => {
                let mut results = Vec::with_capacity(keys.len());
                let mut error = None;
                for target in http.batch_query_targets(&keys) {
                    match http.get(&target).and_then(|b| parse_batch_query(&b)) {
                        Ok(found) => results.extend(found),
                        Err(e) => {
                            error.get_or_insert(e);
                        }
                    }
                }
                HttpOutcome::Verify {
                    request,
                    results,
                    error,
                }
            }
        }
    }
}

/// Reads the watermark from a `/kv_events/status` answer: `published_batches + dropped_events`,
/// the last sequence the master assigned (each dropped event consumes one), and
/// `published_events`, the last event id it gave, when it tells.
pub fn parse_watermark(body: &[u8]) -> Option<Watermark> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let field = |name| value.get(name).and_then(serde_json::Value::as_u64);
    let seq = field("published_batches")?.checked_add(field("dropped_events")?)?;
    Some(Watermark {
        seq: Seq(seq),
        events: field("published_events"),
    })
}

/// Reads a `/batch_query_keys` answer: `{"success":true,"data":{"<key>":{"ok":bool,...}}}`.
pub fn parse_batch_query(body: &[u8]) -> Result<Vec<(String, bool)>, HttpError> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| HttpError::Malformed("not JSON"))?;
    if value.get("success").and_then(serde_json::Value::as_bool) != Some(true) {
        return Err(HttpError::Malformed("success is not true"));
    }
    let data = value
        .get("data")
        .and_then(serde_json::Value::as_object)
        .ok_or(HttpError::Malformed("no data object"))?;
    Ok(data
        .iter()
        .filter_map(|(key, entry)| {
            let ok = entry.get("ok").and_then(serde_json::Value::as_bool)?;
            Some((key.clone(), ok))
        })
        .collect())
}

#[cfg(test)]
mod tests {
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
        let mut m = master("http://h:1");
        m.config.max_target_bytes = 200;
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
        let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
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
        let mut m = master(&url);
        m.config.request_timeout = Duration::from_millis(200);
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
        let body = br#"{"enabled":true,"published_batches":70,"published_events":1200,"dropped_events":3}"#;
        let seen = Watermark {
            seq: Seq(73),
            events: Some(1200),
        };
        assert_eq!(parse_watermark(body), Some(seen));
        assert_eq!(parse_watermark(br#"{"enabled":true}"#), None);
        assert_eq!(parse_watermark(b"not found"), None);
    }
}
