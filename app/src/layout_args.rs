//! The LAYOUT flags shared by `serve` and `keys`: SGLang's launch parameters, or the layout
//! document SGLang advertises.

use std::path::PathBuf;

use clap::Args;
use hicache_index::layout::{DcpParams, KeyRule};
use hicache_index::{Layout, SglangParams};
use hicache_index_api::layout_from_document_json;

/// How the objects of a page are named: `--page-size N --tp N [--pp N] [--mla] [--tp-lcm N]
/// [--tag T] [--model NAME] [--key-prefix P] [--eagle]`, or `--layout FILE`.
#[derive(Args, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LayoutArgs {
    /// SGLang's --page-size (tokens per page).
    #[arg(long, value_name = "N")]
    pub(crate) page_size: Option<u32>,
    /// The TP size (attention TP under DP attention).
    #[arg(long, value_name = "N")]
    pub(crate) tp: Option<u32>,
    /// The PP size.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) pp: u32,
    /// The model uses MLA (one K object per PP stage).
    #[arg(long)]
    pub(crate) mla: bool,
    /// SGLang's tp_lcm_size (heads split over it when larger than --tp).
    #[arg(long, value_name = "N")]
    pub(crate) tp_lcm: Option<u32>,
    /// The storage backend's extra_backend_tag (an empty string still counts).
    #[arg(long, value_name = "T")]
    pub(crate) tag: Option<String>,
    /// The served model name, part of the key prefix since SGLang 0.5.17.
    #[arg(long, value_name = "NAME")]
    pub(crate) model: Option<String>,
    /// Decode-context-parallel size (MLA only).
    #[arg(long, value_name = "N")]
    pub(crate) dcp: Option<u32>,
    /// Keys as SGLang <= 0.5.16 wrote them (the tag alone as prefix).
    #[arg(long)]
    pub(crate) tag_only_prefix: bool,
    /// The key prefix as SGLang advertises it, overriding the derived one ("" for a leading _).
    #[arg(long, value_name = "P")]
    pub(crate) key_prefix: Option<String>,
    /// EAGLE speculative decoding (pages of token bigrams).
    #[arg(long)]
    pub(crate) eagle: bool,
    /// SGLang's layout document (JSON, as GET /get_hicache_l3_cache_layout returns it) instead of
    /// the flags above.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["page_size", "tp", "mla", "tp_lcm", "tag", "model", "dcp"])]
    pub(crate) layout: Option<PathBuf>,
}

impl LayoutArgs {
    /// Builds the layout the flags describe; the error is one line for a person.
    pub(crate) fn to_layout(&self) -> Result<Layout, String> {
        if let Some(path) = &self.layout {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            return layout_from_document_json(&text).map(|l| l.with_eagle(self.eagle));
        }
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
            dcp: self.dcp.map(|dcp| DcpParams { dcp, cp: 1 }),
            key_rule: if self.tag_only_prefix {
                KeyRule::TagOnly
            } else {
                KeyRule::Sglang0517
            },
            ..SglangParams::new(page_size, tp)
        };
        let mut layout =
            Layout::from_sglang(&params).map_err(|e| format!("invalid layout: {e}"))?;
        if let Some(prefix) = &self.key_prefix {
            layout.key_prefix = Some(prefix.clone());
            layout
                .validate()
                .map_err(|e| format!("invalid layout: {e}"))?;
        }
        Ok(layout)
    }
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
}
