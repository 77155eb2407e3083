//! Layouts against SGLang's key vectors, the layout document, validation and the key codec.

use hicache_index::hash::Namespace;
use hicache_index::layout::{
    parse_object_key, DcpParams, HitPolicy, KeyRule, Layout, LayoutDocument, LayoutError,
    ObjectKey, Pool, SglangParams, MAX_OBJECTS_PER_PAGE,
};
use hicache_index::PageHash;
use quickcheck::{Arbitrary, Gen, TestResult};
use quickcheck_macros::quickcheck;
use serde_json::Value;

const OBJECT_KEYS: &str = include_str!("fixtures/object_keys.json");
const TOKENS_TO_KEYS: &str = include_str!("fixtures/tokens_to_keys.json");

const H: &str = "cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72";

fn hash(hex: &str) -> PageHash {
    hex.parse().expect("64 lowercase hex")
}

/// Reads a fixture `layout` object (tp, pp, mla, tp_lcm, tag, model) into SGLang parameters.
fn params_of(layout: &Value, page_size: u32) -> SglangParams {
    let u = |field: &str| layout[field].as_u64().map(|v| u32::try_from(v).unwrap());
    let mut params = SglangParams::new(page_size, u("tp").expect("tp"));
    params.pp = u("pp").unwrap_or(1);
    params.mla = layout["mla"].as_bool().unwrap_or(false);
    params.tp_lcm = u("tp_lcm");
    params.extra_backend_tag = layout["tag"].as_str().map(str::to_owned);
    params.model = layout["model"].as_str().map(str::to_owned);
    params
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .expect("list")
        .iter()
        .map(|s| s.as_str().expect("string").to_owned())
        .collect()
}

#[test]
fn every_object_key_vector_expands_in_order() {
    let fixture: Value = serde_json::from_str(OBJECT_KEYS).unwrap();
    let h = fixture["H"].as_str().unwrap();
    let layouts = fixture["layouts"].as_array().unwrap();
    assert!(layouts.len() >= 14);
    for case in layouts {
        let name = case["name"].as_str().unwrap();
        let layout = Layout::from_sglang(&params_of(&case["layout"], 4))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let expected: Vec<String> = strings(&case["keys"])
            .iter()
            .map(|k| k.replace("{H}", h))
            .collect();
        let keys: Vec<String> = layout.object_keys(&hash(h)).collect();
        assert_eq!(keys, expected, "{name}");
        assert_eq!(layout.object_count(), expected.len(), "{name}");

        let groups: Vec<String> = strings(&case["group_ids_if_enable_group_semantics"])
            .iter()
            .map(|g| g.replace("{H}", h))
            .collect();
        assert_eq!(groups.len(), 1, "{name}: one group per page");
        assert_eq!(layout.group_id(&hash(h)), groups[0], "{name}");
        assert_eq!(
            format!("sglang-hicache:{}", layout.logical_key(&hash(h))),
            groups[0]
        );

        for (i, key) in keys.iter().enumerate() {
            let parsed = parse_object_key(key).unwrap_or_else(|| panic!("{name}: {key}"));
            assert_eq!(parsed.page_hash, hash(h));
            assert_eq!(parsed.prefix, layout.key_prefix.as_deref());
            assert_eq!(layout.object_index(&parsed), Some(i));
        }
    }
}

#[test]
fn every_tokens_to_keys_case_runs_end_to_end() {
    let cases: Value = serde_json::from_str(TOKENS_TO_KEYS).unwrap();
    let cases = cases.as_array().unwrap();
    assert!(!cases.is_empty());
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let tokens: Vec<u32> = case["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| u32::try_from(t.as_u64().unwrap()).unwrap())
            .collect();
        let page_size = u32::try_from(case["page_size"].as_u64().unwrap()).unwrap();
        let layout = Layout::from_sglang(&params_of(&case["layout"], page_size)).unwrap();
        let pages: Vec<PageHash> = layout.page_hashes(&tokens, Namespace::NONE).collect();
        let expected = case["pages"].as_array().unwrap();
        assert_eq!(pages.len(), expected.len(), "{name}");
        for (page, want) in pages.iter().zip(expected) {
            assert_eq!(
                page.to_string(),
                want["page_hash"].as_str().unwrap(),
                "{name}"
            );
            let keys: Vec<String> = layout.object_keys(page).collect();
            assert_eq!(keys, strings(&want["keys"]), "{name}");
            assert_eq!(
                vec![layout.group_id(page)],
                strings(&want["group_ids"]),
                "{name}"
            );
        }
    }
}

