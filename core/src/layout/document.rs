//! SGLang's description of its object layout, `GET /get_hicache_l3_cache_layout`, and the
//! layout it describes.

use alloc::borrow::ToOwned;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use serde::{Deserialize, Serialize};

use super::error::LayoutError;
use super::objects::{HitPolicy, Layout, Pool};

/// SGLang's description of its object layout (`GET /get_hicache_l3_cache_layout`).
///
/// Unknown fields are ignored, so newer SGLang versions still parse.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutDocument {
    /// Whether the worker stands behind the layout: SGLang 0.5.23 writes `false` when it cannot
    /// describe its keys (every MHA model, and an MLA model with a mamba or an MHA draft pool,
    /// whose pools then list TP rank 0's objects only). Absent reads as enabled (older SGLang).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Why the layout is disabled, as SGLang says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Tokens per page; `null` (SGLang writes it so in some disabled documents) reads as 0,
    /// which no enabled layout accepts.
    #[serde(deserialize_with = "null_as_zero")]
    pub page_size: u32,
    /// The key prefix and the pools.
    pub hicache_object_layout: ObjectLayoutDocument,
}

fn null_as_zero<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    Ok(Option::<u32>::deserialize(deserializer)?.unwrap_or(0))
}

/// The `hicache_object_layout` member of a [`LayoutDocument`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectLayoutDocument {
    /// The key prefix `P`; `null` (or absent) when keys start with the page hash.
    #[serde(default)]
    pub key_prefix: Option<String>,
    /// The object pools.
    pub pools: Vec<PoolDocument>,
    /// The PP stage of the rank that wrote the document (its suffixes are that stage's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pp_rank: Option<u32>,
    /// The PP size of the instance; absent reads as 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pp_size: Option<u32>,
}

/// One entry of `pools` in a [`LayoutDocument`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolDocument {
    /// The pool's name.
    pub pool: String,
    /// The suffixes appended to `{P}_{H}` (or `{H}`).
    pub suffixes: Vec<String>,
    /// `"all_pages"` or `"trailing_pages"`; absent reads as `"all_pages"` (the strictest).
    #[serde(default = "all_pages_name")]
    pub hit_policy: String,
    /// The window `W` of a `"trailing_pages"` pool.
    #[serde(default)]
    pub trailing_pages: Option<u32>,
}

fn all_pages_name() -> String {
    "all_pages".to_owned()
}

impl Layout {
    /// Builds the layout SGLang advertises (EAGLE off: set it with [`Layout::with_eagle`]).
    ///
    /// A document with `"enabled": false` is refused ([`LayoutError::Disabled`]): its pools may
    /// list one TP rank's objects only, so a layout built from it would demand too few objects
    /// (false hits). A pool without suffixes is a logical anchor (it stores no object) and
    /// demands nothing; every other rule is [`Layout::validate`]'s.
    pub fn from_document(document: &LayoutDocument) -> Result<Layout, LayoutError> {
        if document.enabled == Some(false) {
            return Err(LayoutError::Disabled {
                reason: document.reason.clone(),
            });
        }
        let object_layout = &document.hicache_object_layout;
        let mut pools = Vec::with_capacity(object_layout.pools.len());
        for pool in &object_layout.pools {
            let hit_policy = match pool.hit_policy.as_str() {
                "all_pages" => HitPolicy::AllPages,
                "trailing_pages" => match pool.trailing_pages {
                    Some(window) => HitPolicy::TrailingPages(window),
                    None => {
                        return Err(LayoutError::MissingTrailingPages {
                            pool: pool.pool.clone(),
                        })
                    }
                },
                other => {
                    return Err(LayoutError::UnknownHitPolicy {
                        pool: pool.pool.clone(),
                        policy: other.to_owned(),
                    })
                }
            };
            if pool.suffixes.is_empty() {
                // A logical anchor (DeepSeek-V4's KV pool) stores no object: it demands none.
                continue;
            }
            pools.push(Pool {
                name: pool.pool.clone(),
                suffixes: pool.suffixes.clone(),
                hit_policy,
            });
        }
        Layout::new(document.page_size, object_layout.key_prefix.clone(), pools)
    }
}

/// The largest PP size a set of rank documents may claim.
const MAX_PP_SIZE: u32 = 1024;

