//! [`Answer`]: a query's answer, from the index in process or from the sidecar.

use hicache_index_api::QueryAnswer;
use pyo3::prelude::*;
use pyo3::types::PyList;

/// The answer to a query: the leading pages fully present in the store, the per-page map and
/// the trust to put in it. The same fields as `serve`'s JSON answer.
#[pyclass(frozen, eq, module = "hicache_index")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Answer {
    /// Leading pages fully present: the pages a router may count on.
    #[pyo3(get)]
    prefix_pages: usize,
    pages: Vec<bool>,
    /// The index's health when it answered, or `layout_conflict` / `no_layout`.
    #[pyo3(get)]
    trust: String,
    /// Full pages in the request.
    #[pyo3(get)]
    total_pages: usize,
    /// Of the prefix pages, how many were seen with a memory replica.
    #[pyo3(get)]
    memory_pages: usize,
    /// Of the prefix pages, how many were seen only on disk.
    #[pyo3(get)]
    disk_only_pages: usize,
    /// Why nothing could be claimed (`trust` `layout_conflict` or `no_layout`), else `None`.
    #[pyo3(get)]
    reason: Option<String>,
}

impl From<QueryAnswer> for Answer {
    fn from(a: QueryAnswer) -> Answer {
        Answer {
            prefix_pages: a.prefix_pages,
            pages: a.pages,
            trust: a.trust,
            total_pages: a.total_pages,
            memory_pages: a.memory_pages,
            disk_only_pages: a.disk_only_pages,
            reason: a.reason,
        }
    }
}

#[pymethods]
impl Answer {
    #[new]
    #[pyo3(signature = (*, prefix_pages, pages, trust, total_pages, memory_pages, disk_only_pages, reason=None))]
    fn new(
        prefix_pages: usize,
        pages: Vec<bool>,
        trust: String,
        total_pages: usize,
        memory_pages: usize,
        disk_only_pages: usize,
        reason: Option<String>,
    ) -> Answer {
        Answer {
            prefix_pages,
            pages,
            trust,
            total_pages,
            memory_pages,
            disk_only_pages,
            reason,
        }
    }

    /// Whether each page has all its objects, from the first page (see `prefix_only`).
    #[getter]
    fn pages<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, &self.pages)
    }

    /// Whether the answer can be trusted: the index was live and the layout known.
    #[getter]
    fn live(&self) -> bool {
        self.trust == "live"
    }

    fn __repr__(&self) -> String {
        let reason = match &self.reason {
            Some(r) => format!(", reason={r:?}"),
            None => String::new(),
        };
        format!(
            "Answer(prefix_pages={}, total_pages={}, trust={:?}, memory_pages={}, \
             disk_only_pages={}, pages=<{} pages>{reason})",
            self.prefix_pages,
            self.total_pages,
            self.trust,
            self.memory_pages,
            self.disk_only_pages,
            self.pages.len()
        )
    }
}
