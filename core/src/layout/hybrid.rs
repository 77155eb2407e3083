//! SGLang's hybrid host pools: the side pools its Mooncake backend writes next to the KV pool
//! (`MooncakeStore._get_hybrid_page_component_keys` in `mooncake_store.py`, SGLang after
//! 0.5.23), and the KV pool that is only a logical anchor.
//!
//! Every side pool's key is `{P}_{H}` followed by a suffix built from one of two rank parts:
//! - `r`, the rank part of MHA keys: the TP rank (PP 1) or `{rank}_{stage}`; one object per TP
//!   rank and PP stage. Mamba pools use it even on an MLA model.
//! - `m`, the rank part of MLA keys: empty (PP 1, hence the double underscore of `__swa`) or the
//!   PP stage; one object per PP stage, written alike by every TP rank.
//!
//! The suffixes of each [`PoolKind`] are listed on its variants and in the
//! [module docs](super).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use serde::{Deserialize, Serialize};

use super::error::LayoutError;
use super::limits::MAX_OBJECTS_PER_PAGE;
use super::objects::{HitPolicy, Layout, Pool};
use super::sglang::{mha_rank_parts, mla_rank_parts, SglangParams};

/// A side pool SGLang registers next to the KV pool, named as SGLang's `PoolName`.
///
/// Serialized as the pool's name (`"swa"`, `"deepseek_v4_c4"`) or, for the kinds with
/// parameters, as `{"mamba": {"conv_states": 2}}`, `{"draft": {"mla": true}}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PoolKind {
    /// `mamba`: `_{r}_temporal` (left out when the temporal state is empty, as in conv-only
    /// models), then `_{r}_conv_{i}` for each conv state `i`.
    Mamba {
        /// The number of conv states (`conv_buffer` entries).
        conv_states: u32,
        /// The temporal (SSM) state is not empty. Defaults to true.
        #[serde(default = "yes")]
        temporal: bool,
    },
    /// `draft`: `_{m}_draft_k` for an MLA draft pool, else `_{r}_draft_k`, `_{r}_draft_v`
    /// (the draft pool's own kind decides, not the target's).
    Draft {
        /// The draft pool is an MLA pool.
        mla: bool,
    },
    /// `draft_swa`: `_{m}_draft_swa` for an MLA or DeepSeek-V4 host pool, else
    /// `_{r}_draft_swa_k`, `_{r}_draft_swa_v`.
    DraftSwa {
        /// The draft SWA pool is an MLA (or DeepSeek-V4) pool.
        mla: bool,
    },
    /// `swa`: `_{m}_swa` on an MLA model, else `_{r}_swa_k`, `_{r}_swa_v`.
    Swa,
    /// `indexer` (DSA): `_{m}_indexer`.
    Indexer,
    /// `draft_indexer`: `_{m}_draft_indexer`.
    DraftIndexer,
    /// `deepseek_v4_c1`: `_{m}_deepseek_v4_c1`.
    DeepseekV4C1,
    /// `deepseek_v4_c1_indexer`: `_{m}_deepseek_v4_c1_indexer`.
    DeepseekV4C1Indexer,
    /// `deepseek_v4_c1_indexer_scale`: `_{m}_deepseek_v4_c1_indexer_scale`.
    DeepseekV4C1IndexerScale,
    /// `deepseek_v4_c2`: `_{m}_deepseek_v4_c2`.
    DeepseekV4C2,
    /// `deepseek_v4_c2_indexer`: `_{m}_deepseek_v4_c2_indexer`.
    DeepseekV4C2Indexer,
    /// `deepseek_v4_c2_indexer_scale`: `_{m}_deepseek_v4_c2_indexer_scale`.
    DeepseekV4C2IndexerScale,
    /// `deepseek_v4_c4`: `_{m}_deepseek_v4_c4`.
    DeepseekV4C4,
    /// `deepseek_v4_c4_rope`: `_{m}_deepseek_v4_c4_rope` (the bf16 rope half of an fp8 row).
    DeepseekV4C4Rope,
    /// `deepseek_v4_c4_indexer`: `_{m}_deepseek_v4_c4_indexer`.
    DeepseekV4C4Indexer,
    /// `deepseek_v4_c4_indexer_scale`: `_{m}_deepseek_v4_c4_indexer_scale`.
    DeepseekV4C4IndexerScale,
    /// `deepseek_v4_c128`: `_{m}_deepseek_v4_c128`.
    DeepseekV4C128,
    /// `deepseek_v4_c128_rope`: `_{m}_deepseek_v4_c128_rope`.
    DeepseekV4C128Rope,
    /// `deepseek_v4_c4_state`: `_{m}_deepseek_v4_c4_state`.
    DeepseekV4C4State,
    /// `deepseek_v4_c4_indexer_state`: `_{m}_deepseek_v4_c4_indexer_state`.
    DeepseekV4C4IndexerState,
    /// `deepseek_v4_c128_state`: `_{m}_deepseek_v4_c128_state`.
    DeepseekV4C128State,
}

