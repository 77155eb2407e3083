//! SGLang's description of its object layout, `GET /get_hicache_l3_cache_layout`, and the
//! layout it describes.

use alloc::borrow::ToOwned;
use alloc::string::String;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

use super::{HitPolicy, Layout, LayoutError, Pool};

/// SGLang's description of its object layout (`GET /get_hicache_l3_cache_layout`).
///
/// Unknown fields are ignored, so newer SGLang versions still parse.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutDocument {
    /// Tokens per page.
    pub page_size: u32,
    /// The key prefix and the pools.
    pub hicache_object_layout: ObjectLayoutDocument,
}

/// The `hicache_object_layout` member of a [`LayoutDocument`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectLayoutDocument {
    /// The key prefix `P`; `null` (or absent) when keys start with the page hash.
    #[serde(default)]
    pub key_prefix: Option<String>,
    /// The object pools.
    pub pools: Vec<PoolDocument>,
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
    /// A pool without suffixes is a logical anchor (it stores no object) and demands nothing;
    /// every other rule is [`Layout::validate`]'s.
    pub fn from_document(document: &LayoutDocument) -> Result<Layout, LayoutError> {
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