impl LayoutDocument {
    /// Merges the documents of one SGLang instance's ranks (`GET /get_hicache_l3_cache_layout`
    /// answers one per rank; each lists the suffixes of its own PP stage, and of its own TP rank
    /// where the keys name it) into the document of the instance: every pool's suffixes over all
    /// ranks, PP stages in order.
    ///
    /// The ranks MUST agree on the page size, key prefix, PP size, and each pool's hit policy;
    /// every PP stage `0..pp_size` MUST have sent a document. Anything else is refused with a
    /// reason for a person: a layout built from part of the ranks would demand too few objects
    /// (false hits).
    ///
    /// A document with PP size above 1 and `"pp_rank": null` is one already merged over its
    /// stages (SGLang 0.5.23's `merge_l3_layouts`, which the worker's endpoint answers: every
    /// stage's pools one after another, a pool name once per stage). It MUST come alone; its
    /// pools of one name are joined as the ranks' are. SGLang only writes it when every stage
    /// answered (else it says `"enabled": false`).
    pub fn merge_ranks(documents: &[LayoutDocument]) -> Result<LayoutDocument, String> {
        let Some(first) = documents.first() else {
            return Err("no rank sent a layout".into());
        };
        let page_size = first.page_size;
        let prefix = &first.hicache_object_layout.key_prefix;
        let pp_size = first.hicache_object_layout.pp_size.unwrap_or(1);
        if pp_size == 0 || pp_size > MAX_PP_SIZE {
            return Err(format!("pp_size {pp_size} is out of range"));
        }
        let merged_stages = pp_size > 1
            && documents
                .iter()
                .any(|d| d.hicache_object_layout.pp_rank.is_none());
        if merged_stages && documents.len() > 1 {
            return Err(
                "a document merged over its PP stages (pp_rank null) came with other documents"
                    .into(),
            );
        }
        let mut seen_stage = alloc::vec![merged_stages; pp_size as usize];
        let mut order: Vec<(u32, usize)> = Vec::with_capacity(documents.len());
        for (i, doc) in documents.iter().enumerate() {
            let layout = &doc.hicache_object_layout;
            if doc.page_size != page_size {
                return Err(format!(
                    "ranks disagree on page_size ({} and {page_size})",
                    doc.page_size
                ));
            }
            if &layout.key_prefix != prefix {
                return Err("ranks disagree on key_prefix".into());
            }
            if layout.pp_size.unwrap_or(1) != pp_size {
                return Err("ranks disagree on pp_size".into());
            }
            let stage = match (layout.pp_rank, pp_size) {
                (Some(r), _) if r < pp_size => r,
                // Every stage at once (checked above), or the only stage.
                (None, _) => 0,
                (Some(r), _) => return Err(format!("pp_rank {r} is not below pp_size {pp_size}")),
            };
            seen_stage[stage as usize] = true;
            order.push((stage, i));
        }
        if let Some(missing) = seen_stage.iter().position(|seen| !seen) {
            return Err(format!("PP rank {missing} of {pp_size} sent no layout"));
        }
        order.sort_by_key(|&(stage, i)| (stage, i));
        let mut pools: Vec<PoolDocument> = Vec::new();
        for &(_, i) in &order {
            for pool in &documents[i].hicache_object_layout.pools {
                match pools.iter_mut().find(|p| p.pool == pool.pool) {
                    Some(merged) => {
                        if merged.hit_policy != pool.hit_policy
                            || merged.trailing_pages != pool.trailing_pages
                        {
                            return Err(format!(
                                "ranks disagree on the hit policy of pool {}",
                                pool.pool
                            ));
                        }
                        for suffix in &pool.suffixes {
                            if !merged.suffixes.contains(suffix) {
                                merged.suffixes.push(suffix.clone());
                            }
                        }
                    }
                    None => pools.push(pool.clone()),
                }
            }
        }
        let pool_count = pools.len();
        for &(_, i) in &order {
            if !merged_stages && documents[i].hicache_object_layout.pools.len() != pool_count {
                return Err("ranks disagree on the pools".into());
            }
        }
        // One disabled rank disables the instance: its pools may name that rank's objects only.
        let disabled = documents.iter().find(|d| d.enabled == Some(false));
        Ok(LayoutDocument {
            enabled: disabled.map(|_| false),
            reason: disabled.and_then(|d| d.reason.clone()),
            page_size,
            hicache_object_layout: ObjectLayoutDocument {
                key_prefix: prefix.clone(),
                pools,
                pp_rank: None,
                pp_size: Some(pp_size),
            },
        })
    }
}
