//! The HTTP side's connections: accepted on a plain or TLS listener, each served by hyper on its
//! own task; counted against `--max-connections` (past it an idle connection is closed to make
//! room, else the new one gets a fast 503); every request through the gate (bearer token),
//! counted by route and status, timed and logged at DEBUG (the access log); and a stop that
//! lets requests in flight finish.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};
use tokio_rustls::TlsAcceptor;
use tower_service::Service;

use super::routes::error_json;
use super::telemetry::{
    record_request, HTTP_CONNECTIONS_CLOSED_IDLE_TOTAL, HTTP_CONNECTIONS_OPEN,
    HTTP_CONNECTIONS_REJECTED_TOTAL,
};

/// The routes, as the request metrics label them (anything else is `other`).
const ROUTES: [&str; 6] = [
    "/v1/query",
    "/v1/query_batch",
    "/metrics",
    "/healthz",
    "/readyz",
    "/openapi.json",
];

/// Who may ask what: with a token, the query routes (and `/metrics` if `metrics` is set) need
/// `Authorization: Bearer TOKEN`; `/healthz`, `/readyz` and `/openapi.json` stay open.
#[derive(Clone, Debug, Default)]
pub(crate) struct Gate {
    /// The bearer token (`--auth-token-file`); `None`: every route is open.
    pub(crate) token: Option<String>,
    /// `/metrics` needs the token too (`--metrics-auth`).
    pub(crate) metrics: bool,
}

impl Gate {
    /// Reports whether a request for `route` with `authorization` may pass.
    fn allows(&self, route: &str, authorization: Option<&HeaderValue>) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let guarded = match route {
            "/v1/query" | "/v1/query_batch" | "other" => true,
            "/metrics" => self.metrics,
            _ => false,
        };
        if !guarded {
            return true;
        }
        let given = authorization
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        constant_time_eq(given.as_bytes(), token.as_bytes())
    }
}

/// Compares two byte strings in time that depends on their lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    diff == 0
}

/// How connections are served.
#[derive(Clone)]
pub(crate) struct Settings {
    /// Time a client has for a request's headers (and, in the handlers, its body), and a TLS
    /// client for its handshake.
    pub(crate) client_timeout: Duration,
    /// The most connections open at once.
    pub(crate) max_connections: usize,
    /// TLS, when `--tls-cert` and `--tls-key` are given.
    pub(crate) tls: Option<TlsAcceptor>,
    /// The token gate.
    pub(crate) gate: Arc<Gate>,
}

/// One open connection: requests in flight, when it was last busy, and its close request.
#[derive(Debug, Default)]
struct Conn {
    busy: AtomicUsize,
    /// Nanoseconds since the table's origin when its last request ended (or it opened).
    last: AtomicU64,
    close: Notify,
}

/// Every open connection.
#[derive(Debug)]
pub(crate) struct Connections {
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    next: AtomicU64,
    origin: Instant,
    /// 503 answers under way (bounded: past the bound a connection is dropped unanswered).
    rejecting: AtomicUsize,
    /// Told when a connection closes (the stop waits for none to be left).
    closed: Notify,
}

/// The most 503 answers made at once; past them a connection over the limit is closed at once.
const MAX_REJECTING: usize = 256;

impl Connections {
    pub(crate) fn new() -> Arc<Connections> {
        Arc::new(Connections {
            open: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
            origin: Instant::now(),
            rejecting: AtomicUsize::new(0),
            closed: Notify::new(),
        })
    }

    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Returns how many connections are open.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn add(&self) -> (u64, Arc<Conn>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn::default());
        conn.last.store(self.now(), Ordering::Relaxed);
        let mut open = self.lock();
        open.insert(id, conn.clone());
        metrics::gauge!(HTTP_CONNECTIONS_OPEN).set(open.len() as f64);
        (id, conn)
    }

    fn remove(&self, id: u64) {
        let mut open = self.lock();
        open.remove(&id);
        metrics::gauge!(HTTP_CONNECTIONS_OPEN).set(open.len() as f64);
        drop(open);
        self.closed.notify_waiters();
    }

    /// Asks the connection idle the longest (no request in flight) to close; false if none is.
    fn close_idle(&self) -> bool {
        let open = self.lock();
        let idle = open
            .values()
            .filter(|c| c.busy.load(Ordering::Acquire) == 0)
            .min_by_key(|c| c.last.load(Ordering::Relaxed));
        match idle {
            Some(conn) => {
                conn.close.notify_one();
                true
            }
            None => false,
        }
    }

    /// Waits until no connection is open, or `deadline`; returns how many are left.
    pub(crate) async fn drained(&self, deadline: tokio::time::Instant) -> usize {
        loop {
            let closed = self.closed.notified();
            let left = self.len();
            if left == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, closed).await.is_err() {
                return self.len();
            }
        }
    }
}

/// Accepts connections until `stop` turns true, each served on its own task; `stop` also makes
/// every open connection finish its request in flight and close.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    router: Router,
    settings: Settings,
    conns: Arc<Connections>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|s| *s) => return,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: wait a moment rather than spin.
                tracing::warn!(target: "hicache_index_serve", "accepting a connection failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        if conns.len() >= settings.max_connections && !conns.close_idle() {
            reject(stream, &settings, &conns);
            continue;
        }
        if conns.len() >= settings.max_connections {
            metrics::counter!(HTTP_CONNECTIONS_CLOSED_IDLE_TOTAL).increment(1);
        }
        let (id, conn) = conns.add();
        let (router, settings, conns, stop) = (
            router.clone(),
            settings.clone(),
            conns.clone(),
            stop.clone(),
        );
        tokio::spawn(async move {
            let service = Requests {
                router,
                gate: settings.gate.clone(),
                conn: conn.clone(),
                conns: conns.clone(),
                peer,
            };
            match &settings.tls {
                Some(tls) => {
                    let handshake = tls.accept(stream);
                    match tokio::time::timeout(settings.client_timeout, handshake).await {
                        Ok(Ok(tls)) => serve_io(tls, service, &conn, &settings, stop).await,
                        Ok(Err(e)) => tracing::debug!(
                            target: "hicache_index_access", %peer, "TLS handshake failed: {e}"
                        ),
                        Err(_) => tracing::debug!(
                            target: "hicache_index_access", %peer, "TLS handshake timed out"
                        ),
                    }
                }
                None => serve_io(stream, service, &conn, &settings, stop).await,
            }
            conns.remove(id);
        });
    }
}

