//! The LAYOUT flags shared by `serve` and `keys`: SGLang's launch parameters (with the side pools
//! of a hybrid model), or the layout documents SGLang advertises, one per model.

use std::path::PathBuf;

use clap::Args;
use hicache_index::layout::{DcpParams, HybridParams, KeyRule, PoolKind, SidePool};
use hicache_index::{HitPolicy, Layout, ModelLayout, SglangParams};
use hicache_index_api::layout_from_document_json;

/// How the objects of a page are named: `--page-size N --tp N [--pp N] [--mla] [--tp-lcm N]
/// [--tag T] [--model NAME] [--key-prefix P] [--eagle] [--pool SPEC ...] [--logical-kv]`, or
/// `--layout [MODEL=]FILE` (repeatable: one document per model).
#[derive(Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct LayoutArgs {
    /// SGLang's --page-size (tokens per page).
    #[arg(long, value_name = "N")]
    pub page_size: Option<u32>,
    /// The TP size (attention TP under DP attention).
    #[arg(long, value_name = "N")]
    pub tp: Option<u32>,
    /// The PP size.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub pp: u32,
    /// The model uses MLA (one K object per PP stage).
    #[arg(long)]
    pub mla: bool,
    /// SGLang's tp_lcm_size (heads split over it when larger than --tp).
    #[arg(long, value_name = "N")]
    pub tp_lcm: Option<u32>,
    /// The storage backend's extra_backend_tag (an empty string still counts).
    #[arg(long, value_name = "T")]
    pub tag: Option<String>,
    /// The served model name, part of the key prefix since SGLang 0.5.17.
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// Decode-context-parallel size (MLA only; with --pp, --cp and --pool too). SGLang 0.5.23
    /// advertises no layout for such launches: these flags are how to describe one.
    #[arg(long, value_name = "N")]
    pub dcp: Option<u32>,
    /// The attention context-parallel size (SGLang's attn_cp_size): with --dcp, every CP rank
    /// writes its own shard; without DCP it changes no key.
    #[arg(long, value_name = "N")]
    pub cp: Option<u32>,
    /// Keys as SGLang <= 0.5.16 wrote them (the tag alone as prefix).
    #[arg(long)]
    pub tag_only_prefix: bool,
    /// The key prefix as SGLang advertises it, overriding the derived one ("" for a leading _).
    #[arg(long, value_name = "P")]
    pub key_prefix: Option<String>,
    /// EAGLE speculative decoding (pages of token bigrams).
    #[arg(long)]
    pub eagle: bool,
    /// A side pool of a hybrid model, after the KV pool, in SGLang's order (repeatable):
    /// NAME[,conv=N][,temporal=BOOL][,mla=BOOL][,trailing=W]. NAME is SGLang's pool name:
    /// mamba, draft, draft_swa, swa, indexer, draft_indexer, and DeepSeek-V4's deepseek_v4_ c1,
    /// c1_indexer, c1_indexer_scale, c2, c2_indexer, c2_indexer_scale, c4, c4_rope, c4_indexer,
    /// c4_indexer_scale, c4_state, c4_indexer_state, c128, c128_rope, c128_state. conv and
    /// temporal are mamba's, mla is draft's and draft_swa's; trailing=W makes the pool needed
    /// only on the last W pages of a hit (all pages without it).
    #[arg(long = "pool", value_name = "SPEC", value_parser = parse_side_pool)]
    pub pools: Vec<SidePool>,
    /// The KV pool is a logical anchor (DeepSeek-V4): it stores no object; the side pools decide.
    #[arg(long, requires = "pools")]
    pub logical_kv: bool,
    /// SGLang's layout document (JSON, as GET /get_hicache_l3_cache_layout returns it) instead of
    /// the flags above. Repeatable as MODEL=FILE, one document per served model name; a lone
    /// FILE is the layout of requests that name no model.
    #[arg(long, value_name = "[MODEL=]FILE", conflicts_with_all = ["page_size", "tp", "mla", "tp_lcm", "tag", "model", "dcp", "cp", "pools"])]
    pub layout: Vec<String>,
}

