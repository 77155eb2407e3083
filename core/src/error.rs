//! Errors for a caller's misuse: bad configuration and queries that cannot be answered.

use core::fmt;

use crate::layout::LayoutError;

/// Why a query could not be answered (a miss is not an error: it is an answer).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum QueryError {
    /// No layout is configured or advertised for the model asked about.
    UnknownModel,
    /// No model was named and there is not exactly one layout to default to.
    NoDefaultLayout,
    /// The model's workers disagree on its layout (or one cannot be read): nothing can be
    /// claimed for it until they agree. Answer a miss.
    LayoutConflict {
        /// Why, for a person.
        reason: alloc::string::String,
    },
    /// No worker of the model advertises a layout (SGLang 0.5.23's MHA workers never do) and
    /// none is configured for it: nothing can be claimed for it. Answer a miss.
    NoLayout {
        /// Why, for a person (it names a worker and what it said).
        reason: alloc::string::String,
    },
    /// The session's writer kept changing what a lock-free query reads (a clear, a removal, a
    /// new layout) while it read: ask again under the session's lock, whose
    /// [`crate::Session::query`] always answers. Only a [`crate::Reader`] returns it.
    Busy,
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueryError::UnknownModel => f.write_str("no layout is known for that model"),
            QueryError::NoDefaultLayout => {
                f.write_str("no model was named and there is not exactly one layout to use")
            }
            QueryError::LayoutConflict { reason } => {
                write!(f, "the model's layout is in doubt: {reason}")
            }
            QueryError::NoLayout { reason } => {
                write!(f, "no layout is known for the model: {reason}")
            }
            QueryError::Busy => f.write_str("the index kept changing under the query"),
        }
    }
}

/// Why a configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A layout is invalid.
    Layout(LayoutError),
    /// `max_pages` is zero.
    NoPages,
    /// Two layouts were configured for the same model.
    DuplicateModel,
    /// A backoff delay or the connect timeout is zero, or the cap is below the first delay.
    Backoff,
    /// The reorder window's delay is zero.
    Reorder,
    /// A reorder window without resync: after a loss, only the master's status can place a
    /// stream that reorders (rule R7 of [`crate::sequence`]).
    ReorderWithoutResync,
    /// A resync buffer bound is zero.
    ResyncBuffer,
    /// The resync fetch timeout or retry delay is zero.
    ResyncTiming,
    /// A verification sample size or interval is zero.
    Verify,
    /// Following an HA leader needs an endpoint with a host to replace, and non-zero check
    /// timing.
    Leader,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Layout(e) => write!(f, "invalid layout: {e}"),
            ConfigError::NoPages => f.write_str("max_pages must be at least 1"),
            ConfigError::DuplicateModel => f.write_str("two layouts are configured for one model"),
            ConfigError::Backoff => f.write_str(
                "backoff delays and the connect timeout must be non-zero, and the cap at least the first delay",
            ),
            ConfigError::Reorder => f.write_str("the reorder window's delay must be non-zero"),
            ConfigError::ReorderWithoutResync => f.write_str(
                "a reorder window needs resync: after a loss only the master's status can place \
                 a stream that reorders",
            ),
            ConfigError::ResyncBuffer => f.write_str("the resync buffer bounds must be at least 1"),
            ConfigError::ResyncTiming => f.write_str("the resync fetch timeout and retry delay must be non-zero"),
            ConfigError::Verify => {
                f.write_str("verification needs a sample of at least 1 key, a non-zero interval and timeout")
            }
            ConfigError::Leader => f.write_str(
                "following an HA leader needs an endpoint scheme://host:port and non-zero check timing",
            ),
        }
    }
}

impl From<LayoutError> for ConfigError {
    fn from(e: LayoutError) -> ConfigError {
        ConfigError::Layout(e)
    }
}

impl core::error::Error for QueryError {}

impl core::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            ConfigError::Layout(e) => Some(e),
            _ => None,
        }
    }
}
