//! hicache-index: which pages of a request are fully present in a Mooncake store.
//!
//! CRATE DOCS PENDING.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod frame;
pub mod hash;
pub mod layout;
pub mod time;

pub use frame::{Batch, Event, EventKind, FrameError, Medium, PayloadError, Seq, Timestamp};
pub use hash::PageHash;
pub use layout::{HitPolicy, Layout, ObjectKey, Pool};
pub use time::Instant;
