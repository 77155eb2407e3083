//! A program under test run for real: its stdout lines on a channel, killed when dropped, and a
//! plain HTTP/1.1 client for the services it starts (127.0.0.1 only).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a test waits for anything a program should do soon.
pub const PATIENCE: Duration = Duration::from_secs(15);

/// A running program, killed when dropped, whose stdout lines arrive on one channel and its
/// stderr lines (the log) on another (and are copied to the test's stderr).
#[derive(Debug)]
pub struct Running {
    child: Child,
    lines: Receiver<String>,
    logs: Receiver<String>,
    seen: Vec<String>,
    logged: Vec<String>,
}

impl Running {
    /// Starts `bin` with `args`, logging at `warn` (and `serve`'s own lines at `info`).
    pub fn start(bin: &str, args: &[&str]) -> Running {
        Running::start_with(bin, args, &[])
    }

    /// Starts `bin` with `args` and the environment variables `env` (after `RUST_LOG`).
    pub fn start_with(bin: &str, args: &[&str], env: &[(&str, &str)]) -> Running {
        let mut command = Command::new(bin);
        command
            .args(args)
            .env("RUST_LOG", "warn,hicache_index_serve=info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("the binary starts");
        let out = child.stdout.take().expect("piped stdout");
        let err = child.stderr.take().expect("piped stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let (tx, logs) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { return };
                eprintln!("{line}");
                let _ = tx.send(line);
            }
        });
        Running {
            child,
            lines,
            logs,
            seen: Vec::new(),
            logged: Vec::new(),
        }
    }

    /// Waits (up to [`PATIENCE`]) for a stderr (log) line that satisfies `f` and returns it.
    pub fn log_line(&mut self, what: &str, mut f: impl FnMut(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        if let Some(line) = self.logged.iter().find(|l| f(l)) {
            return line.clone();
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.logs.recv_timeout(left) {
                Ok(line) => {
                    self.logged.push(line.clone());
                    if f(&line) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "no log line with {what} within {PATIENCE:?}; saw {:#?}",
                    self.logged
                ),
            }
        }
    }

    /// Returns the log lines that arrived so far (and were not waited for yet, too).
    pub fn logs(&mut self) -> &[String] {
        while let Ok(line) = self.logs.try_recv() {
            self.logged.push(line);
        }
        &self.logged
    }

    /// Returns the process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (e.g. `"HUP"`) to the process.
    pub fn signal(&self, signal: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status();
    }

    /// Returns the exit status if the process ended.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("waitable")
    }

    /// Waits (up to [`PATIENCE`]) for a stdout line that satisfies `f` and returns it.
    pub fn line(&mut self, what: &str, mut f: impl FnMut(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if f(&line) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "no line with {what} within {PATIENCE:?}; saw {:#?}",
                    self.seen
                ),
            }
        }
    }

    /// Waits for a JSON line that satisfies `f`.
    pub fn json(&mut self, what: &str, mut f: impl FnMut(&Value) -> bool) -> Value {
        let line = self.line(what, |l| serde_json::from_str(l).is_ok_and(|v| f(&v)));
        serde_json::from_str(&line).expect("JSON")
    }

    /// Reports whether a line that satisfies `f` arrives within `timeout`.
    pub fn line_within(&mut self, timeout: Duration, mut f: impl FnMut(&str) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.seen.push(line.clone());
            if f(&line) {
                return true;
            }
        }
        false
    }

    /// Waits for the log line `serve` writes when its HTTP side listens; returns the address.
    pub fn http_address(&mut self) -> SocketAddr {
        let line = self.log_line("the HTTP address", |l| {
            l.contains("http listening on http://") || l.contains("http listening on https://")
        });
        // Text or JSON logs: the address runs from the scheme to the first character that is in
        // no address.
        let after = line.split("://").nth(1).unwrap_or("");
        let end = after
            .find(|c: char| !(c.is_ascii_hexdigit() || matches!(c, '.' | ':' | '[' | ']')))
            .unwrap_or(after.len());
        after[..end].parse().expect("an address")
    }

    /// Sends SIGTERM and waits for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("waitable") {
                return status;
            }
            assert!(start.elapsed() < PATIENCE, "no exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `bin serve` against `emulator` (its events and HTTP side) on a free port of
/// 127.0.0.1, with `extra` flags; returns it and its HTTP address.
pub fn serve(
    bin: &str,
    emulator: &hicache_index_emulator::Emulator,
    extra: &[&str],
) -> (Running, SocketAddr) {
    serve_with(bin, emulator, extra, &[])
}

/// Does what [`serve`] does with the environment variables `env`.
pub fn serve_with(
    bin: &str,
    emulator: &hicache_index_emulator::Emulator,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Running, SocketAddr) {
    let (endpoint, base) = (emulator.event_endpoint(), emulator.http_base());
    let mut args = vec![
        "serve",
        "--events",
        &endpoint,
        "--master-http",
        &base,
        "--listen",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    let mut service = Running::start_with(bin, &args, env);
    let addr = service.http_address();
    (service, addr)
}

/// One HTTP/1.1 request over a fresh connection: the status and the body.
pub fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("the service accepts");
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    let _ = stream.write_all(body);
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// Waits (up to [`PATIENCE`]) until `f` holds.
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < PATIENCE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
