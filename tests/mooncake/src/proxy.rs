//! A pass-through HTTP proxy in front of the master's admin side that can hold back its answers
//! to `GET /get_all_keys`.
//!
//! The master reads its key list at once; the proxy receives that answer and keeps it until the
//! test releases it. Meanwhile the index waits for its snapshot, and whatever the store does in
//! between arrives as live batches the index must buffer and replay. This works the same for
//! every way of running the index (core driver, tokio library, `hicache-index serve`), because
//! it is just another HTTP server on loopback.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::http::{find, parse_response};

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

/// Serves one client: reads its request head, sends it upstream, reads the whole answer and
/// passes it back (after the hold, for a key list).
fn forward(
    mut client: TcpStream,
    upstream: SocketAddr,
    state: &(Mutex<State>, Condvar),
) -> std::io::Result<()> {
    let timeout = Some(Duration::from_secs(30));
    client.set_nonblocking(false)?;
    client.set_read_timeout(timeout)?;
    let mut request = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    while find(&request, b"\r\n\r\n").is_none() {
        let n = client.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        request.extend_from_slice(&chunk[..n]);
    }
    let is_key_list = request.starts_with(b"GET /get_all_keys");
    let mut server = TcpStream::connect(upstream)?;
    server.set_read_timeout(timeout)?;
    server.write_all(&request)?;
    let mut answer = Vec::new();
    let body = loop {
        let n = server.read(&mut chunk)?;
        if n > 0 {
            answer.extend_from_slice(&chunk[..n]);
        }
        let parsed = parse_response(&answer, n == 0)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        match parsed {
            Some((_, body)) => break body,
            None if n == 0 => return Ok(()),
            None => {}
        }
    };
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
    client.write_all(&answer)?;
    Ok(())
}
