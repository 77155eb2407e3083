//! The requests as they arrive ([`QueryRequest`], [`BatchRequest`]), decoded from JSON or
//! msgpack within [`Limits`] and checked into a [`Query`] ready to ask the index.

use hicache_index::{Lookup, MapCover, Namespace, PageHash, Pages, Tokens, DEFAULT_TENANT};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::error::ApiError;

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
pub(super) fn check_msgpack_lengths(body: &[u8]) -> Result<(), String> {
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
