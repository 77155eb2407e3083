//! The layouts of SGLang's hybrid pools (`mooncake_store.py` after 0.5.23): side pools expand to
//! the keys SGLang's own key builder writes, a logical anchor demands nothing, and what this
//! crate does not know is refused.
//!
//! `fixtures/hybrid_keys.json` was computed by SGLang's `_get_hybrid_page_component_keys`,
//! `_tag_keys` and `_make_group_id` (sgl-project/sglang
//! `python/sglang/srt/mem_cache/storage/mooncake_store/mooncake_store.py` @ 00fe477f32b3),
//! run for every rank with stub host pools; its `source` field names the files and commits.

use hicache_index::layout::{
    parse_object_key, HitPolicy, HybridParams, Layout, LayoutDocument, LayoutError, PoolKind,
    SglangParams, SidePool,
};
use hicache_index::PageHash;
use serde_json::Value;

const HYBRID_KEYS: &str = include_str!("fixtures/hybrid_keys.json");

fn vectors() -> Value {
    serde_json::from_str(HYBRID_KEYS).expect("the fixture is JSON")
}

#[test]
fn every_hybrid_vector_expands_to_the_keys_sglang_writes() {
    let v = vectors();
    let h: PageHash = v["H"].as_str().unwrap().parse().unwrap();
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 7);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let params: HybridParams = serde_json::from_value(case["hybrid"].clone())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let layout = Layout::from_hybrid(&params).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want: Vec<(String, Vec<String>)> = case["pools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let keys = p["keys"].as_array().unwrap();
                let keys = keys.iter().map(|k| k.as_str().unwrap().to_owned());
                (p["pool"].as_str().unwrap().to_owned(), keys.collect())
            })
            .collect();
        let got: Vec<(String, Vec<String>)> = layout
            .pools
            .iter()
            .map(|pool| {
                let keys = pool.suffixes.iter().map(|s| {
                    let mut key = String::new();
                    layout.write_object_key(&h, s, &mut key);
                    key
                });
                (pool.name.clone(), keys.collect())
            })
            .collect();
        assert_eq!(got, want, "{name}");
        // Each side pool keeps its hit policy; the KV pool is all-pages.
        let side = params.pools.iter().map(|p| p.hit_policy);
        let policies: Vec<HitPolicy> = layout.pools.iter().map(|p| p.hit_policy).collect();
        let expected: Vec<HitPolicy> = (!params.logical_kv)
            .then_some(HitPolicy::AllPages)
            .into_iter()
            .chain(side)
            .collect();
        assert_eq!(policies, expected, "{name}");
        // Group ids use the full key prefix.
        assert_eq!(
            layout.group_id(&h),
            case["group_id"].as_str().unwrap(),
            "{name}"
        );
        // Every key parses back to its own slot.
        for (slot, key) in layout.object_keys(&h).enumerate() {
            let parsed = parse_object_key(&key).expect("keys parse");
            assert_eq!(parsed.page_hash, h, "{name}: {key}");
            assert_eq!(layout.object_index(&parsed), Some(slot), "{name}: {key}");
        }
    }
}

#[test]
fn a_logical_anchor_stores_and_demands_no_kv_object() {
    let v = vectors();
    let case = &v["cases"].as_array().unwrap()[6];
    assert_eq!(case["name"], "dsv4_logical_anchor");
    let params: HybridParams = serde_json::from_value(case["hybrid"].clone()).unwrap();
    assert!(params.logical_kv);
    let layout = Layout::from_hybrid(&params).unwrap();
    assert!(layout.pools.iter().all(|p| p.name != "kv"));
    assert!(layout.suffixes().all(|(s, _)| s != "__k"));
    // The same model with a physical KV pool demands `__k` as well.
    let physical = HybridParams {
        logical_kv: false,
        ..params
    };
    let with_kv = Layout::from_hybrid(&physical).unwrap();
    assert_eq!(with_kv.object_count(), layout.object_count() + 1);
    assert_eq!(
        with_kv.suffixes().next(),
        Some(("__k", HitPolicy::AllPages))
    );
}

/// SGLang's DeepSeek-V4 layout document, as its test of `describe_l3_object_layout` expects it
/// (`test_hicache_l3_object_layout.py`, `test_layout_reports_suffixes_prefix_and_hit_policy`):
/// no KV pool is listed.
const DSV4_DOCUMENT: &str = include_str!("fixtures/sglang_dsv4_layout.json");

