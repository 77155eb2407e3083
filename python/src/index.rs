//! [`Index`]: the index in process. The driver runs on a thread of its own with its own tokio
//! runtime; queries read its lock-free reader on the caller's thread, with the GIL released.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::{CommandFactory, FromArgMatches, Parser};
use hicache_index::{Health, Lookup, MapCover, ModelLayout, Namespace, PageHash, Pages, Tokens};
use hicache_index_api::{answer_lookup, ApiError, Front};
use hicache_index_driver::report::counter_metric;
use hicache_index_options::{clap_message, IndexArgs};
use hicache_index_tokio::{QueryHandle, Subscriber};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use crate::answer::Answer;
use crate::convert::argv_from_kwargs;
use crate::error::{value_error, Error};
use crate::tools::Layout;

/// `serve`'s subscriber flags alone.
#[derive(Parser, Debug)]
#[command(name = "Index", no_binary_name = true)]
struct IndexCommand {
    #[command(flatten)]
    index: IndexArgs,
}

/// The driver's thread: told to stop through `stop`, joined on close.
struct Runner {
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

/// The index of the pages present in a Mooncake store, kept by the Rust subscriber inside this
/// process (its own thread and runtime), with `serve`'s options and defaults.
#[pyclass(frozen, subclass, module = "hicache_index")]
pub(crate) struct Index {
    handle: QueryHandle,
    runner: Mutex<Option<Runner>>,
}

/// The names of `Index`'s options (serve's subscriber flags, as keywords), and whether each is
/// a switch: for the stubs and the tests.
#[pyfunction]
pub(crate) fn index_options() -> Vec<(String, bool)> {
    IndexCommand::command()
        .get_arguments()
        .filter_map(|a| {
            let long = a.get_long()?;
            Some((
                long.replace('-', "_"),
                matches!(a.get_action(), clap::ArgAction::SetTrue),
            ))
        })
        .collect()
}

#[pymethods]
impl Index {
    /// Starts the subscriber: `events` is serve's `--events`, and every keyword is one of
    /// serve's flags (`master_http`, `layout`, `page_size`, `tp`, `workers`, `ha_locator`, ...).
    /// `layout` also takes a `Layout`, or a mapping of model names to `Layout`s or files.
    #[new]
    #[pyo3(signature = (events, **options))]
    fn new(
        py: Python<'_>,
        events: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Index> {
        let command = IndexCommand::command();
        let mut argv = vec!["--events".to_owned(), events.str()?.extract()?];
        let mut layouts: Vec<ModelLayout> = Vec::new();
        argv_from_kwargs("Index", &command, options, &mut argv, |key, value| {
            if key != "layout" {
                return Ok(false);
            }
            if let Ok(layout) = value.cast::<Layout>() {
                layouts.push(ModelLayout {
                    model: None,
                    layout: layout.get().inner.clone(),
                });
                return Ok(true);
            }
            let Ok(dict) = value.cast::<PyDict>() else {
                return Ok(false);
            };
            let objects: Vec<(String, Layout)> = dict
                .iter()
                .filter_map(|(k, v)| {
                    Some((k.extract().ok()?, v.cast::<Layout>().ok()?.get().clone()))
                })
                .collect();
            if objects.is_empty() {
                return Ok(false);
            }
            if objects.len() != dict.len() {
                return Err(value_error(
                    "layout: give every model a Layout, or every model a file",
                ));
            }
            layouts.extend(objects.into_iter().map(|(model, l)| ModelLayout {
                model: Some(model),
                layout: l.inner,
            }));
            Ok(true)
        })?;
        let matches = command
            .try_get_matches_from(&argv)
            .map_err(|e| value_error(clap_message(&e)))?;
        let args = IndexCommand::from_arg_matches(&matches)
            .map_err(|e| value_error(clap_message(&e)))?
            .index;
        let config = args.plan_with_layouts(layouts).map_err(value_error)?;
        let (handle, runner) = py.detach(|| start(args, config)).map_err(Error::new_err)?;
        Ok(Index {
            handle,
            runner: Mutex::new(Some(runner)),
        })
    }

    /// Answers how many leading pages of a request are fully present in the store. Give
    /// `tokens` (ids) or `page_hashes` (32-byte `bytes` or 64-character hex strings);
    /// `prefix_only=False` maps every page (each hashed and probed). Releases the GIL.
    #[pyo3(signature = (tokens=None, page_hashes=None, cache_salt=None, extra_key=None, model=None, prefix_only=true, tenant=None))]
    #[allow(clippy::too_many_arguments, reason = "Python keywords")]
    fn query(
        &self,
        py: Python<'_>,
        tokens: Option<&Bound<'_, PyAny>>,
        page_hashes: Option<&Bound<'_, PyAny>>,
        cache_salt: Option<&str>,
        extra_key: Option<&str>,
        model: Option<&str>,
        prefix_only: bool,
        tenant: Option<&str>,
    ) -> PyResult<Answer> {
        let cover = if prefix_only {
            MapCover::UntilMiss
        } else {
            MapCover::Every
        };
        let tenant = tenant.unwrap_or(hicache_index::DEFAULT_TENANT);
        let handle = &self.handle;
        let answered = match (tokens, page_hashes) {
            (Some(tokens), None) => {
                let wide = crate::tools::tokens(tokens)?;
                let narrow: Option<Vec<u32>> =
                    wide.iter().map(|&t| u32::try_from(t).ok()).collect();
                py.detach(|| {
                    let tokens = match &narrow {
                        Some(narrow) => Tokens::U32(narrow),
                        None => Tokens::U64(&wide),
                    };
                    let lookup = Lookup {
                        tenant,
                        model,
                        pages: Pages::Tokens {
                            tokens,
                            namespace: Namespace::new(extra_key, cache_salt),
                        },
                    };
                    ask(handle, &lookup, cover)
                })
            }
            (None, Some(given)) => {
                let mut hashes = HASHES.take();
                let read = self::hashes(given, &mut hashes);
                let answered = read.map(|()| {
                    py.detach(|| {
                        let lookup = Lookup {
                            tenant,
                            model,
                            pages: Pages::Hashes(&hashes),
                        };
                        ask(handle, &lookup, cover)
                    })
                });
                if hashes.capacity() <= KEPT_HASHES {
                    HASHES.set(hashes);
                }
                answered?
            }
            _ => return Err(value_error(ApiError::NeedTokensOrHashes.to_string())),
        };
        answered
            .map(Answer::from)
            .map_err(|e| value_error(e.to_string()))
    }

    /// The index's health: `live`, `recovering`, `connecting`, `disconnected` (also once
    /// closed) or `events_disabled`.
    #[getter]
    fn health(&self) -> &'static str {
        self.handle.health().as_str()
    }

