//! An emulated Mooncake master on loopback, for tests, the demo and benchmarks.
//!
//! It speaks both sides of a real master:
//! - a ZeroMQ PUB socket it binds, publishing `[topic, seq, payload]` messages made by
//!   [`hicache_index_wire`] (the 0.3.14 master's exact bytes by default), sequences from
//!   1, at most 64 events a batch;
//! - an HTTP admin side (axum, on its own thread): `GET /get_all_keys`,
//!   `GET /batch_query_keys?keys=k1,k2`, `GET /kv_events/status`, `GET /health`.
//!
//! Its state is only the set of present keys. Controls produce the faults a subscriber must
//! survive: events lost in the master's queue ([`Emulator::store_unpublished`], a gap), skipped
//! sequences, silent removals, a restart (new socket, sequences from 1, every object lost),
//! messages on another topic and malformed messages ([`Emulator::send_frames`]). Every method
//! is synchronous and may be called from any thread, inside or outside an async runtime.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use hicache_index::{EventKind, Layout, PageHash, Seq, Timestamp};
use hicache_index_wire::{encode_payload_into, encode_seq, MasterFlavor, OwnedBatch, OwnedEvent};

/// How an emulator is set up.
#[derive(Clone, Debug)]
pub struct EmulatorConfig {
    /// The event port on 127.0.0.1 (0: any free port, kept across restarts).
    pub event_port: u16,
    /// The HTTP port on 127.0.0.1 (0: any free port).
    pub http_port: u16,
    /// Which master's event layout to publish.
    pub flavor: MasterFlavor,
    /// The most events in one batch (the master's is 64).
    pub max_batch_events: usize,
    /// The topic frame (the master's is empty).
    pub topic: Vec<u8>,
    /// `ZMQ_SNDHWM` of the PUB socket (0: unlimited; the libzmq default is 1000).
    pub send_hwm: i32,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        EmulatorConfig {
            event_port: 0,
            http_port: 0,
            flavor: MasterFlavor::Release0314,
            max_batch_events: 64,
            topic: Vec::new(),
            send_hwm: 1000,
        }
    }
}

/// Where a published batch stands: the run of the master that published it (0 until the first
/// [`Emulator::restart`], one more after each) and its sequence within that run. Sequences of
/// different runs are not comparable (every run starts from 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Position {
    /// The run of the master.
    pub run: u64,
    /// The batch's sequence within the run.
    pub seq: Seq,
}

/// What `GET /kv_events/status` reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Status {
    /// Whether events are published.
    pub enabled: bool,
    /// Batches sent.
    pub published_batches: u64,
    /// Events sent.
    pub published_events: u64,
    /// Events that consumed a sequence without being sent.
    pub dropped_events: u64,
    /// Always 0 here.
    pub skipped_unparsed_keys: u64,
}

/// A running emulated master. Dropping it closes the socket and stops the HTTP server.
pub struct Emulator {
    inner: Arc<Inner>,
    http_addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator")
            .field("event_endpoint", &self.event_endpoint())
            .field("http_addr", &self.http_addr)
            .finish_non_exhaustive()
    }
}

struct Inner {
    master: Mutex<Master>,
    http_available: AtomicBool,
    /// Whether `GET /kv_events/status` exists (an old master has none: 404).
    status_available: AtomicBool,
}

