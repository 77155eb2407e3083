//! Object layouts: which physical Mooncake objects make up one logical page, and the key codec
//! between a page hash and its object keys.
//!
//! Object key of page hash `H` with key prefix `P` and suffix `S`: `{P}_{H}{S}` when the layout
//! has a prefix (an empty prefix still yields the leading `_`), else `{H}{S}`. `H` is 64 lowercase
//! hex characters. Every suffix starts with `_` and holds no run of 64 hex characters, which makes
//! [`parse_object_key`] the exact inverse of [`Layout::object_keys`].
//!
//! A layout comes from one of four places:
//! - SGLang's own description (`GET /get_hicache_l3_cache_layout`): [`LayoutDocument`], then
//!   [`Layout::from_document`]. Preferred: SGLang says what it writes.
//! - SGLang's launch parameters: [`SglangParams`], then [`Layout::from_sglang`] (the KV pool);
//!   with side pools, [`HybridParams`], then [`Layout::from_hybrid`].
//! - An explicit prefix and suffix list: [`Layout::new`].
//!
//! A running cluster's workers each advertise their own; [`LayoutDocument::merge_ranks`] joins
//! the documents of one worker's ranks, and [`LayoutVotes`] decides, per model, which layout is
//! in force or that the workers disagree (the model then answers misses).
//!
//! # Pool kinds and their keys
//! A page's objects are grouped in pools, each with a [`HitPolicy`]: an all-pages pool is
//! needed on every page of a hit, a trailing-pages pool (`W`) only on the last `W` pages of the
//! matched prefix (SGLang writes it for the other pages or not: holes). A page is a hit only when
//! every object its pools demand is present. The key is `{P}_{H}{suffix}`; in the suffixes,
//! `r` is the MHA rank part (`{tp_rank}`, or `{tp_rank}_{pp_rank}` with PP > 1; one object per
//! TP rank and stage) and `m` the MLA rank part (empty, or `{pp_rank}` with PP > 1; one object
//! per stage, written alike by every TP rank; with DCP > 1 `dcp{d}_cp{c}`, or
//! `dcp{d}_cp{c}_{pp_rank}`, one per DCP and attention-CP rank). SGLang's pool names:
//!
//! | pool | suffixes |
//! |---|---|
//! | `kv`, MHA | `_{r}_k`, `_{r}_v` (ranks over `tp_lcm` with split heads) |
//! | `kv`, MLA | `_{m}_k` (`__k`; with DCP, `_dcp{d}_cp{c}_k`) |
//! | `kv`, logical anchor (DeepSeek-V4) | none: it stores no object and demands none |
//! | `mamba` | `_{r}_temporal` (omitted when the temporal state is empty), `_{r}_conv_{i}` |
//! | `draft` | MLA draft pool: `_{m}_draft_k`; MHA: `_{r}_draft_k`, `_{r}_draft_v` |
//! | `swa` | MLA: `_{m}_swa`; MHA: `_{r}_swa_k`, `_{r}_swa_v` |
//! | `draft_swa` | MLA or DeepSeek-V4 pool: `_{m}_draft_swa`; MHA: `_{r}_draft_swa_k`, `_{r}_draft_swa_v` |
//! | `indexer`, `draft_indexer` | `_{m}_{pool}` |
//! | `deepseek_v4_c1`, `_c1_indexer`, `_c1_indexer_scale`, `_c2`, `_c2_indexer`, `_c2_indexer_scale`, `_c4`, `_c4_rope`, `_c4_indexer`, `_c4_indexer_scale`, `_c128`, `_c128_rope`, `_c4_state`, `_c4_indexer_state`, `_c128_state` | `_{m}_{pool}` (`__deepseek_v4_c4`) |
//!
//! Which pools are all-pages and which trailing (and `W`) is SGLang's choice per model (Mamba
//! and SWA states are typically trailing); the document says it, [`SidePool`] takes it. The
//! group id of every object of a page is `sglang-hicache:{P}_{H}` ([`Layout::group_id`]): the
//! full key prefix, as SGLang tags the logical key before grouping.
//!
//! Every constructor runs [`Layout::validate`]; a hand-built `Layout` SHOULD be validated before
//! use.