    /// The event endpoint in use (the HA leader's, when following one).
    #[getter]
    fn endpoint(&self) -> Option<String> {
        self.handle.endpoint()
    }

    /// The failures under way, one line each: why the index is not live, when something keeps
    /// failing (as `serve`'s `/readyz` says them).
    fn failures(&self) -> Vec<String> {
        self.handle.failures()
    }

    /// Every model the index knows (configured, or advertised by workers), in name order.
    fn models(&self) -> Vec<String> {
        self.handle.known_models()
    }

    /// Every counter and gauge of the index, named as `serve`'s `/metrics` names them
    /// (`hicache_index_queries_total`, `hicache_index_health{state="live"}`, ...).
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let handle = &self.handle;
        let (counters, health, running, memo) = py.detach(|| {
            (
                handle.counters(),
                handle.health(),
                handle.is_running(),
                handle.memo_stats(),
            )
        });
        let out = PyDict::new(py);
        for (field, value, kind) in counters.fields() {
            let (name, factor) = counter_metric(field, kind);
            if factor == 1.0 {
                out.set_item(name, value)?;
            } else {
                out.set_item(name, value as f64 * factor)?;
            }
        }
        let flag = |b: bool| u8::from(b);
        let connected = matches!(
            health,
            Health::Live | Health::Recovering | Health::Reconciling
        );
        out.set_item("hicache_index_connected", flag(connected))?;
        out.set_item("hicache_index_healthy", flag(health == Health::Live))?;
        for state in Health::ALL {
            let name = format!("hicache_index_health{{state=\"{}\"}}", state.as_str());
            out.set_item(name, flag(state == health))?;
        }
        out.set_item("hicache_index_subscriber_running", flag(running))?;
        out.set_item("hicache_index_prefix_memo_hits_total", memo.hits)?;
        out.set_item("hicache_index_prefix_memo_misses_total", memo.misses)?;
        out.set_item("hicache_index_prefix_memo_bytes", memo.bytes)?;
        Ok(out)
    }