impl Inner {
    /// Locks the master, poisoned or not.
    fn master(&self) -> MutexGuard<'_, Master> {
        self.master
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

struct Master {
    ctx: zmq::Context,
    socket: zmq::Socket,
    endpoint: String,
    config: EmulatorConfig,
    next_seq: u64,
    next_event_id: u64,
    run: u64,
    keys: BTreeSet<String>,
    status: Status,
    payload: Vec<u8>,
}

impl Emulator {
    /// Binds the event socket and the HTTP side on 127.0.0.1 and starts serving.
    pub fn start(config: EmulatorConfig) -> std::io::Result<Emulator> {
        let ctx = zmq::Context::new();
        let socket = bind(
            &ctx,
            &format!("tcp://127.0.0.1:{}", port_or_any(config.event_port)),
            &config,
        )?;
        let endpoint = socket
            .get_last_endpoint()
            .map_err(std::io::Error::from)?
            .map_err(|_| std::io::Error::other("endpoint is not UTF-8"))?;
        let listener = std::net::TcpListener::bind(("127.0.0.1", config.http_port))?;
        listener.set_nonblocking(true)?;
        let http_addr = listener.local_addr()?;
        let inner = Arc::new(Inner {
            master: Mutex::new(Master {
                ctx,
                socket,
                endpoint,
                config,
                next_seq: 1,
                next_event_id: 1,
                run: 0,
                keys: BTreeSet::new(),
                status: Status {
                    enabled: true,
                    ..Status::default()
                },
                payload: Vec::new(),
            }),
            http_available: AtomicBool::new(true),
            status_available: AtomicBool::new(true),
        });
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let app = Router::new()
            .route("/get_all_keys", get(all_keys))
            .route("/batch_query_keys", get(batch_query))
            .route("/kv_events/status", get(status))
            .route("/health", get(health))
            .with_state(inner.clone());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        let server = std::thread::Builder::new()
            .name("emulator-http".into())
            .spawn(move || {
                rt.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    let _ = axum::serve(listener, app)
                        .with_graceful_shutdown(async {
                            let _ = rx.await;
                        })
                        .await;
                });
            })?;
        Ok(Emulator {
            inner,
            http_addr,
            shutdown: Some(tx),
            server: Some(server),
        })
    }

    /// The event endpoint subscribers connect to (`tcp://127.0.0.1:PORT`).
    pub fn event_endpoint(&self) -> String {
        self.master().endpoint.clone()
    }

    /// The HTTP base URL (`http://127.0.0.1:PORT`).
    pub fn http_base(&self) -> String {
        format!("http://{}", self.http_addr)
    }

    /// Stores `keys` and publishes a `stored` event for each, in batches. Returns where the
    /// last of those batches stands (`None` when `keys` is empty).
    pub fn store<S: Into<String>>(&self, keys: impl IntoIterator<Item = S>) -> Option<Position> {
        self.master().apply(EventKind::Stored, keys, true)
    }

    /// Stores every object of `pages` under `layout`, publishing the events; returns where the
    /// last batch stands.
    pub fn store_pages(&self, layout: &Layout, pages: &[PageHash]) -> Option<Position> {
        self.store(pages.iter().flat_map(|p| layout.object_keys(p)))
    }

    /// Stores `keys` but loses their events in the master's queue: one sequence is consumed per
    /// event (as the master does) and nothing is sent (subscribers see a gap at the next batch).
    pub fn store_unpublished<S: Into<String>>(&self, keys: impl IntoIterator<Item = S>) {
        self.master().apply(EventKind::Stored, keys, false);
    }

    /// Removes `keys` and publishes a `removed` event for each. Returns where the last batch
    /// carrying those removals stands (`None` when `keys` is empty): a subscriber that applied
    /// it, or a later batch of the same run, knows every one of them.
    pub fn remove<S: Into<String>>(&self, keys: impl IntoIterator<Item = S>) -> Option<Position> {
        self.master().apply(EventKind::Removed, keys, true)
    }

    /// Removes `keys` without any event (remove-all, a client's `close()`, ...).
    pub fn remove_silently<S: Into<String>>(&self, keys: impl IntoIterator<Item = S>) {
        let mut m = self.master();
        for key in keys {
            m.keys.remove(&key.into());
        }
    }

    /// Skips `n` sequence numbers, as the master does for `n` events dropped from its queue.
    pub fn skip_sequences(&self, n: u64) {
        let mut m = self.master();
        m.next_seq += n;
        m.status.dropped_events += n;
    }

    /// Restarts the master: the socket closes and binds again on the same port, sequences start
    /// from 1, and every object is lost without an event.
    pub fn restart(&self) -> std::io::Result<()> {
        let mut m = self.master();
        let endpoint = m.endpoint.clone();
        let fresh = m.ctx.socket(zmq::PUB)?;
        drop(std::mem::replace(&mut m.socket, fresh));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        // The old listener closes in libzmq's IO thread: the port may stay busy a moment.
        m.socket = loop {
            match bind(&m.ctx, &endpoint, &m.config) {
                Ok(socket) => break socket,
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(e),
            }
        };
        m.next_seq = 1;
        m.next_event_id = 1;
        m.run += 1;
        m.keys.clear();
        m.status = Status {
            enabled: true,
            ..Status::default()
        };
        Ok(())
    }

    /// Sends raw frames as one message (another topic, a malformed message ...); the stream's
    /// sequence is not touched.
    pub fn send_frames(&self, frames: &[&[u8]]) {
        let m = self.master();
        let _ = m.socket.send_multipart(frames.iter().copied(), 0);
    }

    /// Returns the event id the next published event gets.
    pub fn next_event_id(&self) -> u64 {
        self.master().next_event_id
    }

    /// Sets the event id the next published event gets (for benchmarks whose pre-encoded batches
    /// carry ids of a fixed width: the emulator's own batches then run on into them).
    pub fn set_next_event_id(&self, id: u64) {
        self.master().next_event_id = id;
    }

    /// Sends pre-encoded payloads with the next sequences (for benchmarks: no key state
    /// changes); returns the last sequence used.
    pub fn send_payloads<'p>(&self, payloads: impl IntoIterator<Item = &'p [u8]>) -> u64 {
        let mut m = self.master();
        let topic = m.config.topic.clone();
        for payload in payloads {
            let seq = encode_seq(Seq(m.next_seq));
            let _ = m.socket.send(&topic[..], zmq::SNDMORE);
            let _ = m.socket.send(&seq[..], zmq::SNDMORE);
            let _ = m.socket.send(payload, 0);
            m.next_seq += 1;
            m.status.published_batches += 1;
        }
        m.next_seq - 1
    }

    /// Makes batches as this emulator would (for benchmarks that pre-encode), with event ids
    /// from 1.
    pub fn encode_batch(&self, kind: EventKind, keys: &[String]) -> Vec<u8> {
        self.encode_batch_with_ids(kind, keys, 1)
    }

    /// Makes batches as this emulator would, with event ids from `first_event_id`. A stream's
    /// event ids MUST keep increasing from batch to batch (ids that go back are a restart).
    pub fn encode_batch_with_ids(
        &self,
        kind: EventKind,
        keys: &[String],
        first_event_id: u64,
    ) -> Vec<u8> {
        let m = self.master();
        let batch = m.batch(Seq(0), kind, keys.iter().cloned(), first_event_id);
        let mut out = Vec::new();
        encode_payload_into(&mut out, &batch, m.config.flavor);
        out
    }

    /// Reports whether `key` is present.
    pub fn contains(&self, key: &str) -> bool {
        self.master().keys.contains(key)
    }

    /// Returns every present key, in order.
    pub fn keys(&self) -> Vec<String> {
        self.master().keys.iter().cloned().collect()
    }

    /// Returns the run of the master: 0 until the first restart, one more after each.
    pub fn run(&self) -> u64 {
        self.master().run
    }

    /// Returns the publishing counters.
    pub fn status(&self) -> Status {
        self.master().status
    }

    /// Makes `/kv_events/status` say `"enabled":true` or `false` (a master built without the
    /// publisher says false, and publishes nothing).
    pub fn set_events_enabled(&self, enabled: bool) {
        self.master().status.enabled = enabled;
    }

    /// Makes the HTTP side answer 503 (false) or normally (true).
    pub fn set_http_available(&self, available: bool) {
        self.inner
            .http_available
            .store(available, Ordering::Release);
    }

    /// Makes `/kv_events/status` exist (true) or answer 404 (false), as a master older than
    /// its KV event publisher's counters does.
    pub fn set_status_available(&self, available: bool) {
        self.inner
            .status_available
            .store(available, Ordering::Release);
    }

    fn master(&self) -> MutexGuard<'_, Master> {
        self.inner.master()
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
    }
}

