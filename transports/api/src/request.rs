//! The query request and answer: `{"tokens": [...], "tenant", "model", "extra_key",
//! "cache_salt"}` (or `"page_hashes": [hex...]` instead of tokens) answered by
//! `{"prefix_pages", "pages", "trust", ...}`.

use std::fmt;

use hicache_index::{
    Hits, Lookup, Namespace, PageHash, Pages, QueryError, Session, Tokens, DEFAULT_TENANT,
};
use serde::{Deserialize, Serialize};

/// Bounds on what one request may ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest request body, in bytes.
    pub max_body_bytes: usize,
    /// The most tokens in one request.
    pub max_tokens: usize,
    /// The most page hashes in one request.
    pub max_page_hashes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 4 << 20,
            max_tokens: 262_144,
            max_page_hashes: 16_384,
        }
    }
}

/// A query as it arrives (JSON or a msgpack map with the same field names).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryRequest {
    /// The request's tokens (ids up to `u64::MAX`).
    #[serde(default)]
    pub tokens: Option<Vec<u64>>,
    /// Page hashes, 64 lowercase hex characters each, instead of tokens.
    #[serde(default)]
    pub page_hashes: Option<Vec<String>>,
    /// The tenant; `"default"` when absent.
    #[serde(default)]
    pub tenant: Option<String>,
    /// The model whose layout applies; the one configured layout when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// SGLang's `extra_key` of the request (namespaced requests; `""` is none, as in SGLang).
    #[serde(default)]
    pub extra_key: Option<String>,
    /// SGLang's `cache_salt` of the request (namespaced requests; `""` is none, as in SGLang).
    #[serde(default)]
    pub cache_salt: Option<String>,
}

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

    /// Returns the error as the JSON body `{"error": "..."}` (with `"models": [...]`, the known
    /// models, for [`ApiError::UnknownModel`]).
    pub fn to_json(&self) -> String {
        match self {
            ApiError::UnknownModel { known, .. } => {
                serde_json::json!({ "error": self.to_string(), "models": known }).to_string()
            }
            _ => serde_json::json!({ "error": self.to_string() }).to_string(),
        }
    }

    /// Returns the error as the msgpack map `{"error": "..."}`.
    pub fn to_msgpack(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Reply {
            error: String,
        }
        rmp_serde::to_vec_named(&Reply {
            error: self.to_string(),
        })
        .expect("a string map always serialises")
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
                    Some(m) => write!(f, "unknown model {m:?}")?,
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

/// A request checked against the limits, ready to ask the index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    request: QueryRequest,
    narrow: Option<Vec<u32>>,
    hashes: Vec<PageHash>,
}

impl QueryRequest {
    /// Decodes a JSON body within `limits`.
    pub fn from_json(body: &[u8], limits: &Limits) -> Result<Query, ApiError> {
        check_size(body, limits)?;
        let request: QueryRequest =
            serde_json::from_slice(body).map_err(|e| ApiError::Malformed(e.to_string()))?;
        request.check(limits)
    }

    /// Decodes a msgpack map body within `limits`.
    pub fn from_msgpack(body: &[u8], limits: &Limits) -> Result<Query, ApiError> {
        check_size(body, limits)?;
        check_msgpack_lengths(body).map_err(ApiError::Malformed)?;
        let request: QueryRequest =
            rmp_serde::from_slice(body).map_err(|e| ApiError::Malformed(e.to_string()))?;
        request.check(limits)
    }

