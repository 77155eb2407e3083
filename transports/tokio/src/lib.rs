//! A tokio driver for hicache-index: subscribes to a Mooncake master's KV events over ZeroMQ,
//! keeps the index live, and hands routers a cheap [`QueryHandle`].
//!
//! The loop reads the SUB socket (readiness from its `ZMQ_FD` through [`AsyncFd`]), converts
//! time, calls the core and executes its effects; everything runtime-independent is in
//! [`hicache_index_driver`] (which also reads the master's HTTP side, on threads of its own).
//! No sequence, gap, backoff or health logic lives here.
//!
//! # Example
//! ```no_run
//! use hicache_index::{Config, Layout, Lookup, ModelLayout, SglangParams};
//! use hicache_index_tokio::{Subscriber, SubscriberConfig};
//! #
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//!
//! // The model's pages: 64 tokens a page, TP 8 (or SGLang's layout document, one per model).
//! let layout = Layout::from_sglang(&SglangParams::new(64, 8)).expect("a valid layout");
//! let config = SubscriberConfig::new(Config {
//!     endpoint: Some("tcp://10.0.0.5:5557".into()), // the master's KV events
//!     layouts: vec![ModelLayout { model: None, layout }],
//!     ..Config::default()
//! })
//! .with_master_http("http://10.0.0.5:9003"); // bootstrap, resync after loss, verification
//! let (index, task) = Subscriber::spawn(config)?; // on the current tokio runtime
//!
//! // Any thread, any time, no network call: how many leading pages can a worker load from L3?
//! let tokens: Vec<u32> = (0..4096).collect();
//! let hits = index.query(&Lookup::tokens(&tokens)).expect("one layout");
//! println!("{} of {} pages cached ({:?})", hits.prefix_pages, hits.total_pages, hits.trust);
//! task.shutdown().await;
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::os::fd::{AsRawFd, RawFd};

use hicache_index_driver::run::{prepare_run, Runtime};
use hicache_index_driver::socket::Link;
use hicache_index_driver::Inbox;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

pub use hicache_index_driver::{
    Control, Error, HaLocator, HttpConfig, LockTimes, MemoStats, QueryHandle, SocketConfig,
    SubscriberConfig, DEFAULT_MEMO_BYTES, SNAPSHOT_CHUNK_LINES,
};

/// Starts subscribers on the current tokio runtime.
#[derive(Debug)]
pub struct Subscriber;

impl Subscriber {
    /// Makes the session from `config` and spawns its loop on the current tokio runtime.
    ///
    /// Returns the query handle and the running task. The session is moved into the task: one
    /// subscriber per index.
    ///
    /// # Panics
    /// Outside a tokio runtime, like `tokio::spawn`.
    pub fn spawn(config: SubscriberConfig) -> Result<(QueryHandle, SubscriberTask), Error> {
        let (query, control, run) = prepare_run::<Tokio>(config, "tokio")?;
        let join = tokio::spawn(run);
        Ok((
            query,
            SubscriberTask {
                join: Some(join),
                control,
            },
        ))
    }
}

/// A running subscriber. Dropping it asks the loop to stop (it finishes within milliseconds).
#[derive(Debug)]
pub struct SubscriberTask {
    join: Option<tokio::task::JoinHandle<()>>,
    control: Control,
}

impl SubscriberTask {
    /// Returns a handle to steer the subscriber (worker metadata, clears, stop).
    pub fn control(&self) -> Control {
        self.control.clone()
    }

    /// Reports whether the loop has ended.
    pub fn is_finished(&self) -> bool {
        self.join.as_ref().is_none_or(|j| j.is_finished())
    }

    /// Stops the loop and waits until it has ended (sockets closed, index marked stopped).
    pub async fn shutdown(mut self) {
        self.control.stop();
        if let Some(join) = self.join.take() {
            let _ = join.await;
        }
    }
}

impl Drop for SubscriberTask {
    fn drop(&mut self) {
        self.control.stop();
    }
}

/// A ZeroMQ socket's `ZMQ_FD`, registered with tokio; the socket outlives it (the driver's
/// loop drops a link's [`Fds`] before the link: see [`Runtime::Fds`]).
#[derive(Debug)]
struct ZmqFd(RawFd);

impl AsRawFd for ZmqFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Both FDs of a link, registered with tokio.
#[derive(Debug)]
pub struct Fds {
    sub: AsyncFd<ZmqFd>,
    monitor: AsyncFd<ZmqFd>,
}

/// The tokio runtime, for the driver's loop: a program that drives a
/// [`hicache_index_driver::Driver`] of its own (one with an observer, say) runs
/// `hicache_index_driver::run::run::<Tokio>(driver, inbox)` on a tokio runtime with IO and time
/// enabled; [`Subscriber::spawn`] does that for an unobserved one.
#[derive(Debug)]
pub struct Tokio;

impl Runtime for Tokio {
    type Fds = Fds;

    fn register(link: &Link) -> std::io::Result<Fds> {
        Ok(Fds {
            sub: register(&link.sub)?,
            monitor: register(&link.monitor)?,
        })
    }

    fn yield_now() -> impl Future<Output = ()> + Send {
        tokio::task::yield_now()
    }

    fn wait<'a>(
        inbox: &'a async_channel::Receiver<Inbox>,
        fds: Option<&'a Fds>,
        deadline: std::time::Instant,
    ) -> impl Future<Output = Option<Result<Inbox, async_channel::RecvError>>> + Send + 'a {
        let deadline = tokio::time::Instant::from_std(deadline);
        async move {
            tokio::select! {
                msg = inbox.recv() => Some(msg),
                () = readable(fds) => None,
                () = tokio::time::sleep_until(deadline) => None,
            }
        }
    }
}

/// Registers a socket's `ZMQ_FD` for readability.
#[allow(unsafe_code)]
fn register(socket: &zmq::Socket) -> std::io::Result<AsyncFd<ZmqFd>> {
    let fd = ZmqFd(socket.get_fd()?);
    // SAFETY: the FD belongs to `socket`, which stays open until after the `AsyncFd` is dropped:
    // the driver's loop keeps the `Fds` next to the link and drops them first.
    unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(|e| e.into_parts().1)
}

/// Waits until either FD signals, and clears that readiness (the loop then drains and re-checks
/// `ZMQ_EVENTS`, so no edge is lost).
async fn readable(fds: Option<&Fds>) {
    let Some(fds) = fds else {
        return std::future::pending().await;
    };
    let guard = tokio::select! {
        g = fds.sub.readable() => g,
        g = fds.monitor.readable() => g,
    };
    match guard {
        Ok(mut guard) => guard.clear_ready(),
        Err(_) => std::future::pending().await,
    }
}