fn port_or_any(port: u16) -> String {
    if port == 0 {
        "*".into()
    } else {
        port.to_string()
    }
}

fn bind(
    ctx: &zmq::Context,
    endpoint: &str,
    config: &EmulatorConfig,
) -> std::io::Result<zmq::Socket> {
    let socket = ctx.socket(zmq::PUB)?;
    socket.set_linger(0)?;
    socket.set_sndhwm(config.send_hwm)?;
    socket.bind(endpoint)?;
    Ok(socket)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Master {
    fn apply<S: Into<String>>(
        &mut self,
        kind: EventKind,
        keys: impl IntoIterator<Item = S>,
        publish: bool,
    ) -> Option<Position> {
        let mut last = None;
        let mut keys = keys.into_iter().map(Into::into).peekable();
        while keys.peek().is_some() {
            let chunk: Vec<String> = keys.by_ref().take(self.config.max_batch_events).collect();
            for key in &chunk {
                match kind {
                    EventKind::Removed => self.keys.remove(key),
                    _ => self.keys.insert(key.clone()),
                };
            }
            let events = chunk.len() as u64;
            if !publish {
                // The master consumes one sequence per event dropped from its queue; event ids
                // go to published events only (spec section 3), so none is consumed.
                self.next_seq += events;
                self.status.dropped_events += events;
                continue;
            }
            let seq = self.next_seq;
            self.next_seq += 1;
            let batch = self.batch(Seq(seq), kind, chunk.into_iter(), self.next_event_id);
            self.next_event_id += events;
            self.payload.clear();
            encode_payload_into(&mut self.payload, &batch, self.config.flavor);
            let seq_frame = encode_seq(Seq(seq));
            let _ = self.socket.send(&self.config.topic[..], zmq::SNDMORE);
            let _ = self.socket.send(&seq_frame[..], zmq::SNDMORE);
            let _ = self.socket.send(&self.payload[..], 0);
            self.status.published_batches += 1;
            self.status.published_events += events;
            last = Some(Position {
                run: self.run,
                seq: Seq(seq),
            });
        }
        last
    }

    fn batch(
        &self,
        seq: Seq,
        kind: EventKind,
        keys: impl Iterator<Item = String>,
        first_event_id: u64,
    ) -> OwnedBatch {
        let timestamp_ms = now_ms();
        let release = self.config.flavor == MasterFlavor::Release0314;
        let events = keys
            .enumerate()
            .map(|(i, key)| OwnedEvent {
                event_id: Some(first_event_id + i as u64),
                timestamp_ms,
                backend_id: "emulator".into(),
                dp_rank: release.then_some(0),
                session_id: (release && kind == EventKind::Stored).then(|| "emulator".into()),
                ..OwnedEvent::new(kind, key)
            })
            .collect();
        OwnedBatch {
            seq,
            timestamp: Timestamp::Millis(timestamp_ms),
            dp_rank: Some(0),
            events,
        }
    }
}

type Shared = State<Arc<Inner>>;

fn unavailable(inner: &Inner) -> Option<Response> {
    (!inner.http_available.load(Ordering::Acquire))
        .then(|| (StatusCode::SERVICE_UNAVAILABLE, "unavailable").into_response())
}

async fn all_keys(State(inner): Shared) -> Response {
    if let Some(r) = unavailable(&inner) {
        return r;
    }
    let master = inner.master();
    let mut body = String::with_capacity(master.keys.len() * 80);
    for key in &master.keys {
        body.push_str(key);
        body.push('\n');
    }
    body.into_response()
}

#[derive(serde::Deserialize)]
struct KeysQuery {
    #[serde(default)]
    keys: String,
}

async fn batch_query(State(inner): Shared, Query(q): Query<KeysQuery>) -> Response {
    if let Some(r) = unavailable(&inner) {
        return r;
    }
    let master = inner.master();
    let data: serde_json::Map<String, serde_json::Value> = q
        .keys
        .split(',')
        .filter(|k| !k.is_empty())
        .map(|k| {
            let ok = master.keys.contains(k);
            (k.to_owned(), serde_json::json!({ "ok": ok }))
        })
        .collect();
    Json(serde_json::json!({ "success": true, "data": data })).into_response()
}

async fn status(State(inner): Shared) -> Response {
    if !inner.status_available.load(Ordering::Acquire) {
        return StatusCode::NOT_FOUND.into_response();
    }
    let master = inner.master();
    Json(master.status).into_response()
}

async fn health(State(inner): Shared) -> Response {
    unavailable(&inner).unwrap_or_else(|| "OK".into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_name_the_last_batch_of_a_call_and_the_run_it_belongs_to() {
        let emulator = Emulator::start(EmulatorConfig::default()).expect("the emulator starts");
        let keys = |n: usize| (0..n).map(|i| format!("k{i}")).collect::<Vec<_>>();
        let at = |run, seq| Some(Position { run, seq: Seq(seq) });
        assert_eq!(emulator.store(keys(100)), at(0, 2), "64 events a batch");
        emulator.store_unpublished(keys(3));
        assert_eq!(
            emulator.remove(keys(1)),
            at(0, 6),
            "lost events consume sequences"
        );
        assert_eq!(emulator.remove(Vec::<String>::new()), None);
        emulator.restart().expect("the emulator binds again");
        assert_eq!(emulator.run(), 1);
        assert_eq!(emulator.store(keys(1)), at(1, 1), "a new run starts from 1");
    }
}