const DOCUMENT: &str = r#"{
  "page_size": 64,
  "some_future_field": {"x": 1},
  "hicache_object_layout": {
    "key_prefix": "prod_Qwen-Qwen3-8B",
    "version": 3,
    "pools": [
      {"pool": "kv", "suffixes": ["_0_k", "_0_v", "_1_k", "_1_v"], "hit_policy": "all_pages",
       "bytes_per_object": 1048576},
      {"pool": "mamba", "suffixes": ["_0_temporal", "_0_conv_0"],
       "hit_policy": "trailing_pages", "trailing_pages": 2}
    ]
  }
}"#;

#[test]
fn layout_document_parses_ignoring_unknown_fields() {
    let document: LayoutDocument = serde_json::from_str(DOCUMENT).unwrap();
    let layout = Layout::from_document(&document).unwrap();
    assert_eq!(layout.page_size, 64);
    assert!(!layout.eagle);
    assert_eq!(layout.key_prefix.as_deref(), Some("prod_Qwen-Qwen3-8B"));
    let suffixes: Vec<(&str, HitPolicy)> = layout.suffixes().collect();
    assert_eq!(
        suffixes,
        [
            ("_0_k", HitPolicy::AllPages),
            ("_0_v", HitPolicy::AllPages),
            ("_1_k", HitPolicy::AllPages),
            ("_1_v", HitPolicy::AllPages),
            ("_0_temporal", HitPolicy::TrailingPages(2)),
            ("_0_conv_0", HitPolicy::TrailingPages(2)),
        ]
    );
    let keys: Vec<String> = layout.object_keys(&hash(H)).collect();
    assert_eq!(keys[0], format!("prod_Qwen-Qwen3-8B_{H}_0_k"));
    assert_eq!(keys[5], format!("prod_Qwen-Qwen3-8B_{H}_0_conv_0"));
    assert!(layout.clone().with_eagle(true).eagle);
}

#[test]
fn layout_document_with_null_prefix_and_default_policy() {
    let document: LayoutDocument = serde_json::from_str(
        r#"{"page_size": 16, "hicache_object_layout": {"key_prefix": null,
            "pools": [{"pool": "kv", "suffixes": ["__k"]}]}}"#,
    )
    .unwrap();
    let layout = Layout::from_document(&document).unwrap();
    assert_eq!(layout.key_prefix, None);
    assert_eq!(
        layout.object_keys(&hash(H)).collect::<Vec<_>>(),
        [format!("{H}__k")]
    );
    assert_eq!(layout.group_id(&hash(H)), format!("sglang-hicache:{H}"));
}

#[test]
fn layout_document_errors_are_typed() {
    let parse = |json: &str| {
        let document: LayoutDocument = serde_json::from_str(json).unwrap();
        Layout::from_document(&document)
    };
    assert_eq!(
        parse(
            r#"{"page_size": 16, "hicache_object_layout": {"pools": [
            {"pool": "kv", "suffixes": ["_k"]},
            {"pool": "swa", "suffixes": ["_swa"], "hit_policy": "trailing_pages"}]}}"#
        ),
        Err(LayoutError::MissingTrailingPages { pool: "swa".into() })
    );
    assert_eq!(
        parse(
            r#"{"page_size": 16, "hicache_object_layout": {"pools": [
            {"pool": "kv", "suffixes": ["_k"], "hit_policy": "some_pages"}]}}"#
        ),
        Err(LayoutError::UnknownHitPolicy {
            pool: "kv".into(),
            policy: "some_pages".into()
        })
    );
    assert_eq!(
        parse(
            r#"{"page_size": 16, "hicache_object_layout": {"pools": [
            {"pool": "swa", "suffixes": ["_swa"], "hit_policy": "trailing_pages",
             "trailing_pages": 4}]}}"#
        ),
        Err(LayoutError::NoAllPagesPool)
    );
    assert_eq!(
        parse(
            r#"{"page_size": 0, "hicache_object_layout": {"pools": [{"pool": "kv", "suffixes": ["_k"]}]}}"#
        ),
        Err(LayoutError::ZeroPageSize)
    );
}

