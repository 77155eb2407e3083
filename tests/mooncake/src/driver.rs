//! A minimal synchronous driver of [`hicache_index::Session`] for these tests.
//!
//! One thread, one ZeroMQ SUB socket with its monitor, HTTP calls on helper threads. It follows
//! the core's driving contract to the letter and nothing more, so that the scenarios exercise
//! the core against the real master. The production transports run the same scenarios through
//! [`crate::index::IndexUnderTest`]; this driver adds a mode they do not have
//! ([`IndexDriver::hide_disconnects`]) and the record of every effect.
//!
//! ```text
//! step(max_wait):
//!     deadline due      -> session.handle(now, Input::Timeout)
//!     SUB messages      -> session.handle(now, Input::Message(&frames)) (before the monitor)
//!     monitor events    -> Input::Connected / Input::Disconnected
//!     HTTP answers      -> Input::Snapshot / SnapshotFailed / VerifyResult / Status
//!     every Effect      -> Connect: new SUB socket (+ monitor); Disconnect: drop it;
//!                          FetchSnapshot: GET /kv_events/status, then /get_all_keys, on a thread;
//!                          VerifyKeys: GET /batch_query_keys on a thread; others: recorded
//! ```
//!
//! Besides driving, it records every effect with its time, so that tests can check what the core
//! decided (what the stream itself showed is counted by [`crate::observer::Observer`]).
//!
//! It is deliberately not the production driver, and repeats some of its lines on purpose (the
//! SUB socket and its monitor as `transports/driver/src/socket.rs` opens them, the master's
//! answers as [`Input`] names them): the scenarios judge the core against the real master, so a
//! bug in the production driver must not be shared by this one. It and [`crate::http`] are the
//! two copies the duplicate report keeps listing.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use hicache_index::{
    Command, Config, Effect, Effects, Input, Instant, Seq, Session, SignalsRequest,
    SnapshotRequest, StatusRequest, StoreSignals, VerifyRequest, Watermark,
};

use crate::http;

/// The receive high-water mark of the SUB socket, in messages: large, so that libzmq does not
/// drop on our side while a test thread is busy elsewhere.
const RECEIVE_HWM: i32 = 1_000_000;

/// The longest the loop sleeps while an HTTP answer may be on its way.
const HTTP_POLL: Duration = Duration::from_millis(2);

/// An HTTP answer coming back from a helper thread.
enum Answer {
    Snapshot {
        request: SnapshotRequest,
        keys: Result<(Option<Watermark>, Vec<String>), String>,
    },
    Verify {
        request: VerifyRequest,
        results: Result<Vec<(String, bool)>, String>,
    },
    Status {
        request: StatusRequest,
        watermark: Option<Watermark>,
    },
    Signals {
        request: SignalsRequest,
        signals: Option<StoreSignals>,
    },
}

/// The watermark a `/kv_events/status` answer names.
fn watermark(status: &http::KvEventsStatus) -> Watermark {
    Watermark {
        seq: Seq(status.published_batches + status.dropped_events),
        events: Some(status.published_events),
    }
}

/// The SUB socket and the PAIR socket that receives its monitor events.
struct Link {
    sub: zmq::Socket,
    monitor: zmq::Socket,
}

static MONITOR_IDS: AtomicU64 = AtomicU64::new(0);

impl Link {
    fn open(
        ctx: &zmq::Context,
        endpoint: &str,
        topic: &[u8],
        auto_reconnect: bool,
    ) -> Result<Link, zmq::Error> {
        let sub = ctx.socket(zmq::SUB)?;
        sub.set_linger(0)?;
        sub.set_rcvhwm(RECEIVE_HWM)?;
        // Normally the session owns reconnection (with its backoff and its clear-on-reconnect).
        // Not -1: with it libzmq 4.3.4 can abort on a half-read multipart message when it tears
        // the pipe down (as in transports/driver/src/socket.rs); i32::MAX never comes in practice.
        sub.set_reconnect_ivl(if auto_reconnect { 100 } else { i32::MAX })?;
        sub.set_subscribe(topic)?;
        let address = format!(
            "inproc://mooncake-tests-monitor-{}",
            MONITOR_IDS.fetch_add(1, Ordering::Relaxed)
        );
        let events = zmq::SocketEvent::HANDSHAKE_SUCCEEDED as i32
            | zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL as i32
            | zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL as i32
            | zmq::SocketEvent::DISCONNECTED as i32
            | zmq::SocketEvent::CLOSED as i32;
        sub.monitor(&address, events)?;
        let monitor = ctx.socket(zmq::PAIR)?;
        monitor.set_linger(0)?;
        monitor.connect(&address)?;
        sub.connect(endpoint)?;
        Ok(Link { sub, monitor })
    }
}

