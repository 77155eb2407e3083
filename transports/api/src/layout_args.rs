//! The LAYOUT flags shared by `serve` and `keys`: SGLang's launch parameters, or the layout
//! document SGLang advertises.

use std::path::PathBuf;

use clap::Args;
use hicache_index::layout::{DcpParams, KeyRule, LayoutDocument};
use hicache_index::{Layout, SglangParams};

/// How the objects of a page are named: `--page-size N --tp N [--pp N] [--mla] [--tp-lcm N]
/// [--tag T] [--model NAME] [--key-prefix P] [--eagle]`, or `--layout FILE`.
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
    /// Decode-context-parallel size (MLA only).
    #[arg(long, value_name = "N")]
    pub dcp: Option<u32>,
    /// Keys as SGLang <= 0.5.16 wrote them (the tag alone as prefix).
    #[arg(long)]
    pub tag_only_prefix: bool,
    /// The key prefix as SGLang advertises it, overriding the derived one ("" for a leading _).
    #[arg(long, value_name = "P")]
    pub key_prefix: Option<String>,
    /// EAGLE speculative decoding (pages of token bigrams).
    #[arg(long)]
    pub eagle: bool,
    /// SGLang's layout document (JSON, as GET /get_hicache_l3_cache_layout returns it) instead of
    /// the flags above.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["page_size", "tp", "mla", "tp_lcm", "tag", "model", "dcp"])]
    pub layout: Option<PathBuf>,
}

impl LayoutArgs {
    /// Builds the layout the flags describe; the error is one line for a person.
    pub fn to_layout(&self) -> Result<Layout, String> {
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

/// Parses SGLang's layout document from JSON.
pub fn layout_from_document_json(text: &str) -> Result<Layout, String> {
    let doc: LayoutDocument =
        serde_json::from_str(text).map_err(|e| format!("invalid layout document: {e}"))?;
    Layout::from_document(&doc).map_err(|e| format!("invalid layout document: {e}"))
}
