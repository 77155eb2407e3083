//! Reading what Python passes: keyword arguments as a command line, and page hashes.

use hicache_index::PageHash;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

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