/// Drives one [`Session`] against one master (see the module docs).
pub struct IndexDriver {
    session: Session,
    /// The topic the SUB socket subscribes to (the configuration's).
    topic: Vec<u8>,
    http: SocketAddr,
    ctx: zmq::Context,
    link: Option<Link>,
    origin: std::time::Instant,
    answers_tx: mpsc::Sender<Answer>,
    answers: mpsc::Receiver<Answer>,
    in_flight: usize,
    /// Models a transport that never notices a lost connection: ZeroMQ reconnects by itself
    /// (every 100 ms) and monitor events after the first connection are ignored, so only the
    /// stream itself can tell the session that the publisher changed (off by default).
    pub hide_disconnects: bool,
    effects: Vec<(Instant, Effect)>,
    http_errors: Vec<String>,
}

impl std::fmt::Debug for IndexDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexDriver")
            .field("http", &self.http)
            .field("health", &self.session.status(self.now()).health)
            .finish_non_exhaustive()
    }
}

impl IndexDriver {
    /// Makes a session from `config` (which SHOULD name the master's event endpoint) whose HTTP
    /// effects go to the master's admin address `http`.
    pub fn new(config: Config, http: SocketAddr) -> IndexDriver {
        let topic = config.topic.clone();
        let session = Session::new(config).expect("a valid config");
        let (answers_tx, answers) = mpsc::channel();
        IndexDriver {
            session,
            topic,
            http,
            ctx: zmq::Context::new(),
            link: None,
            origin: std::time::Instant::now(),
            answers_tx,
            answers,
            in_flight: 0,
            hide_disconnects: false,
            effects: Vec::new(),
            http_errors: Vec::new(),
        }
    }

    /// The session (for queries and counters).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The current time on the core's clock (nanoseconds since the driver was made).
    pub fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// Every effect so far, with when it happened.
    pub fn effects(&self) -> &[(Instant, Effect)] {
        &self.effects
    }

    /// HTTP calls that failed.
    pub fn http_errors(&self) -> &[String] {
        &self.http_errors
    }

    /// Does everything due, waiting at most `max_wait` for something to arrive.
    pub fn step(&mut self, max_wait: Duration) {
        let now = self.now();
        if self.session.poll_timeout().is_some_and(|at| at <= now) {
            let fx = self.session.handle(now, Input::Timeout);
            self.execute(now, fx);
        }
        let mut wait = max_wait;
        if let Some(at) = self.session.poll_timeout() {
            wait = wait.min(at.saturating_duration_since(self.now()));
        }
        if self.in_flight > 0 {
            wait = wait.min(HTTP_POLL);
        }
        self.wait_for_input(wait);
        self.drain_messages();
        self.drain_monitor();
        self.drain_answers();
    }

    /// Steps until `done` holds, failing after `timeout`; returns how long it took.
    pub fn run_until(
        &mut self,
        what: &str,
        timeout: Duration,
        mut done: impl FnMut(&IndexDriver) -> bool,
    ) -> Result<Duration, String> {
        let started = std::time::Instant::now();
        loop {
            if done(self) {
                return Ok(started.elapsed());
            }
            if started.elapsed() > timeout {
                return Err(format!(
                    "timed out after {timeout:?} waiting for {what}; health {:?}, counters {:?}, \
                     last effects {:?}, http errors {:?}",
                    self.session.status(self.now()).health,
                    self.session.status(self.now()).counters,
                    &self.effects[self.effects.len().saturating_sub(8)..],
                    self.http_errors,
                ));
            }
            self.step(Duration::from_millis(10));
        }
    }

    fn wait_for_input(&mut self, wait: Duration) {
        let ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
        let Some(link) = &self.link else {
            std::thread::sleep(wait.min(Duration::from_millis(10)));
            return;
        };
        let mut items = [
            link.sub.as_poll_item(zmq::POLLIN),
            link.monitor.as_poll_item(zmq::POLLIN),
        ];
        let _ = zmq::poll(&mut items, ms);
    }

    /// Feeds every queued message (at most a bounded number per step, so timers still run).
    fn drain_messages(&mut self) {
        for _ in 0..4096 {
            let Some(link) = &self.link else { return };
            let parts = match link.sub.recv_multipart(zmq::DONTWAIT) {
                Ok(parts) => parts,
                Err(zmq::Error::EAGAIN) => return,
                Err(e) => panic!("SUB recv: {e}"),
            };
            let now = self.now();
            let frames: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            let fx = self.session.handle(now, Input::Message(&frames));
            self.execute(now, fx);
        }
    }

    fn drain_monitor(&mut self) {
        loop {
            let Some(link) = &self.link else { return };
            let parts = match link.monitor.recv_multipart(zmq::DONTWAIT) {
                Ok(parts) => parts,
                Err(_) => return,
            };
            let Some(raw) = parts.first().and_then(|f| f.get(..2)) else {
                continue;
            };
            let event = zmq::SocketEvent::from_raw(u16::from_ne_bytes([raw[0], raw[1]]));
            let now = self.now();
            if self.hide_disconnects && event != zmq::SocketEvent::HANDSHAKE_SUCCEEDED {
                continue;
            }
            let fx = match event {
                zmq::SocketEvent::HANDSHAKE_SUCCEEDED => self.session.handle(now, Input::Connected),
                zmq::SocketEvent::DISCONNECTED
                | zmq::SocketEvent::CLOSED
                | zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL
                | zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL => {
                    // The socket will not reconnect by itself (reconnect_ivl -1): drop it; the
                    // session schedules the next Connect.
                    self.link = None;
                    self.session.handle(now, Input::Disconnected)
                }
                _ => continue,
            };
            self.execute(now, fx);
        }
    }

