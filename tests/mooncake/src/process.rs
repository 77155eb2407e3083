//! The real processes: a `mooncake_master` with KV events on free loopback ports, and the Python
//! store client driver (`store_client.py`). Each is killed, with its process group, when its
//! guard drops, whatever happened.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::http;

/// The environment variable naming the folder with the `master` and `client` venvs.
pub const VENVS_VAR: &str = "MOONCAKE_VENVS";

/// How long a master may take to answer `/health` after it starts.
const MASTER_READY_TIMEOUT: Duration = Duration::from_secs(15);

/// Where the installed Mooncake pieces are (made by `.ci/mooncake-setup`).
#[derive(Clone, Debug)]
pub struct Venvs {
    /// `mooncake_master` of mooncake-transfer-engine-cuda13 0.3.14.
    pub master_bin: PathBuf,
    /// The Python of the client venv (mooncake-transfer-engine-non-cuda 0.3.13.post1).
    pub client_python: PathBuf,
    /// The store client driver script.
    pub client_script: PathBuf,
    /// Where process logs go.
    pub logs: PathBuf,
}

impl Venvs {
    /// Reads [`VENVS_VAR`]; panics with how to run these tests when it is unset or incomplete.
    pub fn from_env() -> Venvs {
        let Some(root) = std::env::var_os(VENVS_VAR) else {
            panic!(
                "{VENVS_VAR} is not set: these tests need a real Mooncake master and store \
                 client. Run them with `.ci/mooncake-run` (it installs both and runs the tests \
                 in a private network namespace)."
            );
        };
        let root = PathBuf::from(root);
        let venvs = Venvs {
            master_bin: root.join("master/bin/mooncake_master"),
            client_python: root.join("client/bin/python"),
            client_script: Path::new(env!("CARGO_MANIFEST_DIR")).join("store_client.py"),
            logs: root.join("logs"),
        };
        for p in [
            &venvs.master_bin,
            &venvs.client_python,
            &venvs.client_script,
        ] {
            assert!(
                p.exists(),
                "{} is missing: run `.ci/mooncake-setup` (or `.ci/mooncake-run`)",
                p.display()
            );
        }
        venvs
    }

    /// Makes a fresh log folder for one process.
    pub(crate) fn log_file(&self, name: &str) -> PathBuf {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        std::fs::create_dir_all(&self.logs).expect("create the log folder");
        self.logs
            .join(format!("{}-{}-{name}.log", std::process::id(), n))
    }
}

/// Returns `n` distinct free TCP ports on 127.0.0.1 (bound together, then released).
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local addr").port())
        .collect()
}

/// A child process killed, with its process group, on drop.
#[derive(Debug)]
pub(crate) struct Guarded {
    child: Child,
    log: PathBuf,
}

