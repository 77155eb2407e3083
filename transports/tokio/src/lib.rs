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
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
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
//! task.shutdown().await;
//! # Ok(())
//! # }
//! ```

use std::os::fd::{AsRawFd, RawFd};

use hicache_index_driver::socket::Link;
use hicache_index_driver::{prepare, Action, Driver, Inbox, Parts};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tracing::Instrument;

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
        let Parts {
            driver,
            query,
            control,
            inbox,
        } = prepare(config)?;
        let span = tracing::info_span!("hicache_index_subscriber", runtime = "tokio");
        let join = tokio::spawn(run(driver, inbox).instrument(span));
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

/// A ZeroMQ socket's `ZMQ_FD`, registered with tokio; the socket outlives it (see
/// [`Registered`]).
struct ZmqFd(RawFd);

impl AsRawFd for ZmqFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// A link whose FDs are registered. Field order matters: the FDs deregister before the
/// sockets close.
struct Registered {
    sub_fd: AsyncFd<ZmqFd>,
    monitor_fd: AsyncFd<ZmqFd>,
    link: Link,
}

impl Registered {
    fn new(link: Link) -> std::io::Result<Registered> {
        Ok(Registered {
            sub_fd: register(&link.sub)?,
            monitor_fd: register(&link.monitor)?,
            link,
        })
    }
}

/// Registers a socket's `ZMQ_FD` for readability.
#[allow(unsafe_code)]
fn register(socket: &zmq::Socket) -> std::io::Result<AsyncFd<ZmqFd>> {
    let fd = ZmqFd(socket.get_fd()?);
    // SAFETY: the FD belongs to `socket`, which stays open until after the `AsyncFd` is dropped:
    // both live in one `Registered`, whose FD fields drop before its `link` field.
    unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(|e| e.into_parts().1)
}

/// The loop: drain, fire timers, execute actions; wait only when nothing is pending.
async fn run(mut driver: Driver, inbox: async_channel::Receiver<Inbox>) {
    let mut link: Option<Registered> = None;
    'run: loop {
        while let Ok(msg) = inbox.try_recv() {
            if !driver.handle_inbox(msg) {
                break 'run;
            }
        }
        let mut again = false;
        if let Some(l) = &link {
            again = driver.drain(&l.link);
        }
        again |= driver.advance_snapshot();
        driver.handle_timeout();
        while let Some(action) = driver.poll_action() {
            again = true;
            match action {
                Action::Open(new) => {
                    link = None;
                    match Registered::new(new) {
                        Ok(registered) => link = Some(registered),
                        Err(e) => driver.link_failed(&e),
                    }
                }
                Action::Close => link = None,
            }
        }
        if again {
            tokio::task::yield_now().await;
            continue;
        }
        let deadline = tokio::time::Instant::from_std(driver.deadline());
        let fds = link.as_ref().map(|l| (&l.sub_fd, &l.monitor_fd));
        tokio::select! {
            msg = inbox.recv() => {
                if !msg.is_ok_and(|msg| driver.handle_inbox(msg)) {
                    break 'run;
                }
            }
            () = readable(fds) => {}
            () = tokio::time::sleep_until(deadline) => {}
        }
    }
}

/// Waits until either FD signals, and clears that readiness (the loop then drains and re-checks
/// `ZMQ_EVENTS`, so no edge is lost).
async fn readable(fds: Option<(&AsyncFd<ZmqFd>, &AsyncFd<ZmqFd>)>) {
    let Some((sub, monitor)) = fds else {
        return std::future::pending().await;
    };
    let guard = tokio::select! {
        g = sub.readable() => g,
        g = monitor.readable() => g,
    };
    match guard {
        Ok(mut guard) => guard.clear_ready(),
        Err(_) => std::future::pending().await,
    }
}
