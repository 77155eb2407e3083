//! Object layouts: which physical Mooncake objects make up one logical page, and the key codec
//! between a page hash and its object keys.
//!
//! Object key of page hash `H` with key prefix `P` and suffix `S`: `{P}_{H}{S}` when the layout
//! has a prefix (an empty prefix still yields the leading `_`), else `{H}{S}`. `H` is 64 lowercase
//! hex characters. Every suffix starts with `_` and holds no run of 64 hex characters, which makes
//! [`parse_object_key`] the exact inverse of [`Layout::object_keys`].
//!
//! A layout comes from one of three places:
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

mod advertised;
mod document;
mod error;
mod hybrid;
mod key;
mod limits;
mod objects;
mod sglang;
mod votes;

pub use advertised::{ModelLayout, WorkerInfo};
pub use document::{LayoutDocument, ObjectLayoutDocument, PoolDocument};
pub use error::LayoutError;
pub use hybrid::{HybridParams, PoolKind, SidePool};
pub use key::{parse_object_key, ObjectKey};
pub use limits::{MAX_OBJECTS_PER_PAGE, MAX_SUFFIX_LEN};
pub use objects::{HitPolicy, Layout, Pool};
pub use sglang::{DcpParams, KeyRule, SglangParams};
pub use votes::{Advertised, LayoutVotes, ModelVerdict};