fn dsv4_params() -> HybridParams {
    let mut kv = SglangParams::new(64, 4);
    kv.mla = true;
    kv.extra_backend_tag = Some("tag".into());
    kv.model = Some("my-model".into());
    HybridParams {
        kv,
        logical_kv: true,
        pools: vec![
            SidePool {
                kind: PoolKind::DeepseekV4C4,
                hit_policy: HitPolicy::AllPages,
            },
            SidePool {
                kind: PoolKind::DeepseekV4C4State,
                hit_policy: HitPolicy::TrailingPages(2),
            },
        ],
    }
}

#[test]
fn sglangs_dsv4_document_is_the_logical_anchor_layout() {
    let document: LayoutDocument = serde_json::from_str(DSV4_DOCUMENT).unwrap();
    let from_document = Layout::from_document(&document).unwrap();
    assert_eq!(from_document, Layout::from_hybrid(&dsv4_params()).unwrap());
}

#[test]
fn a_document_listing_an_empty_anchor_pool_demands_nothing_of_it() {
    // An anchor listed without suffixes is left out, not refused (refusing it would make every
    // page of the model a miss), and the layout equals the one without it.
    let listed = DSV4_DOCUMENT.replace(
        r#""pools": ["#,
        r#""pools": [{"pool": "kv", "suffixes": [], "hit_policy": "all_pages"},"#,
    );
    let document: LayoutDocument = serde_json::from_str(&listed).unwrap();
    assert_eq!(document.hicache_object_layout.pools.len(), 3);
    let layout = Layout::from_document(&document).unwrap();
    assert_eq!(layout, Layout::from_hybrid(&dsv4_params()).unwrap());
    // An anchor alone still has nothing to tie a hit to.
    let alone = r#"{"page_size": 64, "hicache_object_layout": {"pools": [
        {"pool": "kv", "suffixes": []},
        {"pool": "swa", "suffixes": ["__swa"], "hit_policy": "trailing_pages", "trailing_pages": 2}
    ]}}"#;
    let document: LayoutDocument = serde_json::from_str(alone).unwrap();
    assert_eq!(
        Layout::from_document(&document),
        Err(LayoutError::NoAllPagesPool)
    );
}

#[test]
fn hybrid_layouts_refuse_what_this_crate_does_not_know() {
    let mamba = |conv_states, temporal| SidePool {
        kind: PoolKind::Mamba {
            conv_states,
            temporal,
        },
        hit_policy: HitPolicy::TrailingPages(1),
    };
    let with = |kv: SglangParams, logical_kv, pools| HybridParams {
        kv,
        logical_kv,
        pools,
    };
    let mut split = SglangParams::new(16, 2);
    split.tp_lcm = Some(4);
    assert_eq!(
        Layout::from_hybrid(&with(split.clone(), false, vec![mamba(1, true)])),
        Err(LayoutError::Unsupported(
            "side pools keyed by rank with split heads"
        ))
    );
    // A pool keyed by the MLA rank part does not care about head splits.
    let indexer = SidePool {
        kind: PoolKind::Indexer,
        hit_policy: HitPolicy::AllPages,
    };
    assert!(Layout::from_hybrid(&with(split, false, vec![indexer.clone()])).is_ok());
    let mut dcp = SglangParams::new(16, 2);
    dcp.mla = true;
    dcp.dcp = Some(hicache_index::layout::DcpParams { dcp: 2, cp: 1 });
    // With DCP, a pool keyed by the MLA rank part has one object per DCP shard, a pool keyed
    // by rank one per TP rank (SGLang 0.5.23's mla_suffix and mha_suffix).
    let layout = Layout::from_hybrid(&with(dcp, false, vec![indexer, mamba(1, false)])).unwrap();
    let suffixes: Vec<&str> = layout.suffixes().map(|(s, _)| s).collect();
    assert_eq!(
        suffixes,
        [
            "_dcp0_cp0_k",
            "_dcp1_cp0_k",
            "_dcp0_cp0_indexer",
            "_dcp1_cp0_indexer",
            "_0_conv_0",
            "_1_conv_0"
        ]
    );
    // Nothing to store: SGLang refuses the pool too.
    assert_eq!(
        Layout::from_hybrid(&with(
            SglangParams::new(16, 1),
            false,
            vec![mamba(0, false)]
        )),
        Err(LayoutError::EmptyPool {
            pool: "mamba".into()
        })
    );
    // A logical anchor with only trailing pools has nothing to tie a hit to every page.
    assert_eq!(
        Layout::from_hybrid(&with(SglangParams::new(16, 1), true, vec![mamba(1, true)])),
        Err(LayoutError::NoAllPagesPool)
    );
    // Unknown fields and pool kinds are refused when read.
    let typo = r#"{"kv": {"page_size": 16, "tp": 1}, "pools": [], "logical_kvv": true}"#;
    assert!(serde_json::from_str::<HybridParams>(typo).is_err());
    let unknown = r#"{"kv": {"page_size": 16, "tp": 1},
        "pools": [{"kind": "deepseek_v5", "hit_policy": "all_pages"}]}"#;
    assert!(serde_json::from_str::<HybridParams>(unknown).is_err());
}

