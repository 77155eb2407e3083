//! The query request and answer: `{"tokens": [...], "tenant", "model", "extra_key",
//! "cache_salt", "page_map"}` (or `"page_hashes": [hex...]` instead of tokens) answered by
//! `{"prefix_pages", "pages", "trust", ...}`; several of them in one batch
//! (`{"queries": [...]}` answered by `{"answers": [...]}`).
//!
//! Decoding is strict: a field this version does not know is an error naming it (a typo such
//! as `"cachesalt"` would otherwise be answered from the unsalted namespace). Errors echo at
//! most [`MAX_ECHO_BYTES`] of any input.

use std::fmt;

use hicache_index::{
    Hits, Lookup, MapCover, Namespace, PageHash, Pages, QueryError, Session, Tokens, DEFAULT_TENANT,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The most bytes of a client's input an error message repeats (a model name, a field name,
/// the decoder's message); longer ones are cut, and end in `...`.
pub const MAX_ECHO_BYTES: usize = 200;

/// Returns `text` cut to at most [`MAX_ECHO_BYTES`] bytes on a character boundary, marked with
/// `...` when it was cut.
pub fn clip(text: &str) -> String {
    if text.len() <= MAX_ECHO_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_ECHO_BYTES - 3;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// Bounds on what one request may ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest request body, in bytes.
    pub max_body_bytes: usize,
    /// The most tokens in one request.
    pub max_tokens: usize,
    /// The most page hashes in one request.
    pub max_page_hashes: usize,
    /// The most queries in one batch.
    pub max_batch_queries: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 4 << 20,
            max_tokens: 262_144,
            max_page_hashes: 16_384,
            max_batch_queries: 256,
        }
    }
}

/// A query as it arrives (JSON or a msgpack map with the same field names). Give exactly one of
/// `tokens` and `page_hashes`; any other field is refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
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
    /// Answer `pages` for every full page of the request (each hashed and probed, whatever
    /// misses before it). By default (`false`) `pages` covers the pages checked until the
    /// first that misses, that one included, and no page after it is hashed: the query costs
    /// what its prefix costs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub page_map: bool,
}

/// Several queries in one request (several prompts, several models): `{"queries": [...]}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    /// The queries, answered in this order; at most the service's batch limit.
    pub queries: Vec<QueryRequest>,
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
        let request: QueryRequest = serde_json::from_slice(body).map_err(ApiError::malformed)?;
        request.check(limits)
    }

    /// Decodes a msgpack map body within `limits`.
    pub fn from_msgpack(body: &[u8], limits: &Limits) -> Result<Query, ApiError> {
        check_size(body, limits)?;
        check_msgpack_lengths(body).map_err(ApiError::malformed)?;
        let request: QueryRequest = rmp_serde::from_slice(body).map_err(ApiError::malformed)?;
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

    /// Returns which pages the answer's `pages` covers (see [`QueryRequest::page_map`]).
    pub fn cover(&self) -> MapCover {
        match self.request.page_map {
            true => MapCover::Every,
            false => MapCover::UntilMiss,
        }
    }
}

impl BatchRequest {
    /// Decodes a JSON batch within `limits` (the body's size, the number of queries); each
    /// query is then checked on its own, so that one bad query fails only its answer.
    pub fn from_json(body: &[u8], limits: &Limits) -> Result<BatchRequest, ApiError> {
        check_size(body, limits)?;
        let batch: BatchRequest = serde_json::from_slice(body).map_err(ApiError::malformed)?;
        batch.check(limits)
    }

    /// Decodes a msgpack batch (`{"queries": [map, ...]}`) like [`BatchRequest::from_json`].
    pub fn from_msgpack(body: &[u8], limits: &Limits) -> Result<BatchRequest, ApiError> {
        check_size(body, limits)?;
        check_msgpack_lengths(body).map_err(ApiError::malformed)?;
        let batch: BatchRequest = rmp_serde::from_slice(body).map_err(ApiError::malformed)?;
        batch.check(limits)
    }

