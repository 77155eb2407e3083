//! The HTTP/1.1 response reader, sans IO on `httparse`: heads, `Content-Length`, chunked and
//! read-to-close bodies.

use super::error::HttpError;

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