/// Parses a `--pool` value (see [`LayoutArgs::pools`]).
pub fn parse_side_pool(spec: &str) -> Result<SidePool, String> {
    let mut parts = spec.split(',');
    let name = parts.next().unwrap_or_default().trim();
    let (mut conv, mut temporal, mut mla, mut trailing) = (None, true, None, None);
    for part in parts {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?} is not key=value"))?;
        let flag = || match value {
            "true" | "on" | "yes" => Ok(true),
            "false" | "off" | "no" => Ok(false),
            _ => Err(format!("{key}={value:?} is not true or false")),
        };
        let number = || {
            value
                .parse::<u32>()
                .map_err(|_| format!("{key}={value:?} is not a number"))
        };
        match key {
            "conv" => conv = Some(number()?),
            "temporal" => temporal = flag()?,
            "mla" => mla = Some(flag()?),
            "trailing" => trailing = Some(number()?),
            _ => {
                return Err(format!(
                    "unknown key {key:?} (conv, temporal, mla, trailing)"
                ))
            }
        }
    }
    let kind = match name {
        "mamba" => PoolKind::Mamba {
            conv_states: conv.ok_or("mamba needs conv=N (its conv states)")?,
            temporal,
        },
        "draft" => PoolKind::Draft {
            mla: mla.unwrap_or(false),
        },
        "draft_swa" => PoolKind::DraftSwa {
            mla: mla.unwrap_or(false),
        },
        other => serde_json::from_value(serde_json::Value::String(other.to_owned()))
            .map_err(|_| format!("unknown pool {other:?}"))?,
    };
    if conv.is_some() && !matches!(kind, PoolKind::Mamba { .. }) {
        return Err(format!("conv= is mamba's, not {name}'s"));
    }
    if mla.is_some() && !matches!(kind, PoolKind::Draft { .. } | PoolKind::DraftSwa { .. }) {
        return Err(format!("mla= is draft's and draft_swa's, not {name}'s"));
    }
    Ok(SidePool {
        kind,
        hit_policy: trailing.map_or(HitPolicy::AllPages, HitPolicy::TrailingPages),
    })
}

impl LayoutArgs {
    /// Builds the one layout the flags describe; the error is one line for a person.
    pub fn to_layout(&self) -> Result<Layout, String> {
        match self.layout.as_slice() {
            [] => self.flags_layout(),
            [one] => {
                let (_, path) = split_model(one);
                read_document(&path, self.eagle)
            }
            _ => Err("--layout: give one layout here".into()),
        }
    }

    /// Builds the layout of every model the flags describe: the launch flags' (named by
    /// `--model`), or one per `--layout` document. Two documents for one model are refused.
    pub fn to_model_layouts(&self) -> Result<Vec<ModelLayout>, String> {
        if self.layout.is_empty() {
            return Ok(vec![ModelLayout {
                model: self.model.clone(),
                layout: self.flags_layout()?,
            }]);
        }
        let mut out: Vec<ModelLayout> = Vec::with_capacity(self.layout.len());
        for value in &self.layout {
            let (model, path) = split_model(value);
            if model.is_none() && self.layout.len() > 1 {
                return Err(format!(
                    "--layout {value}: with several documents each needs its model (MODEL=FILE)"
                ));
            }
            if out.iter().any(|ml| ml.model == model) {
                return Err(format!(
                    "--layout: two documents for model {}",
                    model.as_deref().unwrap_or_default()
                ));
            }
            let layout =
                read_document(&path, self.eagle).map_err(|e| format!("--layout {value}: {e}"))?;
            out.push(ModelLayout { model, layout });
        }
        Ok(out)
    }

    /// Whether any layout flag or document was given.
    pub fn is_given(&self) -> bool {
        !self.layout.is_empty() || self.page_size.is_some() || self.tp.is_some()
    }

    fn flags_layout(&self) -> Result<Layout, String> {
        let page_size = self
            .page_size
            .ok_or("--page-size is required (or --layout FILE)")?;
        let tp = self.tp.ok_or("--tp is required (or --layout FILE)")?;
        let params = SglangParams {
            eagle: self.eagle,
            pp: self.pp,
            mla: self.mla,
            tp_lcm: self.tp_lcm,
            extra_backend_tag: self.tag.clone(),
            model: self.model.clone(),
            dcp: match (self.dcp, self.cp) {
                (None, None) => None,
                (dcp, cp) => Some(DcpParams {
                    dcp: dcp.unwrap_or(1),
                    cp: cp.unwrap_or(1),
                }),
            },
            key_rule: if self.tag_only_prefix {
                KeyRule::TagOnly
            } else {
                KeyRule::Sglang0517
            },
            ..SglangParams::new(page_size, tp)
        };
        let mut layout = if self.pools.is_empty() {
            Layout::from_sglang(&params)
        } else {
            Layout::from_hybrid(&HybridParams {
                kv: params,
                logical_kv: self.logical_kv,
                pools: self.pools.clone(),
            })
        }
        .map_err(|e| format!("invalid layout: {e}"))?;
        if let Some(prefix) = &self.key_prefix {
            layout.key_prefix = Some(prefix.clone());
            layout
                .validate()
                .map_err(|e| format!("invalid layout: {e}"))?;
        }
        Ok(layout)
    }
}

