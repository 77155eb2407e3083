//! The native module of the `hicache_index` Python package (`hicache_index._native`): the index
//! in process ([`index::Index`]: the driver on a thread and runtime of its own), its answers, and
//! the tools (page hashes, object keys, layouts).
//!
//! Options are `serve`'s flags: each keyword argument `x_y=v` becomes `--x-y v` and is parsed by
//! the same clap definitions (`hicache_index_options`), so defaults, checks and error messages
//! are the CLI's.

mod answer;
mod convert;
mod error;
mod index;
mod tools;

use crate::error::Error;
use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("Error", m.py().get_type::<Error>())?;
    m.add_class::<answer::Answer>()?;
    m.add_class::<index::Index>()?;
    m.add_class::<tools::Layout>()?;
    m.add_function(wrap_pyfunction!(tools::page_hashes, m)?)?;
    m.add_function(wrap_pyfunction!(tools::object_keys, m)?)?;
    m.add_function(wrap_pyfunction!(index::index_options, m)?)?;
    m.add_function(wrap_pyfunction!(index::bench_rust, m)?)?;
    Ok(())
}
