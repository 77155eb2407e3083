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
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write as _};
use serde::{Deserialize, Serialize};

use crate::hash::{Namespace, PageHash, PageHashes, Token};

mod document;
mod hybrid;
mod votes;

pub use document::{LayoutDocument, ObjectLayoutDocument, PoolDocument};
pub use hybrid::{HybridParams, PoolKind, SidePool};
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

/// The most objects one logical page may have; larger layouts are refused as misconfigured.
pub const MAX_OBJECTS_PER_PAGE: usize = 4096;

/// The longest suffix [`parse_object_key`] accepts, in bytes.
pub const MAX_SUFFIX_LEN: usize = 64;

/// Length of a page hash in hex characters.
const HASH_HEX_LEN: usize = 64;

/// Why a layout cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayoutError {
    /// The page size is 0.
    ZeroPageSize,
    /// No pool has [`HitPolicy::AllPages`]: nothing would tie a hit to every page.
    NoAllPagesPool,
    /// A pool lists no suffix.
    EmptyPool {
        /// The pool's name.
        pool: String,
    },
    /// A [`HitPolicy::TrailingPages`] window of 0 pages.
    ZeroTrailingPages {
        /// The pool's name.
        pool: String,
    },
    /// A `trailing_pages` pool of a layout document gives no window size.
    MissingTrailingPages {
        /// The pool's name.
        pool: String,
    },
    /// A layout document names a hit policy this crate does not know.
    UnknownHitPolicy {
        /// The pool's name.
        pool: String,
        /// The policy as written.
        policy: String,
    },
    /// A suffix does not start with `_`.
    SuffixWithoutUnderscore {
        /// The suffix.
        suffix: String,
    },
    /// A suffix is longer than [`MAX_SUFFIX_LEN`] bytes.
    SuffixTooLong {
        /// The suffix.
        suffix: String,
    },
    /// A suffix holds a run of 64 lowercase hex characters, which could pass for a page hash.
    SuffixLooksLikeHash {
        /// The suffix.
        suffix: String,
    },
    /// The same suffix appears twice (in one pool or across pools).
    DuplicateSuffix {
        /// The suffix.
        suffix: String,
    },
    /// The key prefix holds a control character.
    ControlCharInPrefix,
    /// One page would have more than [`MAX_OBJECTS_PER_PAGE`] objects.
    TooManyObjects,
    /// A parallelism size (tp, pp, tp_lcm, dcp or cp) is 0.
    ZeroParallelism,
    /// SGLang parameters whose key scheme this crate does not know; use SGLang's advertised
    /// layout document instead.
    Unsupported(&'static str),
    /// A layout document says `"enabled": false`: the worker does not stand behind its pools
    /// (they may name one TP rank's objects only), so it is never used as a layout.
    Disabled {
        /// The document's `reason`, if it gave one.
        reason: Option<String>,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::ZeroPageSize => f.write_str("page size must be at least 1"),
            LayoutError::NoAllPagesPool => f.write_str("no pool has the all_pages hit policy"),
            LayoutError::EmptyPool { pool } => write!(f, "pool {pool:?} has no suffix"),
            LayoutError::ZeroTrailingPages { pool } => {
                write!(f, "pool {pool:?} has a trailing window of 0 pages")
            }
            LayoutError::MissingTrailingPages { pool } => {
                write!(f, "trailing_pages pool {pool:?} gives no window size")
            }
            LayoutError::UnknownHitPolicy { pool, policy } => {
                write!(f, "pool {pool:?} has unknown hit policy {policy:?}")
            }
            LayoutError::SuffixWithoutUnderscore { suffix } => {
                write!(f, "suffix {suffix:?} does not start with '_'")
            }
            LayoutError::SuffixTooLong { suffix } => {
                write!(f, "suffix {suffix:?} is longer than {MAX_SUFFIX_LEN} bytes")
            }
            LayoutError::SuffixLooksLikeHash { suffix } => {
                write!(f, "suffix {suffix:?} holds 64 hex characters in a row")
            }
            LayoutError::DuplicateSuffix { suffix } => write!(f, "suffix {suffix:?} repeats"),
            LayoutError::ControlCharInPrefix => f.write_str("key prefix holds a control character"),
            LayoutError::TooManyObjects => {
                write!(f, "more than {MAX_OBJECTS_PER_PAGE} objects per page")
            }
            LayoutError::ZeroParallelism => f.write_str("a parallelism size is 0"),
            LayoutError::Unsupported(what) => write!(f, "unsupported SGLang parameters: {what}"),
            LayoutError::Disabled {
                reason: Some(reason),
            } => write!(
                f,
                "the layout document is disabled (\"enabled\": false: {reason}); give the layout \
                 flags or a document SGLang stands behind"
            ),
            LayoutError::Disabled { reason: None } => f.write_str(
                "the layout document is disabled (\"enabled\": false); give the layout flags or a \
                 document SGLang stands behind",
            ),
        }
    }
}