    /// Checks the request against `limits` and parses its page hashes.
    pub fn check(self, limits: &Limits) -> Result<Query, ApiError> {
        match (&self.tokens, &self.page_hashes) {
            (Some(tokens), None) => {
                if tokens.len() > limits.max_tokens {
                    return Err(ApiError::TooMany {
                        what: "tokens",
                        limit: limits.max_tokens,
                    });
                }
                let narrow = tokens
                    .iter()
                    .map(|&t| u32::try_from(t).ok())
                    .collect::<Option<Vec<u32>>>();
                Ok(Query {
                    request: self,
                    narrow,
                    hashes: Vec::new(),
                })
            }
            (None, Some(hex)) => {
                if hex.len() > limits.max_page_hashes {
                    return Err(ApiError::TooMany {
                        what: "page hashes",
                        limit: limits.max_page_hashes,
                    });
                }
                let hashes = hex
                    .iter()
                    .enumerate()
                    .map(|(position, h)| {
                        h.parse::<PageHash>()
                            .map_err(|_| ApiError::BadPageHash { position })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Query {
                    request: self,
                    narrow: None,
                    hashes,
                })
            }
            _ => Err(ApiError::NeedTokensOrHashes),
        }
    }
}

/// Walks a msgpack value and refuses any length header that claims more items or bytes than
/// remain, so that decoding never preallocates for data that is not there.
fn check_msgpack_lengths(body: &[u8]) -> Result<(), String> {
    const MAX_DEPTH: usize = 16;
    let mut pos = 0usize;
    // Items still to read at each open level; a map counts keys and values.
    let mut pending: Vec<usize> = vec![1];
    while let Some(top) = pending.last_mut() {
        if *top == 0 {
            pending.pop();
            continue;
        }
        *top -= 1;
        let marker = *body.get(pos).ok_or("msgpack value truncated")?;
        pos += 1;
        let take = |pos: &mut usize, n: usize| -> Result<usize, String> {
            let bytes = body.get(*pos..*pos + n).ok_or("msgpack length truncated")?;
            *pos += n;
            Ok(bytes
                .iter()
                .fold(0usize, |acc, b| (acc << 8) | usize::from(*b)))
        };
        let (skip, items) = match marker {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
            0x80..=0x8f => (0, 2 * usize::from(marker & 0x0f)),
            0x90..=0x9f => (0, usize::from(marker & 0x0f)),
            0xa0..=0xbf => (usize::from(marker & 0x1f), 0),
            0xcc | 0xd0 => (1, 0),
            0xcd | 0xd1 => (2, 0),
            0xca | 0xce | 0xd2 => (4, 0),
            0xcb | 0xcf | 0xd3 => (8, 0),
            0xd4 => (2, 0),
            0xd5 => (3, 0),
            0xd6 => (5, 0),
            0xd7 => (9, 0),
            0xd8 => (17, 0),
            0xc4 | 0xd9 => (take(&mut pos, 1)?, 0),
            0xc5 | 0xda => (take(&mut pos, 2)?, 0),
            0xc6 | 0xdb => (take(&mut pos, 4)?, 0),
            0xc7 => (take(&mut pos, 1)? + 1, 0),
            0xc8 => (take(&mut pos, 2)? + 1, 0),
            0xc9 => (take(&mut pos, 4)? + 1, 0),
            0xdc => (0, take(&mut pos, 2)?),
            0xdd => (0, take(&mut pos, 4)?),
            0xde => (0, 2 * take(&mut pos, 2)?),
            0xdf => (0, 2 * take(&mut pos, 4)?),
            _ => return Err(format!("reserved msgpack marker 0x{marker:02x}")),
        };
        let remaining = body.len() - pos;
        if skip > remaining || items > remaining {
            return Err("a msgpack length claims more than the body holds".into());
        }
        pos += skip;
        if items > 0 {
            if pending.len() > MAX_DEPTH {
                return Err("msgpack nested too deep".into());
            }
            pending.push(items);
        }
    }
    if pos != body.len() {
        return Err("bytes after the msgpack value".into());
    }
    Ok(())
}

fn check_size(body: &[u8], limits: &Limits) -> Result<(), ApiError> {
    if body.len() > limits.max_body_bytes {
        return Err(ApiError::TooLarge {
            limit: limits.max_body_bytes,
        });
    }
    Ok(())
}

impl Query {
    /// Returns the lookup this query asks.
    pub fn lookup(&self) -> Lookup<'_> {
        let r = &self.request;
        let pages = match (&self.narrow, &r.tokens) {
            (Some(narrow), _) => Pages::Tokens {
                tokens: Tokens::U32(narrow),
                namespace: self.namespace(),
            },
            (None, Some(wide)) => Pages::Tokens {
                tokens: Tokens::U64(wide),
                namespace: self.namespace(),
            },
            (None, None) => Pages::Hashes(&self.hashes),
        };
        Lookup {
            tenant: r.tenant.as_deref().unwrap_or(DEFAULT_TENANT),
            model: r.model.as_deref(),
            pages,
        }
    }

    fn namespace(&self) -> Namespace<'_> {
        Namespace::new(
            self.request.extra_key.as_deref(),
            self.request.cache_salt.as_deref(),
        )
    }

    /// Returns the request as it arrived.
    pub fn request(&self) -> &QueryRequest {
        &self.request
    }
}