fn yes() -> bool {
    true
}

/// One side pool and when its objects are required.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SidePool {
    /// What the pool is.
    pub kind: PoolKind,
    /// When its objects are required (`"all_pages"` or `{"trailing_pages": W}`).
    pub hit_policy: HitPolicy,
}

/// The launch parameters of a hybrid model: its KV pool and its side pools, in SGLang's order.
///
/// Unknown fields are refused when deserialized (see [`SglangParams`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HybridParams {
    /// The KV pool's parameters: page size, parallelism, MLA, and the key prefix.
    pub kv: SglangParams,
    /// The KV pool is a logical anchor (DeepSeek-V4: its host pool has no buffer): it stores no
    /// object, so it demands none; the side pools decide. Defaults to false.
    #[serde(default)]
    pub logical_kv: bool,
    /// The side pools, each after the KV pool in this order.
    pub pools: Vec<SidePool>,
}

impl PoolKind {
    /// Returns SGLang's name of the pool (`PoolName`), which is also the pool's name here.
    pub fn name(&self) -> &'static str {
        match self {
            PoolKind::Mamba { .. } => "mamba",
            PoolKind::Draft { .. } => "draft",
            PoolKind::DraftSwa { .. } => "draft_swa",
            PoolKind::Swa => "swa",
            PoolKind::Indexer => "indexer",
            PoolKind::DraftIndexer => "draft_indexer",
            PoolKind::DeepseekV4C1 => "deepseek_v4_c1",
            PoolKind::DeepseekV4C1Indexer => "deepseek_v4_c1_indexer",
            PoolKind::DeepseekV4C1IndexerScale => "deepseek_v4_c1_indexer_scale",
            PoolKind::DeepseekV4C2 => "deepseek_v4_c2",
            PoolKind::DeepseekV4C2Indexer => "deepseek_v4_c2_indexer",
            PoolKind::DeepseekV4C2IndexerScale => "deepseek_v4_c2_indexer_scale",
            PoolKind::DeepseekV4C4 => "deepseek_v4_c4",
            PoolKind::DeepseekV4C4Rope => "deepseek_v4_c4_rope",
            PoolKind::DeepseekV4C4Indexer => "deepseek_v4_c4_indexer",
            PoolKind::DeepseekV4C4IndexerScale => "deepseek_v4_c4_indexer_scale",
            PoolKind::DeepseekV4C128 => "deepseek_v4_c128",
            PoolKind::DeepseekV4C128Rope => "deepseek_v4_c128_rope",
            PoolKind::DeepseekV4C4State => "deepseek_v4_c4_state",
            PoolKind::DeepseekV4C4IndexerState => "deepseek_v4_c4_indexer_state",
            PoolKind::DeepseekV4C128State => "deepseek_v4_c128_state",
        }
    }

    /// Returns the suffixes one rank writes after its rank part, and whether the rank part is
    /// the MHA one (`r`, per TP rank) rather than the MLA one (`m`, per stage).
    fn rank_suffixes(&self, mla_model: bool) -> (Vec<String>, bool) {
        let name = self.name();
        let kv_pair = |tag: &str| alloc::vec![format!("_{tag}_k"), format!("_{tag}_v")];
        match *self {
            PoolKind::Mamba {
                conv_states,
                temporal,
            } => {
                let mut out = Vec::new();
                if temporal {
                    out.push("_temporal".into());
                }
                out.extend((0..conv_states).map(|i| format!("_conv_{i}")));
                (out, true)
            }
            PoolKind::Draft { mla: true } => (alloc::vec!["_draft_k".into()], false),
            PoolKind::Draft { mla: false } => (kv_pair(name), true),
            PoolKind::DraftSwa { mla: true } => (alloc::vec![format!("_{name}")], false),
            PoolKind::DraftSwa { mla: false } => (kv_pair(name), true),
            PoolKind::Swa if !mla_model => (kv_pair(name), true),
            _ => (alloc::vec![format!("_{name}")], false),
        }
    }
}