impl core::error::Error for LayoutError {}

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

/// Which SGLang rule turns the launch parameters into the key prefix.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyRule {
    /// SGLang ≥ 0.5.17: tag, served model name, and the DCP descriptor, `_`-joined.
    #[default]
    Sglang0517,
    /// SGLang ≤ 0.5.16: the `extra_backend_tag` alone.
    TagOnly,
}

/// Decode-context parallelism of an MLA model (SGLang `--dcp-size`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DcpParams {
    /// The DCP size; 1 means no DCP.
    pub dcp: u32,
    /// The attention context-parallel size (`cp` in the prefix; each shard suffix names the CP
    /// rank `c` in `0..cp`). Defaults to 1.
    #[serde(default = "one")]
    pub cp: u32,
}

/// The SGLang launch parameters that decide the object keys of a page.
///
/// Unknown fields are refused when deserialized: a misspelt `tp` silently read as a default
/// would make the index demand too few objects per page (false hits).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SglangParams {
    /// SGLang's `--page-size` in tokens. With DCP > 1 SGLang's logical page (the hashed page,
    /// and `page` in the prefix) is `page_size × dcp` tokens; [`Layout::from_sglang`] multiplies.
    pub page_size: u32,
    /// EAGLE speculative decoding (pages of bigrams).
    #[serde(default)]
    pub eagle: bool,
    /// The TP size (the attention-TP size under DP attention).
    pub tp: u32,
    /// The PP size. Defaults to 1.
    #[serde(default = "one")]
    pub pp: u32,
    /// The model uses MLA (rank-replicated KV: one K object per PP stage).
    #[serde(default)]
    pub mla: bool,
    /// SGLang's `tp_lcm_size`; heads are split over `tp_lcm` ranks when it exceeds `tp`.
    #[serde(default)]
    pub tp_lcm: Option<u32>,
    /// `extra_backend_tag` of the storage backend's extra config; `Some("")` still counts.
    #[serde(default)]
    pub extra_backend_tag: Option<String>,
    /// The served model name (SGLang falls back to the model path); `None` (or an empty name)
    /// leaves it out of the prefix.
    #[serde(default)]
    pub model: Option<String>,
    /// Decode-context parallelism; `None` is the same as a DCP size of 1.
    #[serde(default)]
    pub dcp: Option<DcpParams>,
    /// The prefix rule of the SGLang version that writes the keys.
    #[serde(default)]
    pub key_rule: KeyRule,
}

fn one() -> u32 {
    1
}