/// The answer: the fully present prefix, the per-page map, and the trust to put in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryAnswer {
    /// Leading pages fully present: the pages a router may count on.
    pub prefix_pages: usize,
    /// For every full page of the request, whether all its objects are present.
    pub pages: Vec<bool>,
    /// The index's health when it answered: `"live"`, `"recovering"`, `"connecting"`,
    /// `"disconnected"` or `"events_disabled"`; `"layout_conflict"` when the model's workers
    /// disagree on its layout, `"no_layout"` when none of them advertises one (nothing is
    /// claimed, see `reason`).
    pub trust: String,
    /// Full pages in the request.
    pub total_pages: usize,
    /// Of the prefix pages, how many were seen with a memory replica.
    pub memory_pages: usize,
    /// Of the prefix pages, how many were seen only on disk.
    pub disk_only_pages: usize,
    /// Why nothing could be claimed, when the model's layout is in doubt or unknown (`trust` is
    /// then `"layout_conflict"` or `"no_layout"`). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl QueryAnswer {
    /// Builds the answer from the index's hits and page map.
    pub fn new(hits: Hits, pages: Vec<bool>) -> QueryAnswer {
        QueryAnswer {
            prefix_pages: hits.prefix_pages,
            pages,
            trust: hits.trust.as_str().to_owned(),
            total_pages: hits.total_pages,
            memory_pages: hits.memory_pages,
            disk_only_pages: hits.disk_only_pages,
            reason: None,
        }
    }

    /// The answer for a model whose layout is in doubt: no page claimed, trust
    /// `"layout_conflict"`, and the reason. The page map is empty (the page size is in doubt too).
    pub fn layout_conflict(reason: String) -> QueryAnswer {
        QueryAnswer {
            prefix_pages: 0,
            pages: Vec::new(),
            trust: TRUST_LAYOUT_CONFLICT.to_owned(),
            total_pages: 0,
            memory_pages: 0,
            disk_only_pages: 0,
            reason: Some(reason),
        }
    }

    /// The answer for a model none of whose workers advertises a layout: no page claimed,
    /// trust `"no_layout"`, and the reason. The page map is empty (the page size is unknown).
    pub fn no_layout(reason: String) -> QueryAnswer {
        QueryAnswer {
            trust: TRUST_NO_LAYOUT.to_owned(),
            ..QueryAnswer::layout_conflict(reason)
        }
    }

    /// Encodes the answer as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("an answer always serialises")
    }

    /// Encodes the answer as a msgpack map (field names as keys).
    pub fn to_msgpack(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).expect("an answer always serialises")
    }
}

/// The `trust` of an answer for a model whose workers disagree on its layout.
pub const TRUST_LAYOUT_CONFLICT: &str = "layout_conflict";

/// The `trust` of an answer for a model none of whose workers advertises a layout.
pub const TRUST_NO_LAYOUT: &str = "no_layout";

/// Asks `session` the query, with the per-page map; an unknown model's error lists the known
/// ones ([`known_models`]).
pub fn answer(session: &Session, query: &Query) -> Result<QueryAnswer, ApiError> {
    answer_with(
        query,
        |model| session.layout_for(model).map(|l| (l.page_size, l.eagle)),
        |lookup, map| session.query_map(lookup, map),
    )
    .map_err(|e| e.listing_models(query.request.model.as_deref(), || known_models(session)))
}

/// Returns every model `session` knows, configured or advertised by workers, in name order (the
/// default layout, which has no name, is not listed).
pub fn known_models(session: &Session) -> Vec<String> {
    let mut known: Vec<String> = session
        .config()
        .layouts
        .iter()
        .filter_map(|ml| ml.model.clone())
        .chain(session.layout_votes().verdicts().map(|(m, _)| m.to_owned()))
        .collect();
    known.sort();
    known.dedup();
    known
}

/// Asks the query through any index front, for example a driver's query handle (which hashes
/// outside the index's lock): `page_shape` returns the page size and EAGLE mode of the layout
/// of a model (`None`: the default layout), which size the per-page map; `query_map` answers.
/// A model whose layout is in doubt ([`QueryError::LayoutConflict`]) or unknown
/// ([`QueryError::NoLayout`]) is answered as a miss ([`QueryAnswer::layout_conflict`],
/// [`QueryAnswer::no_layout`]), not as an error.
pub fn answer_with(
    query: &Query,
    page_shape: impl FnOnce(Option<&str>) -> Result<(u32, bool), QueryError>,
    query_map: impl FnOnce(&Lookup<'_>, &mut [bool]) -> Result<Hits, QueryError>,
) -> Result<QueryAnswer, ApiError> {
    let lookup = query.lookup();
    let (page_size, eagle) = match page_shape(lookup.model) {
        Ok(shape) => shape,
        Err(QueryError::LayoutConflict { reason }) => {
            return Ok(QueryAnswer::layout_conflict(reason))
        }
        Err(QueryError::NoLayout { reason }) => return Ok(QueryAnswer::no_layout(reason)),
        Err(e) => return Err(ApiError::Query(e)),
    };
    let total = match lookup.pages {
        Pages::Hashes(h) => h.len(),
        Pages::Tokens { tokens, .. } => {
            hicache_index::hash::page_count(tokens.len(), page_size, eagle)
        }
    };
    let mut map = vec![false; total];
    match query_map(&lookup, &mut map) {
        Ok(hits) => Ok(QueryAnswer::new(hits, map)),
        // The workers fell out between the two calls.
        Err(QueryError::LayoutConflict { reason }) => Ok(QueryAnswer::layout_conflict(reason)),
        Err(QueryError::NoLayout { reason }) => Ok(QueryAnswer::no_layout(reason)),
        Err(e) => Err(ApiError::Query(e)),
    }
}
