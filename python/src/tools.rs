//! The tools: page hashes of tokens, object keys of a page, and layouts (the CLI's `hash` and
//! `keys`, with the same answers).

use clap::{CommandFactory, FromArgMatches, Parser};
use hicache_index::{Namespace, PageHashes};
use hicache_index_options::{clap_message, LayoutArgs};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use crate::convert::argv_from_kwargs;
use crate::error::value_error;

/// The layout flags alone, as `keys` takes them.
#[derive(Parser, Debug)]
#[command(name = "Layout", no_binary_name = true)]
struct LayoutCommand {
    #[command(flatten)]
    layout: LayoutArgs,
}

/// How the objects of a page are named in the store: SGLang's launch parameters, or the
/// layout document a worker advertises.
#[pyclass(frozen, eq, module = "hicache_index")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) inner: hicache_index::Layout,
}

#[pymethods]
impl Layout {
    /// Builds the layout of SGLang's launch flags (`page_size`, `tp`, `pp`, `mla`, `tp_lcm`,
    /// `tag`, `model`, `dcp`, `cp`, `tag_only_prefix`, `key_prefix`, `eagle`, `pool`,
    /// `logical_kv`, or `layout=FILE`), as `hicache-index keys` does.
    #[new]
    #[pyo3(signature = (**flags))]
    fn new(flags: Option<&Bound<'_, PyDict>>) -> PyResult<Layout> {
        let command = LayoutCommand::command();
        let mut argv = Vec::new();
        argv_from_kwargs("Layout", &command, flags, &mut argv, |_, _| Ok(false))?;
        let matches = command
            .try_get_matches_from(&argv)
            .map_err(|e| value_error(clap_message(&e)))?;
        let parsed =
            LayoutCommand::from_arg_matches(&matches).map_err(|e| value_error(clap_message(&e)))?;
        let inner = parsed.layout.to_layout().map_err(value_error)?;
        Ok(Layout { inner })
    }

    /// Reads SGLang's layout document (as `GET /get_hicache_l3_cache_layout` returns it): a
    /// JSON text, bytes, or the decoded mapping. `eagle` as SGLang's speculative decoding.
    #[staticmethod]
    #[pyo3(signature = (document, eagle=false))]
    fn from_sglang(document: &Bound<'_, PyAny>, eagle: bool) -> PyResult<Layout> {
        let text: String = if let Ok(text) = document.cast::<PyString>() {
            text.extract::<String>()?
        } else if let Ok(bytes) = document.cast::<PyBytes>() {
            String::from_utf8(bytes.as_bytes().to_vec())
                .map_err(|_| value_error("the layout document is not UTF-8"))?
        } else {
            let json = document.py().import("json")?;
            json.call_method1("dumps", (document,))?.extract()?
        };
        let inner = hicache_index_api::layout_from_document_json(&text)
            .map_err(value_error)?
            .with_eagle(eagle);
        Ok(Layout { inner })
    }

    /// The object keys of a page (32 bytes or 64 hex characters), in the store's order.
    fn object_keys(&self, page_hash: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let hash = crate::convert::page_hash(page_hash)
            .ok_or_else(|| value_error("--page-hash must be 64 lowercase hex characters"))?;
        Ok(self.inner.object_keys(&hash).collect())
    }

    /// Tokens per page.
    #[getter]
    fn page_size(&self) -> u32 {
        self.inner.page_size
    }

    /// Whether pages are of token bigrams (EAGLE).
    #[getter]
    fn eagle(&self) -> bool {
        self.inner.eagle
    }

    /// Objects per page.
    #[getter]
    fn object_count(&self) -> usize {
        self.inner.object_count()
    }

    fn __repr__(&self) -> String {
        format!(
            "Layout(page_size={}, objects={}, eagle={})",
            self.inner.page_size,
            self.inner.object_count(),
            self.inner.eagle
        )
    }
}

/// The page hashes of `tokens` (ids up to 2^64-1), 32 bytes each, as `hicache-index hash`
/// prints them in hex.
#[pyfunction]
#[pyo3(signature = (tokens, page_size, cache_salt=None, extra_key=None, eagle=false))]
pub(crate) fn page_hashes<'py>(
    py: Python<'py>,
    tokens: &Bound<'py, PyAny>,
    page_size: u32,
    cache_salt: Option<&str>,
    extra_key: Option<&str>,
    eagle: bool,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    if page_size == 0 {
        return Err(value_error("--page-size must be at least 1"));
    }
    let tokens = self::tokens(tokens)?;
    let namespace = Namespace::new(extra_key, cache_salt);
    let hashes: Vec<hicache_index::PageHash> =
        py.detach(|| PageHashes::new(&tokens, page_size, eagle, namespace).collect());
    Ok(hashes.iter().map(|h| PyBytes::new(py, &h.0)).collect())
}

/// The object keys of a page under `layout` (a [`Layout`], or the layout flags as keywords),
/// as `hicache-index keys` prints them.
#[pyfunction]
#[pyo3(signature = (page_hash, layout=None, **flags))]
pub(crate) fn object_keys(
    page_hash: &Bound<'_, PyAny>,
    layout: Option<&Layout>,
    flags: Option<&Bound<'_, PyDict>>,
) -> PyResult<Vec<String>> {
    let hash = crate::convert::page_hash(page_hash)
        .ok_or_else(|| value_error("--page-hash must be 64 lowercase hex characters"))?;
    let built;
    let layout = match (layout, flags.is_some_and(|f| !f.is_empty())) {
        (Some(layout), false) => layout,
        (None, _) => {
            built = Layout::new(flags)?;
            &built
        }
        (Some(_), true) => return Err(value_error("give a layout or its flags, not both")),
    };
    Ok(layout.inner.object_keys(&hash).collect())
}

/// Reads token ids (0 to 2^64-1) from a sequence; a bad one is a `ValueError` naming it.
pub(crate) fn tokens(value: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    if value.is_instance_of::<PyString>() {
        return Err(value_error(
            "tokens must be a sequence of token ids, not a string",
        ));
    }
    if let Ok(tokens) = value.extract::<Vec<u64>>() {
        return Ok(tokens);
    }
    let mut out = Vec::new();
    for item in value
        .try_iter()
        .map_err(|_| value_error("tokens must be a sequence of token ids"))?
    {
        let item = item?;
        let token = item.extract::<u64>().map_err(|_| {
            let shown = item.repr().map(|r| r.to_string()).unwrap_or_default();
            value_error(format!("{shown} is not a token id (0 to 2^64-1)"))
        })?;
        out.push(token);
    }
    Ok(out)
}
