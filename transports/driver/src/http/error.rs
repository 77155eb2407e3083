//! Why an HTTP request to the master failed ([`HttpError`]).

use std::fmt;

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