use alloc::borrow::ToOwned;
use alloc::string::String;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

use crate::hash::{Namespace, PageHash, PageHashes, Token};

mod advertised;
mod document;
mod error;
mod hybrid;
mod key;
mod sglang;
mod votes;

pub use advertised::{ModelLayout, WorkerInfo};
pub use document::{LayoutDocument, ObjectLayoutDocument, PoolDocument};
pub use error::LayoutError;
pub use hybrid::{HybridParams, PoolKind, SidePool};
use key::{check_suffix, HASH_HEX_LEN};
pub use key::{parse_object_key, ObjectKey, MAX_SUFFIX_LEN};
pub(crate) use sglang::{mha_rank_parts, mla_rank_parts};
pub use sglang::{DcpParams, KeyRule, SglangParams};
pub use votes::{Advertised, LayoutVotes, ModelVerdict};

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

/// The most objects one logical page may have; larger layouts are refused as misconfigured.
pub const MAX_OBJECTS_PER_PAGE: usize = 4096;

impl Pool {
    /// Builds a pool whose objects every page of a hit needs.
    pub fn all_pages(name: impl Into<String>, suffixes: Vec<String>) -> Pool {
        Pool {
            name: name.into(),
            suffixes,
            hit_policy: HitPolicy::AllPages,
        }
    }
}

impl Layout {
    /// Builds and validates a layout from an explicit key prefix and pools (EAGLE off).
    pub fn new(
        page_size: u32,
        key_prefix: Option<String>,
        pools: Vec<Pool>,
    ) -> Result<Layout, LayoutError> {
        let layout = Layout {
            page_size,
            eagle: false,
            key_prefix,
            pools,
        };
        layout.validate()?;
        Ok(layout)
    }

    /// Returns the layout with EAGLE mode set to `eagle` (layout documents do not carry it).
    #[must_use]
    pub fn with_eagle(mut self, eagle: bool) -> Layout {
        self.eagle = eagle;
        self
    }