    /// Waits until the index is live, at most `timeout` seconds (`None`: no limit); returns
    /// whether it is. Raises `Error` when the master's publisher is off (`serve` exits on it)
    /// or the index was closed. Releases the GIL.
    #[pyo3(signature = (timeout=None))]
    fn wait_live(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let deadline = match timeout {
            Some(t) if !(t >= 0.0 && t.is_finite()) => {
                return Err(value_error(
                    "timeout must be a non-negative number of seconds",
                ))
            }
            Some(t) => Some(Instant::now() + Duration::from_secs_f64(t)),
            None => None,
        };
        loop {
            let health = self.handle.health();
            match health {
                Health::Live => return Ok(true),
                Health::EventsDisabled => {
                    return Err(Error::new_err(hicache_index_options::EVENTS_DISABLED))
                }
                _ if !self.handle.is_running() => {
                    return Err(Error::new_err("the index is closed"))
                }
                _ => {}
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
            py.detach(|| std::thread::sleep(Duration::from_millis(5)));
            py.check_signals()?;
        }
    }

    /// Stops the subscriber and joins its thread (within milliseconds); queries then answer
    /// misses with trust `disconnected`. Closing twice is allowed.
    fn close(&self, py: Python<'_>) {
        let runner = self
            .runner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(runner) = runner {
            py.detach(|| stop(runner));
        }
    }

    /// Whether `close` was called (or the subscriber stopped by itself).
    #[getter]
    fn closed(&self) -> bool {
        !self.handle.is_running()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        format!(
            "Index(endpoint={:?}, health={:?})",
            self.handle.endpoint().unwrap_or_default(),
            self.handle.health().as_str()
        )
    }
}

impl Drop for Index {
    fn drop(&mut self) {
        let runner = self
            .runner
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(runner) = runner {
            stop(runner);
        }
    }
}

/// Asks the index as `serve` answers a query (the same answers and errors).
fn ask(
    handle: &QueryHandle,
    lookup: &Lookup<'_>,
    cover: MapCover,
) -> Result<hicache_index_api::QueryAnswer, ApiError> {
    answer_lookup(
        lookup,
        cover,
        |model| handle.page_shape(model),
        |lookup, map, cover| handle.ask(lookup, map, cover),
    )
    .map_err(|e| e.listing_models(lookup.model, || handle.known_models()))
}

/// Starts the driver's thread: a current-thread tokio runtime running the subscriber (and the
/// worker poller, with `--workers`) until told to stop.
fn start(
    args: IndexArgs,
    config: hicache_index_tokio::SubscriberConfig,
) -> Result<(QueryHandle, Runner), String> {
    let (started, ready) = std::sync::mpsc::channel::<Result<QueryHandle, String>>();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("hicache-index".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = started.send(Err(format!("cannot start the runtime: {e}")));
                    return;
                }
            };
            runtime.block_on(async move {
                let (handle, task) = match Subscriber::spawn(config) {
                    Ok(spawned) => spawned,
                    Err(e) => {
                        let _ = started.send(Err(e.to_string()));
                        return;
                    }
                };
                let workers = match args.spawn_workers(task.control()) {
                    Ok(workers) => workers,
                    Err(e) => {
                        let _ = started.send(Err(e));
                        task.shutdown().await;
                        return;
                    }
                };
                let _ = started.send(Ok(handle));
                // Until close() (or the Index is dropped, which drops the sender).
                let _ = stopped.await;
                drop(workers);
                task.shutdown().await;
            });
        })
        .map_err(|e| format!("cannot start the index's thread: {e}"))?;
    match ready.recv() {
        Ok(Ok(handle)) => Ok((handle, Runner { stop, thread })),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        Err(_) => {
            let _ = thread.join();
            Err("the index's thread ended while starting".into())
        }
    }
}

fn stop(runner: Runner) {
    let _ = runner.stop.send(());
    let _ = runner.thread.join();
}