    fn check(self, limits: &Limits) -> Result<BatchRequest, ApiError> {
        if self.queries.len() > limits.max_batch_queries {
            return Err(ApiError::TooMany {
                what: "queries in a batch",
                limit: limits.max_batch_queries,
            });
        }
        Ok(self)
    }
}

/// The answer: the fully present prefix, the per-page map, and the trust to put in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QueryAnswer {
    /// Leading pages fully present: the pages a router may count on (trailing-page pools are
    /// judged on this prefix).
    pub prefix_pages: usize,
    /// Whether each page has all its objects, from the first page: by default the pages
    /// checked until the first that misses, that one included (nothing after it was hashed);
    /// with `"page_map": true`, every full page of the request.
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

/// A refused request's body: `{"error": "..."}`, with the known models when the request named
/// an unknown one (or none among several), and, in a batch's answers, the HTTP status the
/// query alone would have had.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorAnswer {
    /// What was wrong, in one line (at most a few hundred bytes of the input repeated).
    pub error: String,
    /// The models the index knows, when the request named an unknown one or none among
    /// several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<String>>,
    /// In a batch's answers only: the status (400, 413) the query alone would have had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
}

/// One answer of a batch: the query's answer, or why it was refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum BatchItem {
    /// The query's answer.
    Answer(QueryAnswer),
    /// Why the query was refused (the others are still answered).
    Error(ErrorAnswer),
}

/// The answers of a batch, one per query, in the order asked: `{"answers": [...]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BatchAnswer {
    /// Each query's answer or error.
    pub answers: Vec<BatchItem>,
}

impl BatchAnswer {
    /// Encodes the answers as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("answers always serialise")
    }

    /// Encodes the answers as a msgpack map.
    pub fn to_msgpack(&self) -> Vec<u8> {
        rmp_serde::to_vec_named(self).expect("answers always serialise")
    }
}

/// What a query service asks of an index: the page shape of a model's layout, the index
/// itself, and the models it knows. [`Session`] is one; so is a driver's query handle.
pub trait Front {
    /// Returns the page size and EAGLE mode of the layout of `model` (`None`: the default).
    fn page_shape(&self, model: Option<&str>) -> Result<(u32, bool), QueryError>;
    /// Answers `lookup`, filling `map` as `cover` says.
    fn ask(
        &self,
        lookup: &Lookup<'_>,
        map: &mut [bool],
        cover: MapCover,
    ) -> Result<Hits, QueryError>;
    /// Returns every model the index knows, in name order.
    fn known_models(&self) -> Vec<String>;
}

impl Front for Session {
    fn page_shape(&self, model: Option<&str>) -> Result<(u32, bool), QueryError> {
        self.layout_for(model).map(|l| (l.page_size, l.eagle))
    }

    fn ask(
        &self,
        lookup: &Lookup<'_>,
        map: &mut [bool],
        cover: MapCover,
    ) -> Result<Hits, QueryError> {
        match cover {
            MapCover::UntilMiss => self.reader().query_prefix_map(lookup, map),
            MapCover::Every => self.query_map(lookup, map),
        }
    }

    fn known_models(&self) -> Vec<String> {
        known_models(self)
    }
}

/// Answers a checked query through `front`; an unknown model's error lists the known ones.
pub fn answer_front(front: &impl Front, query: &Query) -> Result<QueryAnswer, ApiError> {
    answer_with(
        query,
        |model| front.page_shape(model),
        |lookup, map, cover| front.ask(lookup, map, cover),
    )
    .map_err(|e| e.listing_models(query.request.model.as_deref(), || front.known_models()))
}

/// Answers a JSON query body: the HTTP status and the JSON body (the answer or the error).
pub fn respond_json(front: &impl Front, body: &[u8], limits: &Limits) -> (u16, String) {
    match QueryRequest::from_json(body, limits).and_then(|q| answer_front(front, &q)) {
        Ok(answer) => (200, answer.to_json()),
        Err(error) => (error.status(), error.to_json()),
    }
}

