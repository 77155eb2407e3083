//! What a simulated cluster serves: the models (each an SGLang object layout), the tenants and
//! the request namespaces. The options pick models from [`catalogue`] and
//! [`hybrid_catalogue`]; the master writes their pages.

use hicache_index::{
    layout::{DcpParams, HybridParams, KeyRule, Pool, PoolKind, SidePool},
    HitPolicy, Layout, Namespace, SglangParams, DEFAULT_TENANT,
};

/// One model a fleet of SGLang workers serves, and how its pages are stored.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSpec {
    /// The served model name (the session's layout key).
    pub name: String,
    /// The object layout.
    pub layout: Layout,
    /// Every suffix, in [`Layout::suffixes`] order.
    pub suffixes: Vec<String>,
    /// The hit policy of each suffix.
    pub policies: Vec<HitPolicy>,
}

impl ModelSpec {
    fn new(name: &str, layout: Layout) -> ModelSpec {
        layout.validate().expect("catalogue layouts are valid");
        let suffixes = layout.suffixes().map(|(s, _)| s.to_owned()).collect();
        let policies = layout.suffixes().map(|(_, p)| p).collect();
        ModelSpec {
            name: name.into(),
            layout,
            suffixes,
            policies,
        }
    }
}

fn sglang(f: impl FnOnce(&mut SglangParams)) -> Layout {
    let mut p = SglangParams::new(4, 1);
    f(&mut p);
    Layout::from_sglang(&p).expect("catalogue parameters are valid")
}

/// The models a run can serve: one per layout family of the specification (MHA, PP, head split
/// with EAGLE, MLA, MLA with DCP, no prefix, an empty tag, a trailing-pages pool).
pub fn catalogue() -> Vec<ModelSpec> {
    vec![
        ModelSpec::new(
            "Qwen/Qwen3-8B",
            sglang(|p| {
                p.tp = 2;
                p.model = Some("Qwen/Qwen3-8B".into());
            }),
        ),
        ModelSpec::new(
            "deepseek-ai/DeepSeek-V3",
            sglang(|p| {
                p.page_size = 8;
                p.tp = 8;
                p.mla = true;
                p.extra_backend_tag = Some("prod".into());
                p.model = Some("deepseek-ai/DeepSeek-V3".into());
            }),
        ),
        ModelSpec::new(
            "meta/llama-pp",
            sglang(|p| {
                p.tp = 2;
                p.pp = 2;
                p.model = Some("meta/llama-pp".into());
            }),
        ),
        ModelSpec::new(
            "eagle-split",
            sglang(|p| {
                p.tp = 2;
                p.tp_lcm = Some(4);
                p.eagle = true;
                p.model = Some("eagle-split".into());
            }),
        ),
        ModelSpec::new(
            "plain-old",
            sglang(|p| {
                p.page_size = 2;
                p.key_rule = KeyRule::TagOnly;
            }),
        ),
        ModelSpec::new(
            "hybrid",
            Layout::new(
                4,
                Some("hybrid".into()),
                vec![
                    Pool::all_pages("kv", vec!["_0_k".into(), "_0_v".into()]),
                    Pool {
                        name: "mamba".into(),
                        suffixes: vec!["_ssm".into()],
                        hit_policy: HitPolicy::TrailingPages(2),
                    },
                ],
            )
            .expect("a valid hybrid layout"),
        ),
        ModelSpec::new(
            "dsv3-dcp",
            sglang(|p| {
                p.page_size = 2;
                p.mla = true;
                p.dcp = Some(DcpParams { dcp: 2, cp: 1 });
                p.model = Some("dsv3-dcp".into());
            }),
        ),
        ModelSpec::new(
            "empty-tag",
            sglang(|p| {
                p.extra_backend_tag = Some(String::new());
                p.model = Some("m".into());
            }),
        ),
    ]
}

fn hybrid(
    f: impl FnOnce(&mut SglangParams),
    logical_kv: bool,
    pools: &[(PoolKind, HitPolicy)],
) -> Layout {
    let mut kv = SglangParams::new(4, 1);
    f(&mut kv);
    let pools = pools
        .iter()
        .map(|(kind, hit_policy)| SidePool {
            kind: kind.clone(),
            hit_policy: *hit_policy,
        })
        .collect();
    Layout::from_hybrid(&HybridParams {
        kv,
        logical_kv,
        pools,
    })
    .expect("catalogue parameters are valid")
}

