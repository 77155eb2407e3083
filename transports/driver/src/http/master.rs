//! The client of the master's HTTP side ([`MasterHttp`]): URLs, request bytes, a blocking `GET`
//! and the split of key lists into short targets.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use url::{Host, Url};

use crate::config::{Error, HttpConfig};

use super::error::HttpError;
use super::response::ResponseReader;

/// Where the master's HTTP side is, and the client's limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MasterHttp {
    host: String,
    port: u16,
    base_path: String,
    config: HttpConfig,
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