    /// Checks every rule [`parse_object_key`] and the index rely on.
    ///
    /// The page size is at least 1; some pool has [`HitPolicy::AllPages`]; no pool is empty;
    /// trailing windows are at least 1 page; every suffix starts with `_`, is at most
    /// [`MAX_SUFFIX_LEN`] bytes, holds no run of 64 lowercase hex characters and appears once
    /// across all pools; the prefix holds no control character; a page has at most
    /// [`MAX_OBJECTS_PER_PAGE`] objects.
    pub fn validate(&self) -> Result<(), LayoutError> {
        if self.page_size == 0 {
            return Err(LayoutError::ZeroPageSize);
        }
        if let Some(prefix) = &self.key_prefix {
            if prefix.chars().any(char::is_control) {
                return Err(LayoutError::ControlCharInPrefix);
            }
        }
        if !self
            .pools
            .iter()
            .any(|pool| pool.hit_policy == HitPolicy::AllPages)
        {
            return Err(LayoutError::NoAllPagesPool);
        }
        if self.object_count() > MAX_OBJECTS_PER_PAGE {
            return Err(LayoutError::TooManyObjects);
        }
        let mut seen: Vec<&str> = Vec::with_capacity(self.object_count());
        for pool in &self.pools {
            if pool.suffixes.is_empty() {
                return Err(LayoutError::EmptyPool {
                    pool: pool.name.clone(),
                });
            }
            if pool.hit_policy == HitPolicy::TrailingPages(0) {
                return Err(LayoutError::ZeroTrailingPages {
                    pool: pool.name.clone(),
                });
            }
            for suffix in &pool.suffixes {
                check_suffix(suffix)?;
                seen.push(suffix);
            }
        }
        seen.sort_unstable();
        if let Some(pair) = seen.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(LayoutError::DuplicateSuffix {
                suffix: pair[0].to_owned(),
            });
        }
        Ok(())
    }

    /// Returns the lazy page hashes of `tokens` under this layout's page size and EAGLE mode.
    pub fn page_hashes<'t, T: Token>(
        &self,
        tokens: &'t [T],
        namespace: Namespace<'_>,
    ) -> PageHashes<'t, T> {
        PageHashes::new(tokens, self.page_size, self.eagle, namespace)
    }

    /// Returns every suffix with its pool's hit policy, pools in order.
    pub fn suffixes(&self) -> impl Iterator<Item = (&str, HitPolicy)> + '_ {
        self.pools.iter().flat_map(|pool| {
            pool.suffixes
                .iter()
                .map(move |suffix| (suffix.as_str(), pool.hit_policy))
        })
    }

    /// Returns the number of objects of one page (all pools).
    pub fn object_count(&self) -> usize {
        self.pools.iter().map(|pool| pool.suffixes.len()).sum()
    }

    /// Returns the position in [`Layout::suffixes`] of a parsed key's suffix, when the key's
    /// prefix is this layout's; `None` for a key of another layout.
    pub fn object_index(&self, key: &ObjectKey<'_>) -> Option<usize> {
        if key.prefix != self.key_prefix.as_deref() {
            return None;
        }
        self.suffixes().position(|(suffix, _)| suffix == key.suffix)
    }

    /// Returns the logical key `{P}_{H}` (or `{H}` without a prefix).
    pub fn logical_key(&self, page_hash: &PageHash) -> String {
        let mut out = String::new();
        self.write_logical_key(page_hash, &mut out);
        out
    }

    /// Replaces the contents of `out` with the logical key `{P}_{H}` (or `{H}`).
    pub fn write_logical_key(&self, page_hash: &PageHash, out: &mut String) {
        out.clear();
        if let Some(prefix) = &self.key_prefix {
            out.push_str(prefix);
            out.push('_');
        }
        let mut hex = [0u8; HASH_HEX_LEN];
        page_hash.write_hex(&mut hex);
        out.push_str(core::str::from_utf8(&hex).expect("hex digits are ASCII"));
    }

    /// Returns SGLang's group id of a page: `sglang-hicache:{logical key}`.
    pub fn group_id(&self, page_hash: &PageHash) -> String {
        let mut out = String::new();
        self.write_logical_key(page_hash, &mut out);
        out.insert_str(0, "sglang-hicache:");
        out
    }

    /// Replaces the contents of `out` with the object key `{P}_{H}{suffix}` (or `{H}{suffix}`).
    ///
    /// Allocates only when `out` is too small; `suffix` SHOULD be one of this layout's.
    pub fn write_object_key(&self, page_hash: &PageHash, suffix: &str, out: &mut String) {
        self.write_logical_key(page_hash, out);
        out.push_str(suffix);
    }

    /// Returns every object key of a page: all pools' suffixes, in order.
    ///
    /// ```
    /// use hicache_index::layout::{Layout, SglangParams};
    ///
    /// let layout = Layout::from_sglang(&SglangParams::new(4, 2)).unwrap();
    /// let h = "cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72";
    /// let keys: Vec<String> = layout.object_keys(&h.parse().unwrap()).collect();
    /// assert_eq!(keys, [
    ///     format!("{h}_0_k"), format!("{h}_0_v"), format!("{h}_1_k"), format!("{h}_1_v"),
    /// ]);
    /// ```
    pub fn object_keys(&self, page_hash: &PageHash) -> impl Iterator<Item = String> + '_ {
        let page_hash = *page_hash;
        self.suffixes().map(move |(suffix, _)| {
            let mut out = String::new();
            self.write_object_key(&page_hash, suffix, &mut out);
            out
        })
    }
}