impl Guarded {
    pub(crate) fn spawn(mut cmd: Command, log: PathBuf) -> Result<Guarded, String> {
        use std::os::unix::process::CommandExt;
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        cmd.stdout(out).stderr(err).process_group(0);
        let child = cmd.spawn().map_err(|e| format!("spawn {cmd:?}: {e}"))?;
        Ok(Guarded { child, log })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running.
    pub(crate) fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills the process group, then the process, and reaps it.
    fn kill(&mut self) {
        if self.is_running() {
            // The child leads its own group (process_group(0)); `kill -- -PGID` ends every
            // process it may have started.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.pid())])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }

    /// The last lines of its log, for error messages.
    pub(crate) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(20);
        format!(
            "--- last lines of {} ---\n{}",
            self.log.display(),
            lines[from..].join("\n")
        )
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How a master is started.
#[derive(Clone, Debug)]
pub struct MasterConfig {
    /// `--kv_events_backend_id`.
    pub backend_id: String,
    /// `--kv_events_queue_capacity`; `None` keeps the master's default (65,536).
    pub queue_capacity: Option<u32>,
    /// More flags, as given (e.g. `--client_active_ttl_sec=2`).
    pub extra_args: Vec<String>,
}

impl MasterConfig {
    /// A master with the default event queue.
    pub fn new(backend_id: &str) -> MasterConfig {
        MasterConfig {
            backend_id: backend_id.into(),
            queue_capacity: None,
            extra_args: Vec::new(),
        }
    }
}

/// The three loopback ports of one master.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MasterPorts {
    /// The RPC port clients connect to.
    pub rpc: u16,
    /// The admin HTTP port (`/health`, `/get_all_keys`, `/kv_events/status` ...).
    pub metrics: u16,
    /// The ZeroMQ PUB port of the KV events.
    pub events: u16,
}

/// A running `mooncake_master`, killed on drop.
#[derive(Debug)]
pub struct Master {
    venvs: Venvs,
    config: MasterConfig,
    ports: MasterPorts,
    process: Option<Guarded>,
}

impl Master {
    /// Starts a master on free loopback ports and waits until it answers `/health`.
    pub fn start(venvs: &Venvs, config: MasterConfig) -> Master {
        let p = free_ports(3);
        let ports = MasterPorts {
            rpc: p[0],
            metrics: p[1],
            events: p[2],
        };
        let mut master = Master {
            venvs: venvs.clone(),
            config,
            ports,
            process: None,
        };
        master.launch().unwrap_or_else(|e| panic!("{e}"));
        master
    }

    fn launch(&mut self) -> Result<(), String> {
        let p = self.ports;
        let mut cmd = Command::new(&self.venvs.master_bin);
        cmd.arg(format!("--rpc_port={}", p.rpc))
            .arg("--rpc_address=127.0.0.1")
            .arg(format!("--metrics_port={}", p.metrics))
            .arg("--metrics_host=127.0.0.1")
            .arg("--enable_kv_events=true")
            .arg(format!(
                "--kv_events_bind_endpoint=tcp://127.0.0.1:{}",
                p.events
            ))
            .arg(format!("--kv_events_backend_id={}", self.config.backend_id))
            .env("MC_TCP_BIND_ADDRESS", "127.0.0.1")
            .stdin(Stdio::null());
        if let Some(cap) = self.config.queue_capacity {
            cmd.arg(format!("--kv_events_queue_capacity={cap}"));
        }
        cmd.args(&self.config.extra_args);
        let mut process = Guarded::spawn(cmd, self.venvs.log_file("master"))?;
        let started = Instant::now();
        loop {
            if !process.is_running() {
                return Err(format!(
                    "mooncake_master exited early\n{}",
                    process.log_tail()
                ));
            }
            if let Ok((200, _)) = http::get(self.http_addr(), "/health", Duration::from_secs(1)) {
                break;
            }
            if started.elapsed() > MASTER_READY_TIMEOUT {
                return Err(format!(
                    "mooncake_master did not answer /health within {MASTER_READY_TIMEOUT:?}\n{}",
                    process.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.process = Some(process);
        Ok(())
    }

    /// Kills the master (SIGKILL, as a crash): its objects are gone, without any event.
    pub fn kill(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill();
        }
    }

    /// Starts a new master on the same ports after [`Master::kill`] (retrying while a port is
    /// still held), waiting until it answers `/health`.
    pub fn start_again(&mut self) {
        assert!(self.process.is_none(), "kill the running master first");
        let started = Instant::now();
        loop {
            match self.launch() {
                Ok(()) => return,
                Err(e) if started.elapsed() > Duration::from_secs(20) => panic!("{e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// `127.0.0.1:{rpc}`, for the store client.
    pub fn rpc_address(&self) -> String {
        format!("127.0.0.1:{}", self.ports.rpc)
    }

    /// The admin HTTP address.
    pub fn http_addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.ports.metrics))
    }

    /// The KV event endpoint, `tcp://127.0.0.1:{events}`.
    pub fn event_endpoint(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.ports.events)
    }

    /// `GET /kv_events/status`.
    pub fn kv_events_status(&self) -> http::KvEventsStatus {
        http::kv_events_status(self.http_addr(), Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// `GET /get_all_keys`.
    pub fn all_keys(&self) -> Vec<String> {
        http::get_all_keys(self.http_addr(), Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// `GET /batch_query_keys`: whether each key exists.
    pub fn query_keys(&self, keys: &[String]) -> Vec<(String, bool)> {
        http::batch_query_keys(self.http_addr(), keys, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

/// An SGLang HiCache layout as the Python side computes its keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyLayout {
    /// Tokens per page.
    pub page_size: u32,
    /// TP size (MHA objects `_{r}_k`, `_{r}_v` per rank).
    pub tp: u32,
    /// MLA: one `__k` object per page.
    pub mla: bool,
    /// Served model name (the key prefix, `/` replaced by `-`).
    pub model: Option<String>,
}

impl PyLayout {
    fn fields(&self) -> Value {
        json!({"page_size": self.page_size, "tp": self.tp, "mla": self.mla, "model": self.model})
    }
}

/// The keys of some pages as the Python side computed them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PyPages {
    /// Page hashes, 64 lowercase hex characters each.
    pub hashes: Vec<String>,
    /// Object keys, page by page.
    pub keys: Vec<String>,
}

/// The Python store client driver, killed on drop.
#[derive(Debug)]
pub struct StoreClient {
    process: Guarded,
    stdin: ChildStdin,
    answers: mpsc::Receiver<String>,
    pending: usize,
}

/// The longest any one command may take.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

impl StoreClient {
    /// Starts the driver (no store yet: see [`StoreClient::setup`]).
    pub fn start(venvs: &Venvs) -> StoreClient {
        let log = venvs.log_file("store-client");
        let stderr = std::fs::File::create(&log).expect("create the client log");
        let mut cmd = Command::new(&venvs.client_python);
        cmd.arg(&venvs.client_script)
            .env("MC_TCP_BIND_ADDRESS", "127.0.0.1")
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr);
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
        let mut child = cmd.spawn().expect("spawn the store client driver");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, answers) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        StoreClient {
            process: Guarded { child, log },
            stdin,
            answers,
            pending: 0,
        }
    }

    /// Starts a driver and connects its store to `master`.
    pub fn connect(venvs: &Venvs, master: &Master) -> StoreClient {
        let mut client = StoreClient::start(venvs);
        client.setup(&master.rpc_address());
        client
    }

    /// The driver's process id (the store client lives in it).
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Sends `signal` (a name `kill -s` takes: `STOP`, `CONT`, `KILL`) to the driver's
    /// process: a stall, a resume, a crash of the store client.
    pub fn signal(&mut self, signal: &str) {
        let status = Command::new("kill")
            .args(["-s", signal, &self.pid().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("kill -s {signal}: {e}"));
        assert!(status.success(), "kill -s {signal} {} failed", self.pid());
    }

    /// Whether the driver's process is still running (not yet reaped).
    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// Sends a command without waiting for its answer.
    pub fn send(&mut self, command: &Value) {
        let mut line = command.to_string();
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .and_then(|()| self.stdin.flush())
            .unwrap_or_else(|e| panic!("store client stdin: {e}\n{}", self.process.log_tail()));
        self.pending += 1;
    }

    /// Returns the next answer if one came (`Err` when the command failed).
    pub fn try_recv(&mut self) -> Option<Result<Value, String>> {
        match self.answers.try_recv() {
            Ok(line) => Some(self.parse(&line)),
            Err(mpsc::TryRecvError::Empty) => None,
            Err(mpsc::TryRecvError::Disconnected) => Some(Err(format!(
                "the store client exited\n{}",
                self.process.log_tail()
            ))),
        }
    }

    /// Waits for the next answer (`Err` when the command failed).
    pub fn recv(&mut self, timeout: Duration) -> Result<Value, String> {
        match self.answers.recv_timeout(timeout) {
            Ok(line) => self.parse(&line),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(format!(
                "the store client did not answer within {timeout:?}\n{}",
                self.process.log_tail()
            )),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(format!(
                "the store client exited\n{}",
                self.process.log_tail()
            )),
        }
    }

    fn parse(&mut self, line: &str) -> Result<Value, String> {
        self.pending = self.pending.saturating_sub(1);
        let v: Value =
            serde_json::from_str(line).map_err(|e| format!("bad answer {line:?}: {e}"))?;
        if v["ok"] == Value::Bool(true) {
            Ok(v)
        } else {
            Err(format!("store client: {}", v["error"]))
        }
    }

    /// Sends a command and waits for its answer; panics when it fails.
    pub fn call(&mut self, command: Value) -> Value {
        self.send(&command);
        self.recv(CLIENT_TIMEOUT)
            .unwrap_or_else(|e| panic!("{command}: {e}"))
    }

    /// Sets up a store connected to the master at `rpc_address`.
    pub fn setup(&mut self, rpc_address: &str) {
        self.call(json!({"op": "setup", "master": rpc_address}));
    }

    /// Puts each key on its own (one event batch each).
    pub fn put(&mut self, keys: &[String]) {
        self.call(json!({"op": "put", "keys": keys}));
    }

    /// Force-removes each key.
    pub fn remove(&mut self, keys: &[String]) {
        self.call(json!({"op": "remove", "keys": keys}));
    }

    /// Closes the store: the master drops its keys without any event.
    pub fn close(&mut self) {
        self.call(json!({"op": "close"}));
    }

    /// Computes the keys of the first `pages` pages and puts them, one put per key.
    pub fn put_pages(
        &mut self,
        tokens: &[u32],
        layout: &PyLayout,
        pages: Option<usize>,
    ) -> PyPages {
        let mut cmd = layout.fields();
        cmd["op"] = json!("put_pages");
        cmd["tokens"] = json!(tokens);
        cmd["pages"] = json!(pages);
        pages_of(&self.call(cmd))
    }

    /// The command that puts every page of every request with `put_batch` calls of `batch`
    /// keys; after each call but the first, it force-removes the first `remove_after_batch`
    /// keys of the previous call. Send it with [`StoreClient::send`]; the answer has `keys`,
    /// `removed` and `seconds`.
    pub fn put_requests_command(
        requests: &[Vec<u32>],
        layout: &PyLayout,
        batch: usize,
        remove_after_batch: usize,
    ) -> Value {
        let mut cmd = layout.fields();
        cmd["op"] = json!("put_requests");
        cmd["requests"] = json!(requests);
        cmd["batch"] = json!(batch);
        cmd["remove_after_batch"] = json!(remove_after_batch);
        cmd
    }
}

impl Drop for StoreClient {
    fn drop(&mut self) {
        if self.process.is_running() && !std::thread::panicking() {
            // Ask nicely first (the driver exits without the native teardown), then kill.
            let _ = self.stdin.write_all(b"{\"op\":\"exit\"}\n");
            let _ = self.stdin.flush();
            let deadline = Instant::now() + Duration::from_secs(2);
            while self.process.is_running() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.process.kill();
    }
}

/// Reads `hashes` and `keys` from an answer.
fn pages_of(answer: &Value) -> PyPages {
    PyPages {
        hashes: strings(&answer["hashes"]),
        keys: strings(&answer["keys"]),
    }
}

/// Reads a list of strings from a JSON answer field.
pub fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}