/// The hybrid models a run can serve besides the [`catalogue`]'s: one per family of pools
/// SGLang's Mooncake backend writes after 0.5.23 (Mamba with and without a temporal state,
/// DSA indexer and MLA draft, MHA sliding window and draft, MLA sliding window over PP stages,
/// DeepSeek-V4's logical anchor), with trailing pools that leave holes.
pub fn hybrid_catalogue() -> Vec<ModelSpec> {
    use HitPolicy::{AllPages, TrailingPages};
    vec![
        ModelSpec::new(
            "Qwen/Qwen3-Next-80B-A3B",
            hybrid(
                |p| {
                    p.tp = 2;
                    p.model = Some("Qwen/Qwen3-Next-80B-A3B".into());
                },
                false,
                &[(
                    PoolKind::Mamba {
                        conv_states: 2,
                        temporal: true,
                    },
                    TrailingPages(1),
                )],
            ),
        ),
        ModelSpec::new(
            "mamba-conv-pp2",
            hybrid(
                |p| {
                    p.pp = 2;
                    p.model = Some("mamba-conv-pp2".into());
                },
                false,
                &[(
                    PoolKind::Mamba {
                        conv_states: 1,
                        temporal: false,
                    },
                    TrailingPages(2),
                )],
            ),
        ),
        ModelSpec::new(
            "deepseek-ai/DeepSeek-V3.2",
            hybrid(
                |p| {
                    p.tp = 4;
                    p.mla = true;
                    p.model = Some("deepseek-ai/DeepSeek-V3.2".into());
                },
                false,
                &[
                    (PoolKind::Indexer, AllPages),
                    (PoolKind::Draft { mla: true }, AllPages),
                ],
            ),
        ),
        ModelSpec::new(
            "gpt-oss-swa",
            hybrid(
                |p| {
                    p.page_size = 2;
                    p.tp = 2;
                    p.model = Some("gpt-oss-swa".into());
                },
                false,
                &[
                    (PoolKind::Swa, TrailingPages(3)),
                    (PoolKind::Draft { mla: false }, AllPages),
                ],
            ),
        ),
        ModelSpec::new(
            "mla-swa-pp2",
            hybrid(
                |p| {
                    p.pp = 2;
                    p.mla = true;
                    p.extra_backend_tag = Some("swa".into());
                },
                false,
                &[(PoolKind::Swa, TrailingPages(2))],
            ),
        ),
        ModelSpec::new(
            "deepseek-ai/DeepSeek-V4",
            hybrid(
                |p| {
                    p.tp = 8;
                    p.mla = true;
                    p.model = Some("deepseek-ai/DeepSeek-V4".into());
                },
                true,
                &[
                    (PoolKind::DeepseekV4C4, AllPages),
                    (PoolKind::DeepseekV4C4Indexer, AllPages),
                    (PoolKind::DeepseekV4C4State, TrailingPages(2)),
                    (PoolKind::Swa, TrailingPages(2)),
                    (PoolKind::DraftSwa { mla: true }, TrailingPages(1)),
                ],
            ),
        ),
    ]
}

/// Every model a run can serve: the [`catalogue`], then the [`hybrid_catalogue`].
pub fn all_models() -> Vec<ModelSpec> {
    let mut all = catalogue();
    all.extend(hybrid_catalogue());
    all
}

/// Tenants, the first being Mooncake's default.
pub const TENANTS: [&str; 3] = [DEFAULT_TENANT, "tenant-a", "tenant-b"];

/// Request namespaces some requests carry.
pub const NAMESPACES: [Namespace<'static>; 3] = [
    Namespace {
        extra_key: Some("user-1lora-7"),
        cache_salt: None,
    },
    Namespace {
        extra_key: None,
        cache_salt: Some("salt-a"),
    },
    Namespace {
        extra_key: Some(""),
        cache_salt: Some(""),
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use hicache_index::PageHash;

    #[test]
    fn every_catalogue_layout_is_valid_and_keys_parse_back() {
        for spec in catalogue().into_iter().chain(hybrid_catalogue()) {
            let h = PageHash([7; 32]);
            for key in spec.layout.object_keys(&h) {
                let parsed = hicache_index::parse_object_key(&key).expect("keys parse");
                assert_eq!(parsed.page_hash, h);
                assert_eq!(parsed.prefix, spec.layout.key_prefix.as_deref());
            }
        }
    }
}
