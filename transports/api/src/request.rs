//! The query request and answer: `{"tokens": [...], "tenant", "model", "extra_key",
//! "cache_salt", "page_map"}` (or `"page_hashes": [hex...]` instead of tokens) answered by
//! `{"prefix_pages", "pages", "trust", ...}`; several of them in one batch
//! (`{"queries": [...]}` answered by `{"answers": [...]}`).
//!
//! Decoding is strict: a field this version does not know is an error naming it (a typo such
//! as `"cachesalt"` would otherwise be answered from the unsalted namespace). Errors echo at
//! most [`MAX_ECHO_BYTES`] of any input.

mod answer;
mod echo;
mod error;
mod front;
mod query;

pub use answer::{
    BatchAnswer, BatchItem, ErrorAnswer, QueryAnswer, TRUST_LAYOUT_CONFLICT, TRUST_NO_LAYOUT,
};
pub use echo::{clip, MAX_ECHO_BYTES};
pub use error::ApiError;
pub use front::{
    answer, answer_batch, answer_front, answer_lookup, answer_with, known_models,
    respond_batch_json, respond_json, respond_msgpack, Front,
};
pub use query::{BatchRequest, Limits, Query, QueryRequest};