fn kv(suffixes: &[&str]) -> Pool {
    Pool::all_pages("kv", suffixes.iter().map(|s| (*s).to_owned()).collect())
}

#[test]
fn validation_refuses_every_unparseable_layout() {
    let new =
        |prefix: Option<&str>, pools: Vec<Pool>| Layout::new(4, prefix.map(str::to_owned), pools);
    assert!(new(None, vec![kv(&["_k"])]).is_ok());
    assert_eq!(
        Layout::new(0, None, vec![kv(&["_k"])]),
        Err(LayoutError::ZeroPageSize)
    );
    assert_eq!(new(None, vec![]), Err(LayoutError::NoAllPagesPool));
    assert_eq!(
        new(None, vec![kv(&[])]),
        Err(LayoutError::EmptyPool { pool: "kv".into() })
    );
    assert_eq!(
        new(None, vec![kv(&["k"])]),
        Err(LayoutError::SuffixWithoutUnderscore { suffix: "k".into() })
    );
    assert_eq!(
        new(None, vec![kv(&[""])]),
        Err(LayoutError::SuffixWithoutUnderscore { suffix: "".into() })
    );
    let long = format!("_{}", "x".repeat(64));
    assert_eq!(
        new(None, vec![kv(&[&long])]),
        Err(LayoutError::SuffixTooLong {
            suffix: long.clone()
        })
    );
    let hashy = format!("_{}", &H[..63]);
    assert!(
        new(None, vec![kv(&[&hashy])]).is_ok(),
        "63 hex characters are fine"
    );
    // A suffix holding a whole hash is already too long (`_` + 64 > 64 bytes).
    let hashy = format!("_{H}");
    assert_eq!(
        new(None, vec![kv(&[&hashy])]),
        Err(LayoutError::SuffixTooLong {
            suffix: hashy.clone()
        })
    );
    assert_eq!(
        new(None, vec![kv(&["_k", "_v"]), kv(&["_k"])]),
        Err(LayoutError::DuplicateSuffix {
            suffix: "_k".into()
        })
    );
    assert_eq!(
        new(Some("a\nb"), vec![kv(&["_k"])]),
        Err(LayoutError::ControlCharInPrefix)
    );
    let trailing = Pool {
        name: "swa".into(),
        suffixes: vec!["_swa".into()],
        hit_policy: HitPolicy::TrailingPages(0),
    };
    assert_eq!(
        new(None, vec![kv(&["_k"]), trailing]),
        Err(LayoutError::ZeroTrailingPages { pool: "swa".into() })
    );
    // Errors display as one sentence.
    assert_eq!(
        LayoutError::ZeroPageSize.to_string(),
        "page size must be at least 1"
    );
}

#[test]
fn sglang_parameters_are_checked() {
    let mut zero_tp = SglangParams::new(4, 0);
    assert_eq!(
        Layout::from_sglang(&zero_tp),
        Err(LayoutError::ZeroParallelism)
    );
    zero_tp.tp = 1;
    zero_tp.pp = 0;
    assert_eq!(
        Layout::from_sglang(&zero_tp),
        Err(LayoutError::ZeroParallelism)
    );
    assert_eq!(
        Layout::from_sglang(&SglangParams::new(0, 1)),
        Err(LayoutError::ZeroPageSize)
    );
    let huge = SglangParams::new(4, 4096);
    assert_eq!(Layout::from_sglang(&huge), Err(LayoutError::TooManyObjects));
    let mut fits = SglangParams::new(4, u32::try_from(MAX_OBJECTS_PER_PAGE / 2).unwrap());
    assert!(Layout::from_sglang(&fits).is_ok());
    fits.pp = 2;
    assert_eq!(Layout::from_sglang(&fits), Err(LayoutError::TooManyObjects));
    let mut bad_tag = SglangParams::new(4, 1);
    bad_tag.extra_backend_tag = Some("a\u{7}".into());
    assert_eq!(
        Layout::from_sglang(&bad_tag),
        Err(LayoutError::ControlCharInPrefix)
    );
}