impl SglangParams {
    /// Parameters of a plain MHA deployment: `page_size`, `tp`, PP 1, everything else off.
    pub fn new(page_size: u32, tp: u32) -> SglangParams {
        SglangParams {
            page_size,
            eagle: false,
            tp,
            pp: 1,
            mla: false,
            tp_lcm: None,
            extra_backend_tag: None,
            model: None,
            dcp: None,
            key_rule: KeyRule::Sglang0517,
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

    /// Builds the layout SGLang derives from its launch parameters (one all-pages pool `kv`).
    ///
    /// Suffixes, in SGLang's order:
    /// - MHA: for each PP stage `p`, for each rank `r` in `0..tp` (`0..tp_lcm` when
    ///   `tp_lcm > tp`, heads split): `_{s}_k`, `_{s}_v` with `s = r` (PP 1) or `s = r_p`.
    /// - MLA: `__k` (PP 1), else `_{p}_k` for each stage.
    /// - MLA with DCP > 1: `_dcp{d}_cp{c}_k` (PP 1) or `_dcp{d}_cp{c}_{p}_k` for each stage `p`,
    ///   attention-CP rank `c` in `0..cp` and DCP rank `d` in `0..dcp`. Attention CP without
    ///   DCP adds nothing to any key.
    ///
    /// Key prefix ([`KeyRule::Sglang0517`]): the `_`-joined tag (if set, even empty), model name
    /// with `/` replaced by `-` (if set and not empty) and, with DCP > 1,
    /// `tp{tp}_dcp{dcp}_page{page_size×dcp}_pp{pp}_cp{cp}`; no prefix when the list is empty.
    /// [`KeyRule::TagOnly`]: the tag alone.
    ///
    /// DCP is refused without MLA (SGLang refuses it too).
    pub fn from_sglang(params: &SglangParams) -> Result<Layout, LayoutError> {
        let SglangParams {
            page_size,
            eagle,
            tp,
            pp,
            mla,
            tp_lcm,
            ref extra_backend_tag,
            ref model,
            dcp,
            key_rule,
        } = *params;
        if tp == 0 || pp == 0 || tp_lcm == Some(0) {
            return Err(LayoutError::ZeroParallelism);
        }
        let dcp = match dcp {
            Some(DcpParams { dcp: 0, .. } | DcpParams { cp: 0, .. }) => {
                return Err(LayoutError::ZeroParallelism)
            }
            Some(d) if d.dcp > 1 => Some(d),
            _ => None,
        };
        let page_size = match dcp {
            Some(d) => page_size
                .checked_mul(d.dcp)
                .ok_or(LayoutError::Unsupported("page size × dcp overflows u32"))?,
            None => page_size,
        };

        let suffixes = match dcp {
            Some(_) if !mla => return Err(LayoutError::Unsupported("DCP without MLA")),
            _ if mla => {
                let parts = mla_rank_parts(pp, dcp)?;
                parts.iter().map(|m| format!("_{m}_k")).collect()
            }
            _ => {
                let ranks = tp_lcm.map_or(tp, |lcm| lcm.max(tp));
                check_count(u64::from(ranks) * u64::from(pp) * 2)?;
                let parts = mha_rank_parts(ranks, pp)?;
                let mut out = Vec::with_capacity(parts.len() * 2);
                for r in &parts {
                    out.push(format!("_{r}_k"));
                    out.push(format!("_{r}_v"));
                }
                out
            }
        };

        let key_prefix = match key_rule {
            KeyRule::TagOnly => extra_backend_tag.clone(),
            KeyRule::Sglang0517 => {
                let mut parts: Vec<String> = Vec::new();
                if let Some(tag) = extra_backend_tag {
                    parts.push(tag.clone());
                }
                if let Some(model) = model.as_deref().filter(|m| !m.is_empty()) {
                    parts.push(model.replace('/', "-"));
                }
                if let Some(d) = dcp {
                    parts.push(format!(
                        "tp{tp}_dcp{}_page{page_size}_pp{pp}_cp{}",
                        d.dcp, d.cp
                    ));
                }
                (!parts.is_empty()).then(|| parts.join("_"))
            }
        };

        let layout = Layout {
            page_size,
            eagle,
            key_prefix,
            pools: alloc::vec![Pool::all_pages("kv", suffixes)],
        };
        layout.validate()?;
        Ok(layout)
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

/// Returns the MLA rank parts `m` of a launch, PP stages outer: `""` (PP 1) or `"{p}"`; with a
/// DCP size above 1, `"dcp{d}_cp{c}"` or `"dcp{d}_cp{c}_{p}"` for each CP rank `c` and DCP rank
/// `d` (SGLang 0.5.23's `MooncakeStore.mla_suffix`, one per rank that writes a distinct object).
pub(crate) fn mla_rank_parts(pp: u32, dcp: Option<DcpParams>) -> Result<Vec<String>, LayoutError> {
    let (dcp_size, cp) = dcp.filter(|d| d.dcp > 1).map_or((1, 1), |d| (d.dcp, d.cp));
    check_count(u64::from(pp) * u64::from(dcp_size) * u64::from(cp))?;
    let mut out = Vec::new();
    for p in 0..pp {
        let stage = if pp > 1 {
            format!("{p}")
        } else {
            String::new()
        };
        if dcp_size == 1 {
            out.push(stage);
            continue;
        }
        for c in 0..cp {
            for d in 0..dcp_size {
                out.push(match pp {
                    1 => format!("dcp{d}_cp{c}"),
                    _ => format!("dcp{d}_cp{c}_{stage}"),
                });
            }
        }
    }
    Ok(out)
}

/// Returns the MHA rank parts `r` of `ranks` TP ranks, PP stages outer: `"{rank}"` (PP 1) or
/// `"{rank}_{p}"` (SGLang 0.5.23's `MooncakeStore.mha_suffix`).
pub(crate) fn mha_rank_parts(ranks: u32, pp: u32) -> Result<Vec<String>, LayoutError> {
    check_count(u64::from(ranks) * u64::from(pp))?;
    let mut out = Vec::new();
    for p in 0..pp {
        for r in 0..ranks {
            out.push(match pp {
                1 => format!("{r}"),
                _ => format!("{r}_{p}"),
            });
        }
    }
    Ok(out)
}

/// Refuses a per-page object count above [`MAX_OBJECTS_PER_PAGE`] before building it.
fn check_count(count: u64) -> Result<(), LayoutError> {
    if count > MAX_OBJECTS_PER_PAGE as u64 {
        return Err(LayoutError::TooManyObjects);
    }
    Ok(())
}

/// Checks one suffix against the rules that make key parsing exact.
fn check_suffix(suffix: &str) -> Result<(), LayoutError> {
    if !suffix.starts_with('_') {
        return Err(LayoutError::SuffixWithoutUnderscore {
            suffix: suffix.to_owned(),
        });
    }
    if suffix.len() > MAX_SUFFIX_LEN {
        return Err(LayoutError::SuffixTooLong {
            suffix: suffix.to_owned(),
        });
    }
    let mut run = 0;
    for b in suffix.bytes() {
        run = if is_lower_hex(b) { run + 1 } else { 0 };
        if run >= HASH_HEX_LEN {
            return Err(LayoutError::SuffixLooksLikeHash {
                suffix: suffix.to_owned(),
            });
        }
    }
    Ok(())
}

fn is_lower_hex(b: u8) -> bool {
    matches!(b, b'0'..=b'9' | b'a'..=b'f')
}

/// Splits an object key into prefix, page hash and suffix, without allocating.
///
/// The hash is the last run of exactly 64 lowercase hex characters that starts the key or
/// follows a `_`, and is followed by a `_` that opens a suffix of at most [`MAX_SUFFIX_LEN`]
/// bytes. The prefix is everything before the `_` in front of the hash (`Some("")` when the key
/// starts with `_`), or `None` when the hash starts the key. For every valid [`Layout`] this is
/// the exact inverse of [`Layout::object_keys`]; any other shape gives `None`.
///
/// ```
/// use hicache_index::layout::parse_object_key;
///
/// let h = "cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72";
/// let key = format!("prod_Qwen-Qwen3-8B_{h}_1_v");
/// let parsed = parse_object_key(&key).unwrap();
/// assert_eq!(parsed.prefix, Some("prod_Qwen-Qwen3-8B"));
/// assert_eq!(parsed.page_hash.to_string(), h);
/// assert_eq!(parsed.suffix, "_1_v");
/// assert_eq!(parse_object_key("sglang_mooncake_store_warmup_key"), None);
/// ```
pub fn parse_object_key(key: &str) -> Option<ObjectKey<'_>> {
    let bytes = key.as_bytes();
    // The suffix is 1..=MAX_SUFFIX_LEN bytes, so the hash starts in this window.
    let last = bytes.len().checked_sub(HASH_HEX_LEN + 1)?;
    let first = bytes.len().saturating_sub(HASH_HEX_LEN + MAX_SUFFIX_LEN);
    for start in (first..=last).rev() {
        let end = start + HASH_HEX_LEN;
        if bytes[end] != b'_' || (start > 0 && bytes[start - 1] != b'_') {
            continue;
        }
        let Some(page_hash) = PageHash::from_hex(&bytes[start..end]) else {
            continue;
        };
        // Both cuts sit next to an ASCII '_' or a hex digit: char boundaries.
        return Some(ObjectKey {
            prefix: (start > 0).then(|| &key[..start - 1]),
            page_hash,
            suffix: &key[end..],
        });
    }
    None
}

impl fmt::Display for ObjectKey<'_> {
    /// Writes the key back: `{P}_{H}{S}`, or `{H}{S}` without a prefix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(prefix) = self.prefix {
            f.write_str(prefix)?;
            f.write_char('_')?;
        }
        write!(f, "{}{}", self.page_hash, self.suffix)
    }
}
