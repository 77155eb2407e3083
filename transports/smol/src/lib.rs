//! A smol (async-io) driver for hicache-index: subscribes to a Mooncake master's KV events over
//! ZeroMQ, keeps the index live, and hands routers a cheap [`QueryHandle`].
//!
//! The loop reads the SUB socket (readiness from its `ZMQ_FD` through [`smol::Async`]), converts
//! time, calls the core and executes its effects; everything runtime-independent is in
//! [`hicache_index_driver`] (which also reads the master's HTTP side, on threads of its own).
//! No sequence, gap, backoff or health logic lives here.
//!
//! # Example
//! ```no_run
//! use hicache_index::{Config, Layout, Lookup, ModelLayout, SglangParams};
//! use hicache_index_smol::{Subscriber, SubscriberConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let layout = Layout::from_sglang(&SglangParams::new(64, 8)).expect("a valid layout");
//! let config = SubscriberConfig::new(Config {
//!     endpoint: Some("tcp://10.0.0.5:5557".into()),
//!     layouts: vec![ModelLayout { model: None, layout }],
//!     ..Config::default()
//! })
//! .with_master_http("http://10.0.0.5:9003");
//! let (index, task) = Subscriber::spawn(config)?;
//! let tokens: Vec<u32> = (0..4096).collect();
//! let hits = index.query(&Lookup::tokens(&tokens)).expect("one layout");
//! println!("{} of {} pages cached ({:?})", hits.prefix_pages, hits.total_pages, hits.trust);
//! smol::block_on(task.shutdown());
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::os::fd::{AsFd, BorrowedFd, RawFd};
use std::sync::Arc;

use hicache_index_driver::run::{prepare_run, Runtime};
use hicache_index_driver::socket::Link;
use hicache_index_driver::Inbox;
use smol::future;
use smol::{Async, Executor, Task, Timer};

pub use hicache_index_driver::{
    Control, Error, HaLocator, HttpConfig, QueryHandle, SocketConfig, SubscriberConfig,
};

/// Starts subscribers on a smol executor.
#[derive(Debug)]
pub struct Subscriber;

impl Subscriber {
    /// Makes the session from `config` and spawns its loop on smol's global executor.
    ///
    /// Returns the query handle and the running task. The session is moved into the task: one
    /// subscriber per index.
    pub fn spawn(config: SubscriberConfig) -> Result<(QueryHandle, SubscriberTask), Error> {
        Subscriber::start(config, smol::spawn)
    }

    /// Like [`Subscriber::spawn`], on `executor` (which the caller MUST keep running).
    pub fn spawn_on(
        executor: &Arc<Executor<'static>>,
        config: SubscriberConfig,
    ) -> Result<(QueryHandle, SubscriberTask), Error> {
        Subscriber::start(config, |f| executor.spawn(f))
    }

    fn start(
        config: SubscriberConfig,
        spawn: impl FnOnce(BoxedLoop) -> Task<()>,
    ) -> Result<(QueryHandle, SubscriberTask), Error> {
        let (query, control, run) = prepare_run::<Smol>(config, "smol")?;
        let task = spawn(Box::pin(run));
        Ok((
            query,
            SubscriberTask {
                task: Some(task),
                control,
            },
        ))
    }
}

type BoxedLoop = std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A running subscriber. Dropping it cancels the loop (the index is marked stopped at once).
#[derive(Debug)]
pub struct SubscriberTask {
    task: Option<Task<()>>,
    control: Control,
}

impl SubscriberTask {
    /// Returns a handle to steer the subscriber (worker metadata, clears, stop).
    pub fn control(&self) -> Control {
        self.control.clone()
    }

    /// Reports whether the loop has ended.
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(Task::is_finished)
    }

    /// Stops the loop and waits until it has ended (sockets closed, index marked stopped).
    pub async fn shutdown(mut self) {
        self.control.stop();
        if let Some(task) = self.task.take() {
            task.await;
        }
    }
}

impl Drop for SubscriberTask {
    fn drop(&mut self) {
        self.control.stop();
    }
}

/// A ZeroMQ socket's `ZMQ_FD`, registered with async-io; the socket outlives it (the driver's
/// loop drops a link's [`Fds`] before the link: see [`Runtime::Fds`]).
struct ZmqFd(RawFd);

#[allow(unsafe_code)]
impl AsFd for ZmqFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: a `ZmqFd` only exists inside `Fds`, which the driver's loop keeps next to the
        // link owning the FD and drops first, so the FD is open for as long as `self` lives.
        unsafe { BorrowedFd::borrow_raw(self.0) }
    }
}

/// Both FDs of a link, registered with async-io.
struct Fds {
    sub: Async<ZmqFd>,
    monitor: Async<ZmqFd>,
}

/// The smol runtime (async-io's reactor), for the driver's loop.
struct Smol;

impl Runtime for Smol {
    type Fds = Fds;

    fn register(link: &Link) -> std::io::Result<Fds> {
        let fd = |s: &zmq::Socket| s.get_fd().map(ZmqFd).map_err(std::io::Error::from);
        Ok(Fds {
            sub: Async::new_nonblocking(fd(&link.sub)?)?,
            monitor: Async::new_nonblocking(fd(&link.monitor)?)?,
        })
    }

    fn yield_now() -> impl Future<Output = ()> + Send {
        future::yield_now()
    }

    fn wait<'a>(
        inbox: &'a async_channel::Receiver<Inbox>,
        fds: Option<&'a Fds>,
        deadline: std::time::Instant,
    ) -> impl Future<Output = Option<Result<Inbox, async_channel::RecvError>>> + Send + 'a {
        future::or(async { Some(inbox.recv().await) }, async move {
            future::or(readable(fds), async {
                Timer::at(deadline).await;
            })
            .await;
            None
        })
    }
}

/// Waits until either FD signals (the loop then drains and re-checks `ZMQ_EVENTS`).
async fn readable(fds: Option<&Fds>) {
    let Some(fds) = fds else {
        return future::pending().await;
    };
    if future::or(fds.sub.readable(), fds.monitor.readable())
        .await
        .is_err()
    {
        future::pending::<()>().await;
    }
}
