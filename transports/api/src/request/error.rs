//! Why a request was refused: [`ApiError`], with its HTTP status and its answer body.

use std::fmt;

use hicache_index::QueryError;

use super::answer::ErrorAnswer;
use super::echo::clip;
#[cfg(doc)]
use super::echo::MAX_ECHO_BYTES;

/// Why a request was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiError {
    /// The body is larger than the limit.
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The body is not a valid request document.
    Malformed(String),
    /// Neither or both of `tokens` and `page_hashes` were given.
    NeedTokensOrHashes,
    /// More tokens or hashes than the limit.
    TooMany {
        /// What was counted.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// A page hash is not 64 lowercase hex characters.
    BadPageHash {
        /// Its position in the list.
        position: usize,
    },
    /// The index could not answer (unknown model, no default layout).
    Query(QueryError),
    /// The request names no model the index knows, or names none while several are known.
    UnknownModel {
        /// The model the request named; `None` when it named none.
        asked: Option<String>,
        /// Every model the index knows, in name order.
        known: Vec<String>,
    },
}

impl ApiError {
    /// Wraps a decoder's message, cut to [`MAX_ECHO_BYTES`] (it may repeat the input).
    pub fn malformed(why: impl fmt::Display) -> ApiError {
        ApiError::Malformed(clip(&why.to_string()))
    }

    /// Returns the HTTP status that fits: 413 for size, else 400 (an unknown model too: the
    /// body lists the known ones).
    pub fn status(&self) -> u16 {
        match self {
            ApiError::TooLarge { .. } | ApiError::TooMany { .. } => 413,
            _ => 400,
        }
    }

    /// Turns "unknown model" and "no model named while several are known" into
    /// [`ApiError::UnknownModel`] with the models `known` returns; other errors stay.
    pub fn listing_models(
        self,
        asked: Option<&str>,
        known: impl FnOnce() -> Vec<String>,
    ) -> ApiError {
        match self {
            ApiError::Query(QueryError::UnknownModel | QueryError::NoDefaultLayout) => {
                ApiError::UnknownModel {
                    asked: asked.map(str::to_owned),
                    known: known(),
                }
            }
            other => other,
        }
    }

    /// Returns the error as the answer's error body (without a status).
    pub fn to_answer(&self) -> ErrorAnswer {
        ErrorAnswer {
            error: self.to_string(),
            models: match self {
                ApiError::UnknownModel { known, .. } => Some(known.clone()),
                _ => None,
            },
            status: None,
        }
    }

    /// Returns the error as the JSON body `{"error": "..."}` (with `"models": [...]`, the known
    /// models, for [`ApiError::UnknownModel`]).
    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.to_answer()).expect("an error always serialises")
    }

    /// Returns the error as the msgpack map `{"error": "..."}` (with `"models"` as in JSON).
    pub fn to_msgpack(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(&self.to_answer()).expect("an error always serialises")
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::TooLarge { limit } => write!(f, "request body larger than {limit} bytes"),
            ApiError::Malformed(why) => write!(f, "malformed request: {why}"),
            ApiError::NeedTokensOrHashes => {
                f.write_str("give exactly one of \"tokens\" and \"page_hashes\"")
            }
            ApiError::TooMany { what, limit } => write!(f, "more than {limit} {what}"),
            ApiError::BadPageHash { position } => {
                write!(
                    f,
                    "page_hashes[{position}] is not 64 lowercase hex characters"
                )
            }
            ApiError::Query(e) => write!(f, "{e}"),
            ApiError::UnknownModel { asked, known } => {
                match asked {
                    Some(m) => write!(f, "unknown model {:?}", clip(m))?,
                    None => f.write_str("name a \"model\": several are known")?,
                }
                if known.is_empty() {
                    f.write_str(" (no model is known yet)")
                } else {
                    write!(f, " (known: {})", known.join(", "))
                }
            }
        }
    }
}

impl std::error::Error for ApiError {}