    fn drain_answers(&mut self) {
        while let Ok(answer) = self.answers.try_recv() {
            self.in_flight -= 1;
            let now = self.now();
            let fx = match answer {
                Answer::Snapshot {
                    request,
                    keys: Ok((watermark, keys)),
                } => {
                    let lines: Vec<&[u8]> = keys.iter().map(String::as_bytes).collect();
                    let snapshot = Input::Snapshot {
                        request,
                        watermark,
                        lines: &lines,
                    };
                    self.session.handle(now, snapshot)
                }
                Answer::Snapshot {
                    request,
                    keys: Err(e),
                } => {
                    self.http_errors.push(e);
                    self.session.handle(now, Input::SnapshotFailed { request })
                }
                Answer::Verify {
                    request,
                    results: Ok(results),
                } => {
                    let results: Vec<(&str, bool)> =
                        results.iter().map(|(k, ok)| (k.as_str(), *ok)).collect();
                    let answer = Input::VerifyResult {
                        request,
                        results: &results,
                    };
                    self.session.handle(now, answer)
                }
                Answer::Status { request, watermark } => self
                    .session
                    .handle(now, Input::Status { request, watermark }),
                Answer::Signals { request, signals } => self
                    .session
                    .handle(now, Input::Signals { request, signals }),
                Answer::Verify {
                    results: Err(e), ..
                } => {
                    // No call reports a failed verification: the session's timeout ends it.
                    self.http_errors.push(e);
                    Effects::new()
                }
            };
            self.execute(now, fx);
        }
    }

    fn execute(&mut self, now: Instant, fx: Effects) {
        for effect in fx {
            match &effect {
                Effect::Command(Command::Connect { endpoint }) => {
                    self.link = None;
                    match Link::open(&self.ctx, endpoint, &self.topic, self.hide_disconnects) {
                        Ok(link) => self.link = Some(link),
                        Err(e) => {
                            self.http_errors.push(format!("connect {endpoint}: {e}"));
                            let more = self.session.handle(now, Input::Disconnected);
                            self.effects.push((now, effect));
                            self.execute(now, more);
                            continue;
                        }
                    }
                }
                Effect::Command(Command::Disconnect) => self.link = None,
                Effect::Command(Command::FetchSnapshot { request }) => {
                    let (tx, addr, request) = (self.answers_tx.clone(), self.http, *request);
                    self.in_flight += 1;
                    std::thread::spawn(move || {
                        // The watermark first: the last sequence the master had assigned
                        // before the key list was read.
                        let timeout = Duration::from_secs(10);
                        let keys = http::kv_events_status(addr, timeout).and_then(|status| {
                            let at = watermark(&status);
                            http::get_all_keys(addr, timeout).map(|keys| (Some(at), keys))
                        });
                        let _ = tx.send(Answer::Snapshot { request, keys });
                    });
                }
                Effect::Command(Command::VerifyKeys { request, keys }) => {
                    let (tx, addr, request, keys) =
                        (self.answers_tx.clone(), self.http, *request, keys.clone());
                    self.in_flight += 1;
                    std::thread::spawn(move || {
                        let results = http::batch_query_keys(addr, &keys, Duration::from_secs(10));
                        let _ = tx.send(Answer::Verify { request, results });
                    });
                }
                Effect::Command(Command::ReadStatus { request }) => {
                    let (tx, addr, request) = (self.answers_tx.clone(), self.http, *request);
                    self.in_flight += 1;
                    std::thread::spawn(move || {
                        let status = http::kv_events_status(addr, Duration::from_secs(10));
                        let watermark = status.ok().map(|s| watermark(&s));
                        let _ = tx.send(Answer::Status { request, watermark });
                    });
                }
                Effect::Command(Command::ReadSignals { request }) => {
                    let (tx, addr, request) = (self.answers_tx.clone(), self.http, *request);
                    self.in_flight += 1;
                    std::thread::spawn(move || {
                        // The production driver's parser of the Prometheus text.
                        let signals = match http::get(addr, "/metrics", Duration::from_secs(10)) {
                            Ok((200, body)) => hicache_index_driver::parse_signals(&body).ok(),
                            Ok((404, _)) => Some(StoreSignals::default()),
                            _ => None,
                        };
                        let _ = tx.send(Answer::Signals { request, signals });
                    });
                }
                // The real-master scenarios follow one fixed master (their HA runs go through
                // the production driver).
                Effect::Command(Command::CheckLeader { .. } | Command::UseMaster { .. }) => {}
                Effect::Report(_) => {}
            }
            self.effects.push((now, effect));
        }
    }
}
