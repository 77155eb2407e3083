//! What a query of the index answers: [`IndexHits`], and which pages its map covers
//! ([`MapCover`]).

/// The answer of [`Index::query`](super::Index::query).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexHits {
    /// Leading pages fully present, honouring trailing-page policies.
    pub prefix_pages: usize,
    /// Pages hashed and probed.
    pub pages_checked: usize,
    /// Of the prefix pages, how many have a memory replica of every all-pages object (or one
    /// on a medium the events did not name).
    pub memory_pages: usize,
    /// Of the prefix pages, how many have an all-pages object present only on disk.
    pub disk_only_pages: usize,
}

/// Which pages a query's per-page map covers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MapCover {
    /// The pages checked until the first that misses one of its objects, that page included
    /// (the rest of the map is false): hashing and probing stop there, as for a query without
    /// a map. What a router needs (the prefix), at the cost of the prefix.
    #[default]
    UntilMiss,
    /// Every page up to the map's length, hashed and probed whatever misses before it.
    Every,
}
