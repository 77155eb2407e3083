//! The native module of the `hicache_index` Python package (`hicache_index._native`): the index
//! in process ([`index::Index`]: the driver on a thread and runtime of its own), its answers, and
//! the tools (page hashes, object keys, layouts).
//!
//! Options are `serve`'s flags: each keyword argument `x_y=v` becomes `--x-y v` and is parsed by
//! the same clap definitions (`hicache_index_options`), so defaults, checks and error messages
//! are the CLI's.

mod answer;
mod index;
mod tools;

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use hicache_index::PageHash;

create_exception!(
    _native,
    Error,
    PyException,
    "A failure of the index that is not the caller's input (it could not start, the sidecar \
     could not be reached, the master's publisher is off)."
);

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

/// A `ValueError` with `message`.
pub(crate) fn value_error(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}

/// Turns keyword arguments into the command line of `command` (`x_y=v` is `--x-y v`): `None`
/// and `False` leave a flag out, `True` gives a switch, a list or tuple repeats the flag, a
/// mapping gives `KEY=VALUE` values, a path its text, a `timedelta` its seconds. A keyword
/// that names no flag is a `TypeError`, as Python's own. `skip` is called first for each
/// keyword and may take it (returns true).
pub(crate) fn argv_from_kwargs(
    what: &str,
    command: &clap::Command,
    kwargs: Option<&Bound<'_, PyDict>>,
    argv: &mut Vec<String>,
    mut skip: impl FnMut(&str, &Bound<'_, PyAny>) -> PyResult<bool>,
) -> PyResult<()> {
    let Some(kwargs) = kwargs else {
        return Ok(());
    };
    for (key, value) in kwargs.iter() {
        let key: String = key.extract()?;
        if value.is_none() || skip(&key, &value)? {
            continue;
        }
        let long = key.replace('_', "-");
        let Some(arg) = command
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()))
        else {
            return Err(PyTypeError::new_err(format!(
                "{what}() got an unexpected keyword argument '{key}'"
            )));
        };
        let flag = format!("--{long}");
        if matches!(arg.get_action(), clap::ArgAction::SetTrue) {
            if value.is_truthy()? {
                argv.push(flag);
            }
            continue;
        }
        if let Ok(dict) = value.cast::<PyDict>() {
            for (k, v) in dict.iter() {
                argv.push(flag.clone());
                argv.push(format!("{}={}", text(&k)?, text(&v)?));
            }
        } else if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
            for item in value.try_iter()? {
                argv.push(flag.clone());
                argv.push(text(&item?)?);
            }
        } else {
            argv.push(flag);
            argv.push(text(&value)?);
        }
    }
    Ok(())
}

/// The text of a keyword argument's value: a path's, a `timedelta`'s seconds, `true`/`false`
/// for a boolean, else `str(value)`.
fn text(value: &Bound<'_, PyAny>) -> PyResult<String> {
    let py = value.py();
    if value.is_instance_of::<PyString>() {
        return value.extract();
    }
    if value.is_instance_of::<pyo3::types::PyBool>() {
        return Ok(if value.is_truthy()? { "true" } else { "false" }.into());
    }
    let os = py.import("os")?;
    if value.is_instance(&os.getattr("PathLike")?)? {
        return os.call_method1("fspath", (value,))?.str()?.extract();
    }
    let timedelta = py.import("datetime")?.getattr("timedelta")?;
    if value.is_instance(&timedelta)? {
        let seconds: f64 = value.call_method0("total_seconds")?.extract()?;
        return Ok(format!("{seconds}"));
    }
    value.str()?.extract()
}

/// Reads a page hash: 32 bytes, or 64 lowercase hex characters; `None` for anything else.
pub(crate) fn page_hash(value: &Bound<'_, PyAny>) -> Option<PageHash> {
    if let Ok(bytes) = value.cast::<PyBytes>() {
        return <[u8; 32]>::try_from(bytes.as_bytes()).ok().map(PageHash);
    }
    if let Ok(text) = value.cast::<PyString>() {
        return text.extract::<String>().ok()?.parse().ok();
    }
    None
}
