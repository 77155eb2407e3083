//! SGLang's launch parameters ([`SglangParams`]) and the KV-pool layout SGLang derives from
//! them ([`Layout::from_sglang`]), with the rank parts of its object keys.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use serde::{Deserialize, Serialize};

use super::error::LayoutError;
use super::limits::MAX_OBJECTS_PER_PAGE;
use super::objects::{Layout, Pool};

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