/// Splits `MODEL=FILE` (a value without `=` is a file for no model).
fn split_model(value: &str) -> (Option<String>, PathBuf) {
    match value.split_once('=') {
        Some((model, path)) if !model.is_empty() => (Some(model.to_owned()), PathBuf::from(path)),
        _ => (None, PathBuf::from(value)),
    }
}

fn read_document(path: &std::path::Path, eagle: bool) -> Result<Layout, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    layout_from_document_json(&text).map(|l| l.with_eagle(eagle))
}

#[cfg(test)]
mod tests {
    //! Moved from `transports/api/tests/api.rs` with its assertions.

    use super::LayoutArgs;

    #[test]
    fn layout_flags_explain_what_is_missing() {
        assert!(LayoutArgs::default()
            .to_layout()
            .unwrap_err()
            .contains("--page-size"));
        let bad = LayoutArgs {
            page_size: Some(0),
            tp: Some(1),
            pp: 1,
            ..LayoutArgs::default()
        };
        assert!(bad.to_layout().unwrap_err().starts_with("invalid layout"));
    }

    #[test]
    fn pool_specs_name_sglangs_pools_with_their_options() {
        use super::parse_side_pool;
        use hicache_index::layout::{PoolKind, SidePool};
        use hicache_index::HitPolicy;
        assert_eq!(
            parse_side_pool("mamba,conv=2,temporal=false,trailing=1").unwrap(),
            SidePool {
                kind: PoolKind::Mamba {
                    conv_states: 2,
                    temporal: false
                },
                hit_policy: HitPolicy::TrailingPages(1),
            }
        );
        assert_eq!(
            parse_side_pool("deepseek_v4_c4").unwrap().kind,
            PoolKind::DeepseekV4C4
        );
        assert_eq!(
            parse_side_pool("draft,mla=true").unwrap().kind,
            PoolKind::Draft { mla: true }
        );
        for (bad, says) in [
            ("mamba", "conv=N"),
            ("swa,conv=1", "mamba's"),
            ("indexer,mla=true", "draft's"),
            ("nope", "unknown pool"),
            ("swa,trailing=x", "not a number"),
            ("swa,window=2", "unknown key"),
        ] {
            let err = parse_side_pool(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn hybrid_flags_build_the_layout_of_from_hybrid() {
        use hicache_index::layout::{HybridParams, SidePool};
        use hicache_index::{Layout, SglangParams};
        let pools: Vec<SidePool> = ["mamba,conv=1,trailing=1", "swa,trailing=2"]
            .iter()
            .map(|s| super::parse_side_pool(s).unwrap())
            .collect();
        let args = LayoutArgs {
            page_size: Some(16),
            tp: Some(2),
            pp: 1,
            pools: pools.clone(),
            ..LayoutArgs::default()
        };
        let expected = Layout::from_hybrid(&HybridParams {
            kv: SglangParams::new(16, 2),
            logical_kv: false,
            pools,
        })
        .unwrap();
        assert_eq!(args.to_layout().unwrap(), expected);
        assert!(args.to_layout().unwrap().object_count() > 4);
    }

    #[test]
    fn several_documents_each_need_a_model_and_a_model_only_one() {
        let args = |values: &[&str]| LayoutArgs {
            pp: 1,
            layout: values.iter().map(|v| v.to_string()).collect(),
            ..LayoutArgs::default()
        };
        let err = args(&["a.json", "b.json"]).to_model_layouts().unwrap_err();
        assert!(err.contains("MODEL=FILE"), "{err}");
        let err = args(&["m=/nonexistent/a.json", "m=/nonexistent/b.json"])
            .to_model_layouts()
            .unwrap_err();
        assert!(err.contains("cannot read"), "{err}");
    }
}
