//! The errors the module raises: its own [`Error`], and `ValueError` for a bad input.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::PyErr;

create_exception!(
    _native,
    Error,
    PyException,
    "A failure of the index that is not the caller's input (it could not start, the sidecar \
     could not be reached, the master's publisher is off)."
);

/// A `ValueError` with `message`.
pub(crate) fn value_error(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}
