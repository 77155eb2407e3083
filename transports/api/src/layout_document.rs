//! SGLang's layout document (as `GET /get_hicache_l3_cache_layout` returns it) from JSON.

use hicache_index::layout::LayoutDocument;
use hicache_index::Layout;

/// Parses SGLang's layout document from JSON.
pub fn layout_from_document_json(text: &str) -> Result<Layout, String> {
    let doc: LayoutDocument =
        serde_json::from_str(text).map_err(|e| format!("invalid layout document: {e}"))?;
    Layout::from_document(&doc).map_err(|e| format!("invalid layout document: {e}"))
}