#[test]
fn empty_tag_still_yields_a_leading_underscore() {
    let mut params = SglangParams::new(4, 1);
    params.extra_backend_tag = Some(String::new());
    let layout = Layout::from_sglang(&params).unwrap();
    assert_eq!(layout.key_prefix.as_deref(), Some(""));
    let keys: Vec<String> = layout.object_keys(&hash(H)).collect();
    assert_eq!(keys, [format!("_{H}_0_k"), format!("_{H}_0_v")]);
    assert_eq!(layout.group_id(&hash(H)), format!("sglang-hicache:_{H}"));
    let parsed = parse_object_key(&keys[0]).unwrap();
    assert_eq!(parsed.prefix, Some(""));
    assert_eq!(layout.object_index(&parsed), Some(0));

    // With a model too: "_Qwen-Qwen3-8B".
    params.model = Some("Qwen/Qwen3-8B".into());
    let layout = Layout::from_sglang(&params).unwrap();
    assert_eq!(layout.key_prefix.as_deref(), Some("_Qwen-Qwen3-8B"));
    // An empty model name is left out, like SGLang's falsy check.
    params.model = Some(String::new());
    assert_eq!(
        Layout::from_sglang(&params).unwrap().key_prefix.as_deref(),
        Some("")
    );
}

#[test]
fn tag_only_rule_ignores_the_model() {
    let mut params = SglangParams::new(4, 2);
    params.extra_backend_tag = Some("prod".into());
    params.model = Some("Qwen/Qwen3-8B".into());
    params.key_rule = KeyRule::TagOnly;
    let layout = Layout::from_sglang(&params).unwrap();
    assert_eq!(layout.key_prefix.as_deref(), Some("prod"));
    params.extra_backend_tag = None;
    assert_eq!(Layout::from_sglang(&params).unwrap().key_prefix, None);
    params.key_rule = KeyRule::Sglang0517;
    assert_eq!(
        Layout::from_sglang(&params).unwrap().key_prefix.as_deref(),
        Some("Qwen-Qwen3-8B")
    );
}

#[test]
fn dcp_names_its_shards_and_widens_the_page() {
    // As SGLang's own DCP Mooncake test: --page-size 64, tp 4, dcp 2, MLA.
    let mut params = SglangParams::new(64, 4);
    params.mla = true;
    params.extra_backend_tag = Some("t".into());
    params.model = Some("deepseek-ai/DeepSeek-V2-Lite-Chat".into());
    params.dcp = Some(DcpParams { dcp: 2, cp: 1 });
    let layout = Layout::from_sglang(&params).unwrap();
    assert_eq!(layout.page_size, 128);
    let prefix = "t_deepseek-ai-DeepSeek-V2-Lite-Chat_tp4_dcp2_page128_pp1_cp1";
    assert_eq!(layout.key_prefix.as_deref(), Some(prefix));
    let keys: Vec<String> = layout.object_keys(&hash(H)).collect();
    assert_eq!(
        keys,
        [
            format!("{prefix}_{H}_dcp0_cp0_k"),
            format!("{prefix}_{H}_dcp1_cp0_k")
        ]
    );
    assert_eq!(
        layout.group_id(&hash(H)),
        format!("sglang-hicache:{prefix}_{H}")
    );

    // Attention CP 2: every (cp rank, dcp rank) shard.
    params.dcp = Some(DcpParams { dcp: 2, cp: 2 });
    let layout = Layout::from_sglang(&params).unwrap();
    let suffixes: Vec<&str> = layout.suffixes().map(|(s, _)| s).collect();
    assert_eq!(
        suffixes,
        ["_dcp0_cp0_k", "_dcp1_cp0_k", "_dcp0_cp1_k", "_dcp1_cp1_k"]
    );

    // DCP 1 is no DCP; unknown schemes are refused.
    params.dcp = Some(DcpParams { dcp: 1, cp: 1 });
    let layout = Layout::from_sglang(&params).unwrap();
    assert_eq!(layout.page_size, 64);
    assert_eq!(
        layout.key_prefix.as_deref(),
        Some("t_deepseek-ai-DeepSeek-V2-Lite-Chat")
    );
    params.dcp = Some(DcpParams { dcp: 0, cp: 1 });
    assert_eq!(
        Layout::from_sglang(&params),
        Err(LayoutError::ZeroParallelism)
    );
    params.dcp = Some(DcpParams { dcp: 2, cp: 1 });
    params.mla = false;
    assert!(matches!(
        Layout::from_sglang(&params),
        Err(LayoutError::Unsupported(_))
    ));
}

