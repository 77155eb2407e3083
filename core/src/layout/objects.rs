//! Which objects make up one logical page: [`Pool`]s with their [`HitPolicy`], and the
//! [`Layout`] that turns tokens into page hashes and page hashes into object keys.

use alloc::borrow::ToOwned;
use alloc::string::String;
use alloc::vec::Vec;

use serde::{Deserialize, Serialize};

use crate::hash::{Namespace, PageHash, PageHashes, Token};

use super::error::LayoutError;
use super::key::{check_suffix, ObjectKey, HASH_HEX_LEN};
use super::limits::MAX_OBJECTS_PER_PAGE;

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

    /// Checks every rule [`parse_object_key`](super::parse_object_key) and the index rely on.
    ///
    /// The page size is at least 1; some pool has [`HitPolicy::AllPages`]; no pool is empty;
    /// trailing windows are at least 1 page; every suffix starts with `_`, is at most
    /// [`MAX_SUFFIX_LEN`](super::MAX_SUFFIX_LEN) bytes, holds no run of 64 lowercase hex characters
    /// and appears once across all pools; the prefix holds no control character; a page has at most
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
