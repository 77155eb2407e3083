//! Answering through an index front ([`Front`]): one query, a batch, and the JSON and msgpack
//! bodies of their answers.

use hicache_index::{Hits, Lookup, MapCover, NoMemo, Pages, QueryError, Session};
use serde::Deserialize;

use super::answer::{BatchAnswer, BatchItem, ErrorAnswer, QueryAnswer};
use super::error::ApiError;
use super::query::{check_msgpack_lengths, BatchRequest, Limits, Query, QueryRequest};

/// What a query service asks of an index: the page shape of a model's layout, the index
/// itself, and the models it knows. [`Session`] is one; so is a driver's query handle.
pub trait Front {
    /// Returns the page size and EAGLE mode of the layout of `model` (`None`: the default).
    fn page_shape(&self, model: Option<&str>) -> Result<(u32, bool), QueryError>;
    /// Answers the lookup `q`, filling `map` as `cover` says.
    fn ask(&self, q: &Lookup<'_>, map: &mut [bool], cover: MapCover) -> Result<Hits, QueryError>;
    /// Returns every model the index knows, in name order.
    fn known_models(&self) -> Vec<String>;
}

impl Front for Session {
    fn page_shape(&self, model: Option<&str>) -> Result<(u32, bool), QueryError> {
        self.models()
            .layout_for(model)
            .map(|l| (l.page_size, l.eagle))
    }

    fn ask(&self, q: &Lookup<'_>, map: &mut [bool], cover: MapCover) -> Result<Hits, QueryError> {
        self.reader()
            .ask(q, &NoMemo, None, Some(map), cover)
            .answer()
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
    .map_err(|e| e.listing_models(query.request().model.as_deref(), || front.known_models()))
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
    let models = session.models();
    let mut known: Vec<String> = models
        .configured()
        .iter()
        .filter_map(|ml| ml.model.clone())
        .chain(models.votes().verdicts().map(|(m, _)| m.to_owned()))
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
    answer_lookup(&query.lookup(), query.cover(), page_shape, ask)
}

/// Answers a lookup made without a [`Query`] (an embedding program's own, e.g. page hashes it
/// holds as bytes) as [`answer_with`] answers a query's: `cover` says which pages the answer's
/// `pages` covers.
pub fn answer_lookup(
    lookup: &Lookup<'_>,
    cover: MapCover,
    page_shape: impl FnOnce(Option<&str>) -> Result<(u32, bool), QueryError>,
    ask: impl FnOnce(&Lookup<'_>, &mut [bool], MapCover) -> Result<Hits, QueryError>,
) -> Result<QueryAnswer, ApiError> {
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
    match ask(lookup, &mut map, cover) {
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
