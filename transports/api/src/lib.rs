//! The query request and answer shared by the `hicache-index` services, independent of any
//! runtime: `POST /v1/query` and the nng service (JSON and msgpack), and SGLang's layout
//! document read from JSON.
//!
//! Every input here comes from the network or a person: decoding is bounded, and a bad input
//! is an [`ApiError`] that names the problem, never a panic.

pub mod layout_document;
pub mod request;

pub use layout_document::layout_from_document_json;
pub use request::{
    answer, answer_batch, answer_front, answer_lookup, answer_with, clip, known_models,
    respond_batch_json, respond_json, respond_msgpack, ApiError, BatchAnswer, BatchItem,
    BatchRequest, ErrorAnswer, Front, Limits, Query, QueryAnswer, QueryRequest, MAX_ECHO_BYTES,
    TRUST_LAYOUT_CONFLICT, TRUST_NO_LAYOUT,
};