#[test]
fn dcp_with_pp_names_the_stage_after_the_shard() {
    // SGLang 0.5.23's mla_suffix under DCP: `dcp{d}_cp{c}` and, with PP, `_{pp_rank}` last.
    let mut params = SglangParams::new(16, 4);
    params.mla = true;
    params.pp = 2;
    params.dcp = Some(DcpParams { dcp: 2, cp: 2 });
    let layout = Layout::from_sglang(&params).unwrap();
    assert_eq!(
        layout.key_prefix.as_deref(),
        Some("tp4_dcp2_page32_pp2_cp2")
    );
    let mut suffixes: Vec<&str> = layout.suffixes().map(|(s, _)| s).collect();
    suffixes.sort_unstable();
    let mut expected = Vec::new();
    for p in 0..2 {
        for c in 0..2 {
            for d in 0..2 {
                expected.push(format!("_dcp{d}_cp{c}_{p}_k"));
            }
        }
    }
    expected.sort_unstable();
    assert_eq!(suffixes, expected);
}

#[test]
fn attention_cp_without_dcp_changes_no_key() {
    let mut params = SglangParams::new(16, 4);
    params.mla = true;
    let plain = Layout::from_sglang(&params).unwrap();
    params.dcp = Some(DcpParams { dcp: 1, cp: 2 });
    assert_eq!(Layout::from_sglang(&params).unwrap(), plain);
}