impl Layout {
    /// Builds the layout of a hybrid model: the KV pool of [`Layout::from_sglang`] (none for a
    /// logical anchor), then one pool per side pool, named as SGLang names it.
    ///
    /// Each side pool's suffixes run over the PP stages `p` (outer) and, for the pools keyed by
    /// the MHA rank part, the TP ranks `r` (inner): `_{r}{s}` with `r` = `{rank}` (PP 1) or
    /// `{rank}_{p}`, else `_{m}{s}` with `m` the MLA rank part of the KV pool: empty (PP 1) or
    /// `{p}`, and with DCP > 1 `dcp{d}_cp{c}` (or `dcp{d}_cp{c}_{p}`) for every DCP and
    /// attention-CP rank. Refused: side pools keyed by rank with split heads (SGLang writes a
    /// list there); a logical anchor whose side pools have no all-pages pool
    /// ([`LayoutError::NoAllPagesPool`]).
    ///
    /// ```
    /// use hicache_index::layout::{HitPolicy, HybridParams, Layout, PoolKind, SglangParams, SidePool};
    ///
    /// let params = HybridParams {
    ///     kv: SglangParams::new(16, 2),
    ///     logical_kv: false,
    ///     pools: vec![SidePool {
    ///         kind: PoolKind::Mamba { conv_states: 1, temporal: true },
    ///         hit_policy: HitPolicy::TrailingPages(1),
    ///     }],
    /// };
    /// let layout = Layout::from_hybrid(&params).unwrap();
    /// let suffixes: Vec<&str> = layout.suffixes().map(|(s, _)| s).collect();
    /// assert_eq!(suffixes, [
    ///     "_0_k", "_0_v", "_1_k", "_1_v",
    ///     "_0_temporal", "_0_conv_0", "_1_temporal", "_1_conv_0",
    /// ]);
    /// ```
    pub fn from_hybrid(params: &HybridParams) -> Result<Layout, LayoutError> {
        let base = Layout::from_sglang(&params.kv)?;
        let SglangParams {
            tp,
            pp,
            mla,
            tp_lcm,
            dcp,
            ..
        } = params.kv;
        let split = tp_lcm.is_some_and(|lcm| lcm > tp);
        let mut pools = if params.logical_kv {
            Vec::new()
        } else {
            base.pools
        };
        let mla_parts = mla_rank_parts(pp, dcp)?;
        let mha_parts = mha_rank_parts(tp, pp)?;
        for side in &params.pools {
            let (rank_suffixes, by_rank) = side.kind.rank_suffixes(mla);
            if by_rank && split {
                return Err(LayoutError::Unsupported(
                    "side pools keyed by rank with split heads",
                ));
            }
            let parts = if by_rank { &mha_parts } else { &mla_parts };
            let count = parts.len() as u64 * rank_suffixes.len() as u64;
            if count > MAX_OBJECTS_PER_PAGE as u64 {
                return Err(LayoutError::TooManyObjects);
            }
            let mut suffixes = Vec::with_capacity(count as usize);
            for part in parts {
                for s in &rank_suffixes {
                    suffixes.push(format!("_{part}{s}"));
                }
            }
            pools.push(Pool {
                name: side.kind.name().into(),
                suffixes,
                hit_policy: side.hit_policy,
            });
        }
        let layout = Layout {
            page_size: base.page_size,
            eagle: base.eagle,
            key_prefix: base.key_prefix,
            pools,
        };
        layout.validate()?;
        Ok(layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{Index, IndexConfig};
    use crate::PageHash;

    fn dsv4() -> Layout {
        let mut kv = SglangParams::new(4, 2);
        kv.mla = true;
        kv.model = Some("dsv4".into());
        Layout::from_hybrid(&HybridParams {
            kv,
            logical_kv: true,
            pools: alloc::vec![
                SidePool {
                    kind: PoolKind::DeepseekV4C4,
                    hit_policy: HitPolicy::AllPages,
                },
                SidePool {
                    kind: PoolKind::Swa,
                    hit_policy: HitPolicy::TrailingPages(1),
                },
            ],
        })
        .expect("a valid layout")
    }

    fn store(index: &mut Index, layout: &Layout, page: &PageHash, suffix: &str) {
        let mut key = String::new();
        layout.write_object_key(page, suffix, &mut key);
        let _ = index.store("default", &key, None, None);
    }

    #[test]
    fn a_logical_anchor_does_not_make_every_page_a_miss() {
        let layout = dsv4();
        let pages = [PageHash([1; 32]), PageHash([2; 32]), PageHash([3; 32])];
        let mut index = Index::new(IndexConfig::default());
        for page in &pages {
            store(&mut index, &layout, page, "__deepseek_v4_c4");
        }
        // The SWA state (trailing 1) only for the last page: a hole on the others.
        store(&mut index, &layout, &pages[2], "__swa");
        let hits = index.query("default", &layout, pages.iter().copied(), None);
        assert_eq!(hits.prefix_pages, 3, "no KV object is demanded");
        // Without the last page's SWA state, only shorter prefixes with their own SWA state
        // count: none here.
        let hits = index.query("default", &layout, pages[..2].iter().copied(), None);
        assert_eq!(hits.prefix_pages, 0);
        // A page without its all-pages object ends the prefix.
        let mut index = Index::new(IndexConfig::default());
        store(&mut index, &layout, &pages[0], "__deepseek_v4_c4");
        store(&mut index, &layout, &pages[0], "__swa");
        store(&mut index, &layout, &pages[2], "__deepseek_v4_c4");
        store(&mut index, &layout, &pages[2], "__swa");
        let hits = index.query("default", &layout, pages.iter().copied(), None);
        assert_eq!(hits.prefix_pages, 1);
    }
}
