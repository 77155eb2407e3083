//! Test support: replays Mooncake's FAST'25 request traces (issue 31, item 1).
//!
//! Each request's `hash_ids` become tokens (every id a block of 512 token ids of its own,
//! [`blocks`]); a store model of fixed capacity with per-object LRU eviction ([`store`]) loads
//! each request's present leading pages at its arrival and puts its full pages after its
//! prefill; the master's events are encoded in Mooncake's format by the project's wire crate
//! ([`master`]) and fed to a real session through `Session::handle`, to the reference and to a
//! plain set of exact keys ([`followers`]); each request is first asked of each of them, by
//! page hashes and by tokens, and every answer is checked against the store ([`mod@replay`]).
//!
//! ```text
//! trace --blocks--> tokens, page hashes --+--> ask every follower --check--> store's truth
//!                                         +--> store: load, put --changes--> master --frames--> followers
//! ```
//!
//! [`concurrent`] replays the same into ours alone while another thread queries it.
//!
//! The bench `cargo bench -p hicache-index-traces --bench replay` prints the figures
//! ([`report`]); `-- --quick` (or `--test`) replays a slice of each trace.

pub mod blocks;
pub mod concurrent;
pub mod followers;
pub mod master;
pub mod replay;
pub mod report;
pub mod store;
pub mod trace;

pub use concurrent::{replay_concurrent, Concurrent};
pub use replay::{replay, Meter, Model, NoMeter, ReplayConfig};
pub use report::{FollowerFigures, QueryFigures, Replayed};
pub use trace::{Trace, TraceName};