#[test]
fn sglang_params_deserialize_strictly() {
    let params: SglangParams = serde_json::from_str(
        r#"{"page_size": 64, "tp": 8, "mla": true, "extra_backend_tag": "",
            "dcp": {"dcp": 4}, "key_rule": "sglang0517"}"#,
    )
    .unwrap();
    assert_eq!(params.pp, 1);
    assert_eq!(params.dcp, Some(DcpParams { dcp: 4, cp: 1 }));
    let layout = Layout::from_sglang(&params).unwrap();
    assert_eq!(
        layout.key_prefix.as_deref(),
        Some("_tp8_dcp4_page256_pp1_cp1")
    );
    // A misspelt field must not silently become a default.
    assert!(
        serde_json::from_str::<SglangParams>(r#"{"page_size": 64, "tp": 8, "tpp": 2}"#).is_err()
    );
    assert!(serde_json::from_str::<SglangParams>(r#"{"page_size": 64}"#).is_err());
    let old: SglangParams =
        serde_json::from_str(r#"{"page_size": 1, "tp": 1, "key_rule": "tag_only"}"#).unwrap();
    assert_eq!(old.key_rule, KeyRule::TagOnly);
}

#[test]
fn write_object_key_reuses_the_buffer() {
    let layout = Layout::new(4, Some("p".into()), vec![kv(&["_0_k", "_0_v"])]).unwrap();
    let mut out = String::from("left over");
    layout.write_object_key(&hash(H), "_0_v", &mut out);
    assert_eq!(out, format!("p_{H}_0_v"));
    let capacity = out.capacity();
    let ptr = out.as_ptr();
    layout.write_object_key(&hash(H), "_0_k", &mut out);
    assert_eq!(out, format!("p_{H}_0_k"));
    assert_eq!((out.capacity(), out.as_ptr()), (capacity, ptr));
}

#[test]
fn parse_refuses_keys_of_other_shapes() {
    for key in [
        String::new(),
        "sglang_mooncake_store_warmup_key0123".to_owned(),
        H.to_owned(),                        // no suffix
        format!("{}_0_k", &H[..63]),         // 63 hex characters
        format!("x{H}_0_k"),                 // hash not after '_'
        format!("{}_0_k", H.to_uppercase()), // uppercase
        format!("{H}x_0_k"),                 // a 65-character run
        format!("{H}_{}", "s".repeat(64)),   // a 65-byte suffix
    ] {
        assert_eq!(parse_object_key(&key), None, "{key}");
    }
    // The shortest suffix is "_" and the longest is 64 bytes.
    let key = format!("{H}_");
    let parsed = parse_object_key(&key).unwrap();
    assert_eq!((parsed.prefix, parsed.suffix), (None, "_"));
    let key = format!("{H}_{}", "s".repeat(63));
    assert_eq!(parse_object_key(&key).unwrap().suffix.len(), 64);
}

#[test]
fn parse_picks_the_last_hash_when_the_prefix_holds_one() {
    let other = "0".repeat(64);
    let key = format!("{other}_{H}_0_k");
    let parsed = parse_object_key(&key).unwrap();
    assert_eq!(parsed.prefix, Some(other.as_str()));
    assert_eq!(parsed.page_hash, hash(H));
    assert_eq!(parsed.suffix, "_0_k");
    assert_eq!(parsed.to_string(), key);
}

// ---- properties ----

/// A key prefix drawn from the characters that make parsing hard.
#[derive(Clone, Debug)]
struct Prefix(Option<String>);

impl Arbitrary for Prefix {
    fn arbitrary(g: &mut Gen) -> Prefix {
        const CHARS: &[char] = &[
            'a', 'b', 'c', 'd', 'e', 'f', '0', '1', '9', '_', '-', '/', '.', 'A', 'Z', 'x',
        ];
        if u8::arbitrary(g) % 8 == 0 {
            return Prefix(None);
        }
        let mut out = String::new();
        let parts = usize::arbitrary(g) % 5;
        for _ in 0..parts {
            match u8::arbitrary(g) % 5 {
                0 => out.push('_'),
                1 => out.push_str(&PageHash(arbitrary_bytes(g)).to_string()),
                _ => {
                    let len = usize::arbitrary(g) % 12;
                    for _ in 0..len {
                        out.push(*g.choose(CHARS).unwrap());
                    }
                }
            }
        }
        Prefix(Some(out))
    }
}

fn arbitrary_bytes(g: &mut Gen) -> [u8; 32] {
    let mut out = [0u8; 32];
    for b in &mut out {
        *b = u8::arbitrary(g);
    }
    out
}

/// Random SGLang parameters inside the supported space.
#[derive(Clone, Debug)]
struct Params(SglangParams);

impl Arbitrary for Params {
    fn arbitrary(g: &mut Gen) -> Params {
        let tp = u32::from(u8::arbitrary(g) % 16) + 1;
        let mut params = SglangParams::new(u32::from(u8::arbitrary(g) % 64) + 1, tp);
        params.pp = u32::from(u8::arbitrary(g) % 4) + 1;
        params.mla = bool::arbitrary(g);
        if bool::arbitrary(g) {
            params.tp_lcm = Some(tp * (u32::from(u8::arbitrary(g) % 4) + 1));
        }
        if params.mla && bool::arbitrary(g) {
            params.dcp = Some(DcpParams {
                dcp: u32::from(u8::arbitrary(g) % 8) + 1,
                cp: u32::from(u8::arbitrary(g) % 2) + 1,
            });
        }
        Params(params)
    }
}

#[quickcheck]
fn parse_inverts_expansion(prefix: Prefix, params: Params, h: Vec<u8>) -> TestResult {
    let mut layout = match Layout::from_sglang(&params.0) {
        Ok(layout) => layout,
        Err(e) => panic!("{params:?}: {e}"),
    };
    layout.key_prefix = prefix.0;
    if layout.validate().is_err() {
        return TestResult::discard();
    }
    let mut bytes = [0u8; 32];
    for (b, x) in bytes.iter_mut().zip(h) {
        *b = x;
    }
    let page = PageHash(bytes);
    for (key, (suffix, _)) in layout.object_keys(&page).zip(layout.suffixes()) {
        let expected = ObjectKey {
            prefix: layout.key_prefix.as_deref(),
            page_hash: page,
            suffix,
        };
        if parse_object_key(&key) != Some(expected) {
            return TestResult::error(format!("{key} parsed as {:?}", parse_object_key(&key)));
        }
        if layout.object_index(&expected).is_none() {
            return TestResult::error(format!("{key} is not the layout's own"));
        }
    }
    TestResult::passed()
}

/// A string built from key-like pieces, so that parsing often finds a hash.
#[derive(Clone, Debug)]
struct KeyLike(String);

impl Arbitrary for KeyLike {
    fn arbitrary(g: &mut Gen) -> KeyLike {
        let mut out = String::new();
        let parts = usize::arbitrary(g) % 6;
        for _ in 0..parts {
            match u8::arbitrary(g) % 6 {
                0 => out.push('_'),
                1 => out.push_str(&PageHash(arbitrary_bytes(g)).to_string()),
                2 => out.push_str(&String::arbitrary(g)),
                3 => out.push_str(&"ab".repeat(usize::arbitrary(g) % 40)),
                _ => out.push_str(&"_0_k".repeat(usize::arbitrary(g) % 20)),
            }
        }
        KeyLike(out)
    }
}

fn reformats_exactly(key: &str) -> bool {
    match parse_object_key(key) {
        None => true,
        Some(parsed) => {
            parsed.to_string() == key && parsed.suffix.starts_with('_') && parsed.suffix.len() <= 64
        }
    }
}

#[quickcheck]
fn parse_of_any_string_reformats_exactly(key: String) -> bool {
    reformats_exactly(&key)
}

#[quickcheck]
fn parse_of_key_like_strings_reformats_exactly(key: KeyLike) -> bool {
    reformats_exactly(&key.0)
}

/// The document SGLang 0.5.23 writes for an MLA model with a mamba pool at TP 2 (TP rank 0's
/// scheduler; `mooncake_store.py`'s `describe_l3_object_layout`): the mamba suffixes name rank
/// 0 only, so SGLang marks it disabled. Used as a layout, it would demand rank 0's objects only.
const MLA_MAMBA_DISABLED: &str = r#"{
  "enabled": false,
  "backend": "mooncake",
  "page_size": 64,
  "hicache_object_layout": {
    "pools": [
      {"pool": "kv", "suffixes": ["__k"], "hit_policy": "all_pages"},
      {"pool": "mamba", "suffixes": ["_0_temporal", "_0_conv_0"],
       "hit_policy": "trailing_pages", "trailing_pages": 1}
    ],
    "key_prefix": "m", "is_mla_backend": true, "pp_rank": 0, "pp_size": 1
  },
  "reason": "Auxiliary L3 pools are not rank-replicated/MLA"
}"#;

#[test]
fn a_disabled_layout_document_is_refused_with_its_reason() {
    let document: LayoutDocument = serde_json::from_str(MLA_MAMBA_DISABLED).unwrap();
    let refused = Layout::from_document(&document).unwrap_err();
    assert_eq!(
        refused,
        LayoutError::Disabled {
            reason: Some("Auxiliary L3 pools are not rank-replicated/MLA".into())
        }
    );
    assert!(refused.to_string().contains("disabled"), "{refused}");
    // Merged with an enabled rank, the instance is disabled too.
    let mut enabled = document.clone();
    enabled.enabled = Some(true);
    let merged = LayoutDocument::merge_ranks(&[enabled.clone(), document]).unwrap();
    assert!(matches!(
        Layout::from_document(&merged),
        Err(LayoutError::Disabled { .. })
    ));
    // Absent or true, the same pools are a layout.
    assert!(Layout::from_document(&enabled).is_ok());
    enabled.enabled = None;
    assert!(Layout::from_document(&enabled).is_ok());
}

#[test]
fn a_disabled_document_without_a_page_size_is_refused_as_disabled() {
    // SGLang's `disabled_l3_layout` (hicache_storage.py, 0.5.23) may write `page_size: null`.
    let document: LayoutDocument = serde_json::from_str(
        r#"{"enabled": false, "backend": null, "page_size": null,
            "hicache_object_layout": {"pools": []},
            "reason": "Inconsistent HiCache L3 layouts across schedulers"}"#,
    )
    .unwrap();
    assert!(matches!(
        Layout::from_document(&document),
        Err(LayoutError::Disabled { reason: Some(r) }) if r.contains("Inconsistent")
    ));
}

/// One PP stage's document of an MLA model at PP 2 with a DSA indexer, as SGLang 0.5.23's
/// `describe_l3_object_layout` writes it (`mooncake_store.py`).
fn mla_stage(pp_rank: u32) -> Value {
    serde_json::json!({
        "enabled": true, "backend": "mooncake", "page_size": 64,
        "hicache_object_layout": {
            "pools": [
                {"pool": "kv", "suffixes": [format!("_{pp_rank}_k")], "hit_policy": "all_pages"},
                {"pool": "indexer", "suffixes": [format!("_{pp_rank}_indexer")],
                 "hit_policy": "all_pages"}
            ],
            "key_prefix": "m", "is_mla_backend": true, "pp_rank": pp_rank, "pp_size": 2
        }
    })
}

/// What SGLang 0.5.23's `merge_l3_layouts` (`hicache_storage.py`) makes of the stages, and what
/// the worker's `/get_hicache_l3_cache_layout` answers: every stage's pools one after another
/// and `"pp_rank": null`.
fn mla_merged() -> Value {
    let mut merged = mla_stage(0);
    let pools: Vec<Value> = [mla_stage(0), mla_stage(1)]
        .iter()
        .flat_map(|s| {
            s["hicache_object_layout"]["pools"]
                .as_array()
                .unwrap()
                .clone()
        })
        .collect();
    merged["hicache_object_layout"]["pools"] = Value::Array(pools);
    merged["hicache_object_layout"]["pp_rank"] = Value::Null;
    merged
}

fn document(value: Value) -> LayoutDocument {
    serde_json::from_value(value).expect("a layout document")
}

#[test]
fn a_document_already_merged_over_its_pp_stages_is_the_instances_layout() {
    let merged = LayoutDocument::merge_ranks(&[document(mla_merged())]).expect("accepted");
    let by_stage =
        LayoutDocument::merge_ranks(&[document(mla_stage(1)), document(mla_stage(0))]).unwrap();
    assert_eq!(merged, by_stage);
    let layout = Layout::from_document(&merged).unwrap();
    let mut suffixes: Vec<&str> = layout.suffixes().map(|(s, _)| s).collect();
    suffixes.sort_unstable();
    assert_eq!(suffixes, ["_0_indexer", "_0_k", "_1_indexer", "_1_k"]);
    // Read directly, the merged document is the same layout.
    assert!(Layout::from_document(&document(mla_merged()))
        .unwrap()
        .same_keys(&layout));
}

#[test]
fn a_merged_pp_document_beside_another_document_is_refused() {
    let err =
        LayoutDocument::merge_ranks(&[document(mla_merged()), document(mla_stage(0))]).unwrap_err();
    assert!(err.contains("merged over its PP stages"), "{err}");
    // A stage's own document still needs every other stage.
    let err = LayoutDocument::merge_ranks(&[document(mla_stage(0))]).unwrap_err();
    assert!(err.contains("PP rank 1 of 2"), "{err}");
}
