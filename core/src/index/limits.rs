//! What the index tracks at most: suffixes per namespace, trailing pools per query, and the
//! lengths of tenants and key prefixes.

/// Suffix slots per namespace: the width of a page's presence mask.
pub const MAX_SUFFIXES: usize = 128;

/// Trailing-page pools a query can honour; a layout with more answers no hits.
pub const MAX_TRAILING_POOLS: usize = 8;

/// The longest tenant the index tracks; objects of longer ones are counted as untracked.
pub const MAX_TENANT_LEN: usize = 256;

/// The longest key prefix the index tracks; objects under longer ones are counted as untracked.
pub const MAX_PREFIX_LEN: usize = 1024;