/// Answers each query of a batch through `front`, in order; a query that fails its checks
/// gets its error (with its status), the others their answers.
pub fn answer_batch(front: &impl Front, batch: BatchRequest, limits: &Limits) -> BatchAnswer {
    let answers = batch
        .queries
        .into_iter()
        .map(
            |request| match request.check(limits).and_then(|q| answer_front(front, &q)) {
                Ok(answer) => BatchItem::Answer(answer),
                Err(error) => BatchItem::Error(ErrorAnswer {
                    status: Some(error.status()),
                    ..error.to_answer()
                }),
            },
        )
        .collect();
    BatchAnswer { answers }
}

/// Answers a JSON batch body: the HTTP status and the JSON body (the answers, or the error
/// that refused the whole batch).
pub fn respond_batch_json(front: &impl Front, body: &[u8], limits: &Limits) -> (u16, String) {
    match BatchRequest::from_json(body, limits) {
        Ok(batch) => (200, answer_batch(front, batch, limits).to_json()),
        Err(error) => (error.status(), error.to_json()),
    }
}

/// Answers a msgpack body, a query map or a batch map (`{"queries": [...]}`), with the msgpack
/// answer or error map.
pub fn respond_msgpack(front: &impl Front, body: &[u8], limits: &Limits) -> Vec<u8> {
    if is_msgpack_batch(body) {
        return match BatchRequest::from_msgpack(body, limits) {
            Ok(batch) => answer_batch(front, batch, limits).to_msgpack(),
            Err(error) => error.to_msgpack(),
        };
    }
    match QueryRequest::from_msgpack(body, limits).and_then(|q| answer_front(front, &q)) {
        Ok(answer) => answer.to_msgpack(),
        Err(error) => error.to_msgpack(),
    }
}

/// Reports whether a msgpack body is a map with a `queries` key (a batch).
fn is_msgpack_batch(body: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Keys {
        #[serde(default)]
        queries: Option<serde::de::IgnoredAny>,
    }
    check_msgpack_lengths(body).is_ok()
        && rmp_serde::from_slice::<Keys>(body).is_ok_and(|k| k.queries.is_some())
}

/// Asks `session` the query (the map as the query asks, see [`QueryRequest::page_map`]); an
/// unknown model's error lists the known ones ([`known_models`]).
pub fn answer(session: &Session, query: &Query) -> Result<QueryAnswer, ApiError> {
    answer_front(session, query)
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
/// of a model (`None`: the default layout), which size the per-page map; `ask` answers, filling
/// the map as the query's [`Query::cover`] says (`pages` is then cut to the pages checked).
/// A model whose layout is in doubt ([`QueryError::LayoutConflict`]) or unknown
/// ([`QueryError::NoLayout`]) is answered as a miss ([`QueryAnswer::layout_conflict`],
/// [`QueryAnswer::no_layout`]), not as an error.
pub fn answer_with(
    query: &Query,
    page_shape: impl FnOnce(Option<&str>) -> Result<(u32, bool), QueryError>,
    ask: impl FnOnce(&Lookup<'_>, &mut [bool], MapCover) -> Result<Hits, QueryError>,
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
    let cover = query.cover();
    match ask(&lookup, &mut map, cover) {
        Ok(hits) => {
            if cover == MapCover::UntilMiss {
                map.truncate(hits.pages_checked);
            }
            Ok(QueryAnswer::new(hits, map))
        }
        // The workers fell out between the two calls.
        Err(QueryError::LayoutConflict { reason }) => Ok(QueryAnswer::layout_conflict(reason)),
        Err(QueryError::NoLayout { reason }) => Ok(QueryAnswer::no_layout(reason)),
        Err(e) => Err(ApiError::Query(e)),
    }
}
