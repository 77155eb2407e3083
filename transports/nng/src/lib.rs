//! The hicache-index nng query service: a REP socket answering the query of `POST /v1/query`,
//! encoded as a msgpack map both ways, so that co-located routers (Python through pynng, Go
//! through mangos) get answers in tens of microseconds.
//!
//! The request is a msgpack map with the fields of the HTTP JSON body (`tokens` or
//! `page_hashes`, and optionally `tenant`, `model`, `extra_key`, `cache_salt`); the answer is a
//! msgpack map with the fields of the HTTP answer (`prefix_pages`, `pages`, `trust`,
//! `total_pages`, `memory_pages`, `disk_only_pages`), or `{"error": "..."}`. A map with a
//! `queries` list is a batch, as `POST /v1/query_batch`, answered `{"answers": [...]}`. All are
//! defined once, in [`hicache_index_api`].
//!
//! The socket has no headers, so no bearer token: `serve` refuses a `--nng-listen` that is not
//! loopback or `ipc://` without `--allow-unauthenticated`.
//!
//! # Example
//! ```no_run
//! # fn run(index: hicache_index_driver::QueryHandle) -> Result<(), hicache_index_nng::Error> {
//! // `index` comes from a running subscriber (hicache-index-tokio or -smol).
//! let service = hicache_index_nng::serve(index, "tcp://127.0.0.1:9101")?;
//! // ... answers until it is closed or dropped.
//! service.close();
//! # Ok(())
//! # }
//! ```
//! A Python router asks with pynng:
//! ```text
//! with pynng.Req0(dial="tcp://127.0.0.1:9101") as s:
//!     s.send(msgpack.packb({"tokens": tokens}))
//!     answer = msgpack.unpackb(s.recv())      # {"prefix_pages": 3, "pages": [...], "trust": "live", ...}
//! ```
//!
//! # How it runs
//! One REP socket with [`Options::parallel`] contexts, each an asynchronous receive-answer-send
//! loop run by NNG's own threads: no thread of the caller is used, and a slow client holds only
//! its context. Queries go through the driver's [`QueryHandle`], which hashes tokens outside the
//! index's lock.

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hicache_index_api::{respond_msgpack, ApiError, Limits};
use hicache_index_driver::QueryHandle;
use nng::options::{Options as _, RecvMaxSize};
use nng::{Aio, AioResult, Context, Protocol, Socket};

/// Called with the time each query took, from its decoding to its encoded answer (for a
/// latency histogram).
pub type Observer = Arc<dyn Fn(Duration) + Send + Sync>;

/// How the service runs.
#[derive(Clone)]
pub struct Options {
    /// Bounds on one request (body size, tokens, page hashes).
    pub limits: Limits,
    /// Requests answered at once (NNG contexts).
    pub parallel: usize,
    /// Messages larger than this are dropped by NNG before they are read (the client gets no
    /// answer); requests between [`Limits::max_body_bytes`] and this get a "too large" error.
    pub max_message_bytes: usize,
    /// Told how long each query took.
    pub observer: Option<Observer>,
}

impl Default for Options {
    fn default() -> Self {
        let limits = Limits::default();
        Options {
            limits,
            parallel: 32,
            max_message_bytes: limits.max_body_bytes + (1 << 20),
            observer: None,
        }
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("limits", &self.limits)
            .field("parallel", &self.parallel)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

/// Why the service could not start.
#[derive(Debug)]
pub struct Error {
    /// The URL it was to listen on.
    pub url: String,
    /// What NNG said.
    pub source: nng::Error,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot serve nng on {}: {}", self.url, self.source)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// A running nng query service. Dropping it (or [`Service::close`]) closes the socket; requests
/// in flight get no answer.
pub struct Service {
    socket: Socket,
    url: String,
    workers: Vec<(Aio, Context)>,
}

impl fmt::Debug for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Service")
            .field("url", &self.url)
            .field("parallel", &self.workers.len())
            .finish_non_exhaustive()
    }
}

impl Service {
    /// Returns the URL the service listens on.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Closes the socket and waits until no answer is being made.
    pub fn close(self) {
        drop(self);
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.socket.close();
        for (aio, ctx) in &self.workers {
            aio.cancel();
            ctx.close();
        }
        self.workers.clear();
    }
}

/// Serves queries to `index` on `url` (e.g. `tcp://127.0.0.1:9101`, `ipc:///run/hicache.ipc`)
/// with the default [`Options`].
pub fn serve(index: QueryHandle, url: &str) -> Result<Service, Error> {
    serve_with(index, url, Options::default())
}

/// Serves queries to `index` on `url` with `options`.
pub fn serve_with(index: QueryHandle, url: &str, options: Options) -> Result<Service, Error> {
    let fail = |source| Error {
        url: url.to_owned(),
        source,
    };
    let socket = Socket::new(Protocol::Rep0).map_err(fail)?;
    socket
        .set_opt::<RecvMaxSize>(options.max_message_bytes.max(options.limits.max_body_bytes))
        .map_err(fail)?;
    let state = Arc::new(State {
        index,
        limits: options.limits,
        observer: options.observer,
    });
    let mut workers = Vec::with_capacity(options.parallel.max(1));
    for _ in 0..options.parallel.max(1) {
        let ctx = Context::new(&socket).map_err(fail)?;
        let (ctx_cb, state) = (ctx.clone(), state.clone());
        let aio = Aio::new(move |aio, result| turn(&aio, &ctx_cb, result, &state)).map_err(fail)?;
        workers.push((aio, ctx));
    }
    socket.listen(url).map_err(fail)?;
    for (aio, ctx) in &workers {
        ctx.recv(aio).map_err(fail)?;
    }
    Ok(Service {
        socket,
        url: url.to_owned(),
        workers,
    })
}

/// What every context shares.
struct State {
    index: QueryHandle,
    limits: Limits,
    observer: Option<Observer>,
}

/// One step of a context's loop: a request arrived (answer it), an answer went out or failed
/// (wait for the next request). Runs on NNG's threads: it MUST NOT panic (NNG would abort).
fn turn(aio: &Aio, ctx: &Context, result: AioResult, state: &State) {
    match result {
        AioResult::Recv(Ok(request)) => {
            let start = Instant::now();
            let reply = std::panic::catch_unwind(AssertUnwindSafe(|| {
                reply(&state.index, request.as_slice(), &state.limits)
            }))
            .unwrap_or_else(|_| {
                ApiError::Malformed("internal error while answering".into()).to_msgpack()
            });
            if let Some(observer) = &state.observer {
                observer(start.elapsed());
            }
            if ctx.send(aio, reply.as_slice()).is_err() {
                let _ = ctx.recv(aio);
            }
        }
        AioResult::Recv(Err(nng::Error::Closed | nng::Error::Canceled)) => {}
        AioResult::Recv(Err(_)) | AioResult::Send(_) | AioResult::Sleep(_) => {
            let _ = ctx.recv(aio);
        }
    }
}

/// Answers one msgpack request, a query map or a batch (`{"queries": [...]}`), with the
/// msgpack answer (`{"answers": [...]}` for a batch) or `{"error": "..."}`.
pub fn reply(index: &QueryHandle, request: &[u8], limits: &Limits) -> Vec<u8> {
    respond_msgpack(index, request, limits)
}
