//! The bounds every layout keeps: the longest suffix and the most objects a page may have.

/// The longest suffix [`parse_object_key`](crate::layout::parse_object_key) accepts, in bytes.
pub const MAX_SUFFIX_LEN: usize = 64;

/// The most objects one logical page may have; larger layouts are refused as misconfigured.
pub const MAX_OBJECTS_PER_PAGE: usize = 4096;