/// Answers a connection over the limit with a 503 (`Connection: close`) and closes it; past
/// [`MAX_REJECTING`] such answers under way, closes it unanswered.
fn reject(stream: tokio::net::TcpStream, settings: &Settings, conns: &Arc<Connections>) {
    metrics::counter!(HTTP_CONNECTIONS_REJECTED_TOTAL).increment(1);
    if conns.rejecting.fetch_add(1, Ordering::AcqRel) >= MAX_REJECTING {
        conns.rejecting.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    let (settings, conns) = (settings.clone(), conns.clone());
    tokio::spawn(async move {
        let busy = |_: Request<Incoming>| async {
            let mut response = error_json(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many connections (--max-connections); try again",
            );
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            Ok::<_, Infallible>(response)
        };
        let serve = async {
            match &settings.tls {
                Some(tls) => {
                    if let Ok(tls) = tls.accept(stream).await {
                        let _ = http1(&settings)
                            .serve_connection(TokioIo::new(tls), hyper::service::service_fn(busy))
                            .await;
                    }
                }
                None => {
                    let _ = http1(&settings)
                        .serve_connection(TokioIo::new(stream), hyper::service::service_fn(busy))
                        .await;
                }
            }
        };
        let _ = tokio::time::timeout(settings.client_timeout, serve).await;
        conns.rejecting.fetch_sub(1, Ordering::AcqRel);
    });
}

fn http1(settings: &Settings) -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(settings.client_timeout);
    builder
}

/// Serves one connection until it closes; a close request (idle, at the limit) or the stop
/// makes it finish the request in flight and close.
async fn serve_io<I>(
    io: I,
    service: Requests,
    conn: &Conn,
    settings: &Settings,
    mut stop: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let connection = http1(settings).serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    let mut closing = false;
    loop {
        tokio::select! {
            _ = connection.as_mut() => return,
            () = conn.close.notified(), if !closing => {
                closing = true;
                connection.as_mut().graceful_shutdown();
            }
            _ = stop.wait_for(|s| *s), if !closing => {
                closing = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    }
}

/// The service of one connection: the gate, the router, the request metrics and the access log.
#[derive(Clone)]
struct Requests {
    router: Router,
    gate: Arc<Gate>,
    conn: Arc<Conn>,
    conns: Arc<Connections>,
    peer: SocketAddr,
}

/// Marks a request over when dropped, whatever became of it.
struct InFlight(Arc<Conn>, Arc<Connections>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.last.store(self.1.now(), Ordering::Relaxed);
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

impl hyper::service::Service<Request<Incoming>> for Requests {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Response<Body>, Infallible>> + Send>,
    >;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let this = self.clone();
        this.conn.busy.fetch_add(1, Ordering::AcqRel);
        let in_flight = InFlight(this.conn.clone(), this.conns.clone());
        Box::pin(async move {
            let _in_flight = in_flight;
            let started = Instant::now();
            let path = request.uri().path();
            let route = ROUTES
                .iter()
                .copied()
                .find(|r| *r == path)
                .unwrap_or("other");
            let method = request.method().clone();
            let logged_path = hicache_index_api::clip(path);
            let response = if this
                .gate
                .allows(route, request.headers().get(header::AUTHORIZATION))
            {
                let mut router = this.router.clone();
                match router.call(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                }
            } else {
                let mut response = error_json(
                    StatusCode::UNAUTHORIZED,
                    "this route needs Authorization: Bearer TOKEN (--auth-token-file)",
                );
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                response
            };
            let took = started.elapsed();
            let status = response.status().as_u16();
            record_request(route, status, took);
            tracing::debug!(
                target: "hicache_index_access",
                peer = %this.peer,
                %method,
                path = %logged_path,
                status,
                micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
                "request"
            );
            Ok(response)
        })
    }
}

/// Loads a PEM certificate chain and private key into a TLS acceptor (rustls, TLS 1.2 and 1.3,
/// HTTP/1.1).
pub(crate) fn tls_acceptor(cert: &str, key: &str) -> Result<TlsAcceptor, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("--tls-cert {cert}: {e}"))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--tls-cert {cert}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("--tls-cert {cert}: no certificate in it"));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("--tls-key {key}: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("--tls-cert/--tls-key: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_guards_the_query_routes_and_optionally_the_metrics() {
        let gate = Gate {
            token: Some("s3cret".into()),
            metrics: false,
        };
        let good = HeaderValue::from_static("Bearer s3cret");
        let bad = HeaderValue::from_static("Bearer s3cre");
        assert!(gate.allows("/v1/query", Some(&good)));
        assert!(!gate.allows("/v1/query", Some(&bad)));
        assert!(!gate.allows("/v1/query_batch", None));
        assert!(gate.allows("/metrics", None));
        assert!(gate.allows("/readyz", None) && gate.allows("/healthz", None));
        let strict = Gate {
            metrics: true,
            ..gate
        };
        assert!(!strict.allows("/metrics", None));
        assert!(Gate::default().allows("/v1/query", None));
    }
}
