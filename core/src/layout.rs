//! Object layouts: which physical Mooncake objects make up one logical page, and the key codec
//! between a page hash and its object keys.
//!
//! Object key of page hash `H` with key prefix `P` and suffix `S`: `{P}_{H}{S}` when the layout
//! has a prefix (an empty prefix still yields the leading `_`), else `{H}{S}`. `H` is 64 lowercase
//! hex characters. Every suffix starts with `_` and holds no run of 64 hex characters, which makes
//! [`parse_object_key`] the exact inverse of [`Layout::object_keys`].

use alloc::string::String;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

use crate::hash::PageHash;

/// When a pool's objects must be present for a page to count as a hit.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HitPolicy {
    /// Every page of the matched prefix needs the pool's objects.
    AllPages,
    /// Only the last `W` pages of the matched prefix need the pool's objects.
    TrailingPages(u32),
}

/// A set of object suffixes with one hit policy (SGLang's `pools` entry).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Pool {
    /// The pool's name (informational).
    pub name: String,
    /// The suffixes appended to `{P}_{H}` (or `{H}`), each starting with `_`.
    pub suffixes: Vec<String>,
    /// When these objects are required.
    pub hit_policy: HitPolicy,
}

/// Everything needed to turn tokens into page hashes and page hashes into object keys.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Layout {
    /// Tokens per page (at least 1).
    pub page_size: u32,
    /// EAGLE mode: pages are made of token bigrams.
    pub eagle: bool,
    /// The key prefix `P`; `None` when keys start with the page hash.
    pub key_prefix: Option<String>,
    /// The object pools; at least one with [`HitPolicy::AllPages`].
    pub pools: Vec<Pool>,
}

/// An object key split into its parts.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectKey<'a> {
    /// The key prefix; `Some("")` for a key that starts with `_` before the hash.
    pub prefix: Option<&'a str>,
    /// The page hash.
    pub page_hash: PageHash,
    /// Everything after the hash; starts with `_`.
    pub suffix: &'a str,
}

// LAYOUT CONSTRUCTION AND KEY CODEC PENDING (helper): see the crate's issue 2.
