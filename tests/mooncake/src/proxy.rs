//! A pass-through HTTP proxy in front of the master's admin side that can hold back its answers
//! to `GET /get_all_keys`.
//!
//! The master reads its key list at once; the proxy receives that answer and keeps it until the
//! test releases it. Meanwhile the index waits for its snapshot, and whatever the store does in
//! between arrives as live batches the index must buffer and replay. This works the same for
//! every way of running the index (core driver, tokio library, `hicache-index serve`), because
//! it is just another HTTP server on loopback. It reads requests with `httparse` and asks the
//! master with the tests' own client ([`crate::http`]).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// What the proxy saw and whether it holds snapshots.
#[derive(Debug, Default)]
struct State {
    hold: bool,
    fetched: u64,
    snapshots: Vec<Vec<String>>,
}

/// The proxy; it stops accepting when dropped.
#[derive(Debug)]
pub struct HttpProxy {
    addr: SocketAddr,
    state: Arc<(Mutex<State>, Condvar)>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HttpProxy {
    /// Listens on a free loopback port and forwards every request to `upstream`.
    pub fn start(upstream: SocketAddr) -> HttpProxy {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind the proxy");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("the proxy's address");
        let state = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, stop) = (Arc::clone(&state), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((client, _)) => {
                            let state = Arc::clone(&state);
                            std::thread::spawn(move || {
                                let _ = forward(client, upstream, &state);
                            });
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(2)),
                    }
                }
            })
        };
        HttpProxy {
            addr,
            state,
            stop,
            thread: Some(thread),
        }
    }

    /// The base URL to give an index as the master's HTTP side.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Holds every `/get_all_keys` answer from now on (`true`), or releases the held ones and
    /// stops holding (`false`).
    pub fn hold_snapshots(&self, hold: bool) {
        let (lock, wake) = &*self.state;
        lock.lock().expect("proxy state").hold = hold;
        wake.notify_all();
    }

    /// How many `/get_all_keys` answers the master has given through the proxy (held or not).
    pub fn snapshots_fetched(&self) -> u64 {
        self.state.0.lock().expect("proxy state").fetched
    }

    /// The key lists of those answers, in order.
    pub fn snapshots(&self) -> Vec<Vec<String>> {
        self.state.0.lock().expect("proxy state").snapshots.clone()
    }
}

impl Drop for HttpProxy {
    fn drop(&mut self) {
        self.hold_snapshots(false);
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves one client: reads its request head, asks upstream for the same target, reads the
/// whole answer and passes it back with its status (after the hold, for a key list).
fn forward(
    mut client: TcpStream,
    upstream: SocketAddr,
    state: &(Mutex<State>, Condvar),
) -> std::io::Result<()> {
    let timeout = Duration::from_secs(30);
    client.set_nonblocking(false)?;
    client.set_read_timeout(Some(timeout))?;
    let mut request = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    let target = loop {
        let n = client.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        request.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut head = httparse::Request::new(&mut headers);
        match head.parse(&request) {
            Ok(httparse::Status::Complete(_)) => break head.path.unwrap_or("/").to_owned(),
            Ok(httparse::Status::Partial) => {}
            Err(e) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        }
    };
    let is_key_list = target.starts_with("/get_all_keys");
    let (status, body) =
        crate::http::get(upstream, &target, timeout).map_err(std::io::Error::other)?;
    if is_key_list {
        let keys = String::from_utf8_lossy(&body)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect();
        let (lock, wake) = state;
        let mut s = lock.lock().expect("proxy state");
        s.fetched += 1;
        s.snapshots.push(keys);
        wake.notify_all();
        while s.hold {
            s = wake.wait(s).expect("proxy state");
        }
    }
    let head = format!(
        "HTTP/1.1 {status} Proxied\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes())?;
    client.write_all(&body)?;
    Ok(())
}
