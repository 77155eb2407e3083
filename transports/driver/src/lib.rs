//! The runtime-independent half of the hicache-index transports.
//!
//! `hicache-index-tokio` and `hicache-index-smol` run one loop, [`run::run`], around a
//! [`Driver`], each giving it a small [`run::Runtime`] (register the FDs, yield, wait); this
//! crate holds everything that does not depend on the runtime: ZeroMQ socket setup and draining
//! ([`socket`]), the master's HTTP side and the jobs run over it ([`http`]), the
//! cloneable [`QueryHandle`] and [`Control`], and the export of counters to `metrics` and of
//! effects to `tracing` ([`report`]), and the [`Observer`] a program gives the driver to see
//! each call into the session (`hicache-index watch` prints the stream through one;
//! [`observe`]). No sequence, gap, backoff or health logic lives here: that is the core's
//! [`hicache_index::Session`].
//!
//! # The loop ([`run::run`])
//! ```text
//! let Parts { mut driver, query, control, inbox } = prepare(config)?;
//! loop {
//!     while let Ok(msg) = inbox.try_recv() { if !driver.handle_inbox(msg) { break 'outer } }
//!     busy = link.map_or(false, |l| driver.drain(&l));   // messages, then monitor events
//!     busy |= driver.advance_snapshot();                 // one chunk of a key list, if any
//!     driver.handle_timeout();
//!     while let Some(action) = driver.poll_action() {
//!         Open(link) => drop the old registration, register link.sub/link.monitor FDs
//!         Close      => drop the registration
//!     }
//!     if driver.is_stopped() { break }                   // the observer asked to stop
//!     if !busy && no action ran { wait: inbox.recv(), sub FD, monitor FD, driver.deadline() }
//! }
//! drop(driver)  // marks the subscriber stopped
//! ```
//! The ZeroMQ FDs are edge-triggered: the loop above drains until `EAGAIN` and re-checks
//! `ZMQ_EVENTS` before waiting, which [`Driver::drain`] does; when it returns true (budget
//! spent, actions queued) the loop comes back without waiting.
//!
//! The master's HTTP side is never read on the loop: the driver runs each job on a thread of
//! its own, which hands the outcome back through the inbox. A key list is then handed to the
//! session in chunks of [`SNAPSHOT_CHUNK_LINES`] lines, one per turn, with the socket drained
//! between them: live batches keep going in while a snapshot of any size is applied, and a
//! query waits at most for one chunk.

pub mod config;
pub mod driver;
pub mod episode;
pub mod etcd;
pub mod front;
pub mod handle;
pub mod http;
pub mod leader;
pub mod memo;
pub mod observe;
pub mod report;
pub mod run;
pub mod socket;
pub mod workers;

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub use config::{Error, HaLocator, HttpConfig, LocatorError, SocketConfig, SubscriberConfig};
pub use driver::{Action, Driver, SNAPSHOT_CHUNK_LINES};
pub use handle::{Control, Inbox, LockTimes, QueryHandle};
pub use http::{parse_signals, HttpError, HttpJob, HttpOutcome, MasterHttp, ResponseReader};
pub use memo::{MemoStats, PrefixMemo, DEFAULT_MEMO_BYTES};
pub use observe::{LinkChange, Observed, Observer};
pub use workers::WorkerPoller;

use hicache_index::Session;

/// What [`prepare`] makes: the loop's state (showing each call to the observer `O`), the
/// handles, and the loop's inbox.
#[derive(Debug)]
pub struct Parts<O = ()> {
    /// The loop's state.
    pub driver: Driver<O>,
    /// The query handle to give to routers.
    pub query: QueryHandle,
    /// The control handle.
    pub control: Control,
    /// Requests and HTTP outcomes for the loop.
    pub inbox: async_channel::Receiver<Inbox>,
}

/// Checks `config` and makes a session and everything around it; the runtime then runs the
/// loop. The session is moved in: one subscriber per index, by construction.
pub fn prepare(config: SubscriberConfig) -> Result<Parts, Error> {
    prepare_observed(config, ())
}

/// Does what [`prepare`] does, with `observer` shown each call into the session (see
/// [`Observer`]).
pub fn prepare_observed<O: Observer>(
    config: SubscriberConfig,
    observer: O,
) -> Result<Parts<O>, Error> {
    let SubscriberConfig {
        session,
        master_http,
        socket,
        http,
        metrics_interval,
        prefix_memo_bytes,
        ha,
    } = config;
    let mut session = session;
    if ha.is_some() {
        session.leader.get_or_insert_with(Default::default);
        if master_http.is_none() {
            return Err(Error::MasterHttpRequired);
        }
    }
    let wants_http = session.resync.is_some() || session.verify.is_some();
    let http = match (master_http, wants_http) {
        (Some(url), _) => Some(Arc::new(MasterHttp::new(&url, http)?)),
        (None, true) => return Err(Error::MasterHttpRequired),
        (None, false) => None,
    };
    if socket.max_message_bytes <= 0 || socket.receive_hwm <= 0 || socket.drain_budget == 0 {
        return Err(Error::Socket(
            "max_message_bytes, receive_hwm and drain_budget must be positive",
        ));
    }
    let topic = session.topic.clone();
    let session = Session::new(session)?;
    let deadline = session.poll_timeout();
    let start = std::time::Instant::now();
    let shared = Arc::new(handle::Shared {
        reader: session.reader(),
        session: handle::SessionLock::new(session),
        running: AtomicBool::new(true),
        start,
        locks: handle::LockMaxima::default(),
        memo: PrefixMemo::new(prefix_memo_bytes),
        episodes: episode::Episodes::default(),
    });
    let (tx, inbox) = async_channel::unbounded();
    let control = Control::new(tx);
    report::export_running(true);
    let driver = Driver {
        shared: shared.clone(),
        ctx: zmq::Context::new(),
        topic,
        socket,
        http,
        control: control.clone(),
        actions: VecDeque::new(),
        parts: Vec::new(),
        deadline,
        metrics_interval,
        next_export: start,
        handover: None,
        observer,
        stopped: false,
        log: report::ReportLog::default(),
        connecting: None,
    };
    if let Some(locator) = ha {
        etcd::spawn(locator, control.clone()).map_err(|e| Error::Etcd(e.to_string()))?;
    }
    Ok(Parts {
        driver,
        query: QueryHandle::new(shared),
        control,
        inbox,
    })
}
