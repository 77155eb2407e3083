//! What the `hicache-index` services and tools share, independent of any runtime: the query
//! request and answer of `POST /v1/query` and of the nng service (JSON and msgpack), the LAYOUT
//! flags, and the operator tools' plumbing (`hash`, `keys`, `decode`).
//!
//! Every input here comes from the network or a person: decoding is bounded, and a bad input
//! is an [`ApiError`] that names the problem, never a panic.

pub mod layout_args;
pub mod request;
pub mod tools;

pub use layout_args::LayoutArgs;
pub use request::{answer, answer_with, ApiError, Limits, Query, QueryAnswer, QueryRequest};