/// Reads page hashes (32-byte `bytes` or 64 lowercase hex characters each) into `out`
/// (cleared first).
fn hashes(value: &Bound<'_, PyAny>, out: &mut Vec<PageHash>) -> PyResult<()> {
    out.clear();
    let bad = |position: usize| value_error(ApiError::BadPageHash { position }.to_string());
    if let Ok(list) = value.cast::<PyList>() {
        // Nothing below runs Python code, so the list keeps its length and items meanwhile.
        let len = list.len();
        out.reserve(len);
        let offset = bytes_data_offset(value.py());
        for position in 0..len {
            match bytes_hash(list, position, offset) {
                Some(hash) => out.push(hash),
                None => {
                    let item = list.get_item(position)?;
                    out.push(crate::convert::page_hash(&item).ok_or_else(|| bad(position))?);
                }
            }
        }
        return Ok(());
    }
    if value.is_instance_of::<PyString>() {
        return Err(value_error(
            "page_hashes must be a sequence of page hashes, not a string",
        ));
    }
    for (position, item) in value
        .try_iter()
        .map_err(|_| value_error("page_hashes must be a sequence of page hashes"))?
        .enumerate()
    {
        out.push(crate::convert::page_hash(&item?).ok_or_else(|| bad(position))?);
    }
    Ok(())
}

/// Where an exact `bytes` object keeps its bytes, from the object's address: `PyBytes_AsString`
/// of one `bytes` object, measured once (CPython stores them inline, at the same place in
/// every `bytes` object).
fn bytes_data_offset(py: Python<'_>) -> usize {
    static OFFSET: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *OFFSET.get_or_init(|| {
        let probe = pyo3::types::PyBytes::new(py, &[0; 32]);
        let object = probe.as_ptr();
        // SAFETY: `probe` is a live `bytes` object and the GIL is held.
        let data = unsafe { pyo3::ffi::PyBytes_AsString(object) };
        (data as usize) - (object as usize)
    })
}

/// The fast path of [`hashes`]: item `position` of `list` when it is exactly a `bytes` of 32
/// bytes, read with one call of the stable ABI (the borrowed item) and no reference counting;
/// `None` for anything else (the caller takes the general path).
fn bytes_hash(list: &Bound<'_, PyList>, position: usize, offset: usize) -> Option<PageHash> {
    use pyo3::ffi;
    let index = ffi::Py_ssize_t::try_from(position).ok()?;
    // SAFETY: `list` is a live list and the GIL is held (the `Bound`). PyList_GetItem returns a
    // borrowed reference (or NULL with an IndexError, cleared), valid while the list holds it,
    // which it does until Python code runs; none runs before the bytes are copied. An exact
    // `bytes` object (its type checked first) is a variable-size object whose `ob_size` is its
    // length, its bytes immutable and inline at `offset` (`bytes_data_offset`).
    unsafe {
        let item = ffi::PyList_GetItem(list.as_ptr(), index);
        if item.is_null() {
            ffi::PyErr_Clear();
            return None;
        }
        if ffi::PyBytes_CheckExact(item) == 0 || ffi::Py_SIZE(item) != 32 {
            return None;
        }
        let data = item.cast::<u8>().add(offset).cast::<[u8; 32]>();
        Some(PageHash(std::ptr::read_unaligned(data)))
    }
}

/// The most page hashes [`HASHES`] keeps between queries (128 KiB).
const KEPT_HASHES: usize = 4096;

thread_local! {
    /// The page hashes of a query, reused by the next query on the same thread (no allocation
    /// per call once it has grown).
    static HASHES: std::cell::Cell<Vec<PageHash>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Times `iterations` queries of `page_hashes` in Rust, through the same answer path as
/// `Index.query` (hashes converted beforehand), or with `bare` through the query handle alone
/// (no answer built): returns the seconds per query. Releases the GIL throughout. For the
/// benchmark of the Python package (not a test).
#[pyfunction]
#[pyo3(signature = (index, page_hashes, iterations, bare=false))]
pub(crate) fn bench_rust(
    py: Python<'_>,
    index: &Index,
    page_hashes: &Bound<'_, PyAny>,
    iterations: usize,
    bare: bool,
) -> PyResult<f64> {
    let mut hashes = Vec::new();
    self::hashes(page_hashes, &mut hashes)?;
    let handle = &index.handle;
    Ok(py.detach(|| {
        let lookup = Lookup {
            tenant: hicache_index::DEFAULT_TENANT,
            model: None,
            pages: Pages::Hashes(&hashes),
        };
        let mut map = vec![false; hashes.len()];
        let start = Instant::now();
        for _ in 0..iterations {
            if bare {
                std::hint::black_box(handle.query_prefix_map(&lookup, &mut map).ok());
            } else {
                std::hint::black_box(ask(handle, &lookup, MapCover::UntilMiss).ok());
            }
        }
        start.elapsed().as_secs_f64() / iterations.max(1) as f64
    }))
}