/// One rank's document of a PP 2 DeepSeek-V4 instance, as SGLang's
/// `test_layout_suffixes_embed_the_pp_rank` expects it for `pp_rank` 1 (and, by the same
/// code, for `pp_rank` 0: `mla_suffix` is the stage).
fn dsv4_rank_document(pp_rank: u32) -> String {
    format!(
        r#"{{"backend": "mooncake", "page_size": 64, "hicache_object_layout": {{
        "key_prefix": "tag_my-model", "is_mla_backend": true, "pp_rank": {pp_rank}, "pp_size": 2,
        "pools": [{{"pool": "deepseek_v4_c4", "suffixes": ["_{pp_rank}_deepseek_v4_c4"],
                    "hit_policy": "all_pages"}}]}}}}"#
    )
}

#[test]
fn the_pp_ranks_documents_merge_into_the_instances_layout() {
    let docs: Vec<LayoutDocument> = [1, 0]
        .iter()
        .map(|&r| serde_json::from_str(&dsv4_rank_document(r)).unwrap())
        .collect();
    let merged = LayoutDocument::merge_ranks(&docs).unwrap();
    assert_eq!(
        merged.hicache_object_layout.pools[0].suffixes,
        ["_0_deepseek_v4_c4", "_1_deepseek_v4_c4"],
        "stages in order, whatever order the ranks answered in"
    );
    let mut params = dsv4_params();
    params.kv.pp = 2;
    params.pools.truncate(1);
    assert_eq!(
        Layout::from_document(&merged).unwrap(),
        Layout::from_hybrid(&params).unwrap()
    );
}

#[test]
fn a_missing_or_disagreeing_rank_refuses_the_merge() {
    let rank = |r| -> LayoutDocument { serde_json::from_str(&dsv4_rank_document(r)).unwrap() };
    let err = LayoutDocument::merge_ranks(&[rank(0)]).unwrap_err();
    assert!(err.contains("PP rank 1"), "{err}");
    let mut other_page = rank(1);
    other_page.page_size = 32;
    assert!(LayoutDocument::merge_ranks(&[rank(0), other_page])
        .unwrap_err()
        .contains("page_size"));
    let mut other_policy = rank(1);
    other_policy.hicache_object_layout.pools[0].hit_policy = "trailing_pages".into();
    other_policy.hicache_object_layout.pools[0].trailing_pages = Some(2);
    assert!(LayoutDocument::merge_ranks(&[rank(0), other_policy])
        .unwrap_err()
        .contains("hit policy"));
    let mut other_prefix = rank(1);
    other_prefix.hicache_object_layout.key_prefix = None;
    assert!(LayoutDocument::merge_ranks(&[rank(0), other_prefix]).is_err());
    assert!(LayoutDocument::merge_ranks(&[]).is_err());
    // A PP 1 document without pp fields merges alone.
    let single: LayoutDocument = serde_json::from_str(DSV4_DOCUMENT).unwrap();
    let merged = LayoutDocument::merge_ranks(std::slice::from_ref(&single)).unwrap();
    assert_eq!(
        Layout::from_document(&merged).unwrap(),
        Layout::from_document(&single).unwrap()
    );
}
