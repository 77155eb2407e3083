//! A Mooncake HA cluster on loopback (spec section 9): one etcd (Debian's `etcd-server`) and
//! masters with `--enable_ha=true` on 127.0.0.1, 127.0.0.2, ... sharing one set of ports, and
//! the index following the leader through etcd, as the tokio library or as `serve`.
//!
//! 127.0.0.2 is loopback only once added to `lo` (`.ci/mooncake-run` does, inside its private
//! network namespace). Every process is killed, with its process group, when dropped.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hicache_index::{Config, Health, LeaderConfig, ResyncConfig, VerifyConfig};
use hicache_index_tokio::{HaLocator, QueryHandle, Subscriber, SubscriberConfig, SubscriberTask};
use serde_json::{json, Value};

use crate::http;
use crate::index::{binary, wait_listening};
use crate::process::{free_ports, Guarded, MasterPorts, Venvs};
use crate::TestLayout;

/// A running etcd on 127.0.0.1, killed (and its data removed) on drop.
#[derive(Debug)]
pub struct Etcd {
    venvs: Venvs,
    process: Option<Guarded>,
    port: u16,
    peer_port: u16,
    data: PathBuf,
}

impl Etcd {
    /// Starts etcd on free loopback ports and waits until it answers `/health`.
    pub fn start(venvs: &Venvs) -> Etcd {
        let p = free_ports(2);
        let mut etcd = Etcd {
            venvs: venvs.clone(),
            process: None,
            port: p[0],
            peer_port: p[1],
            data: venvs.log_file("etcd-data"),
        };
        etcd.launch();
        etcd
    }

    /// Kills it (SIGKILL); its data stays for [`Etcd::start_again`].
    pub fn kill(&mut self) {
        drop(self.process.take());
    }

    /// Starts it again on the same ports and data after [`Etcd::kill`].
    pub fn start_again(&mut self) {
        assert!(self.process.is_none(), "kill it first");
        self.launch();
    }

    /// Sets `key` to `value` through etcd's JSON gateway (`POST /v3/kv/put`), as a master
    /// elected by hand.
    pub fn put(&self, key: &str, value: &str) {
        let body = json!({ "key": base64(key.as_bytes()), "value": base64(value.as_bytes()) });
        let (status, answer) = http::post_json(
            self.addr(),
            "/v3/kv/put",
            &body.to_string(),
            Duration::from_secs(5),
        )
        .unwrap_or_else(|e| panic!("etcd put: {e}"));
        assert_eq!(
            status,
            200,
            "etcd put: {}",
            String::from_utf8_lossy(&answer)
        );
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    fn launch(&mut self) {
        let p = [self.port, self.peer_port];
        let (venvs, data) = (&self.venvs, &self.data);
        let mut cmd = Command::new("etcd");
        cmd.arg("--data-dir")
            .arg(data)
            .args([
                "--listen-client-urls",
                &format!("http://127.0.0.1:{}", p[0]),
            ])
            .args([
                "--advertise-client-urls",
                &format!("http://127.0.0.1:{}", p[0]),
            ])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{}", p[1])])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{}", p[1]),
            ])
            .args([
                "--initial-cluster",
                &format!("default=http://127.0.0.1:{}", p[1]),
            ])
            .stdin(Stdio::null());
        let mut process = Guarded::spawn(cmd, venvs.log_file("etcd")).unwrap_or_else(|e| {
            panic!("{e} (is Debian's etcd-server installed? .ci/mooncake-setup installs it)")
        });
        let addr = self.addr();
        let started = Instant::now();
        let started_at = started;
        while !matches!(
            http::get(addr, "/health", Duration::from_secs(1)),
            Ok((200, _))
        ) {
            assert!(
                process.is_running(),
                "etcd exited early\n{}",
                process.log_tail()
            );
            assert!(
                started_at.elapsed() < Duration::from_secs(15),
                "etcd did not answer /health within 15 s\n{}",
                process.log_tail()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.process = Some(process);
    }

    /// `127.0.0.1:{port}`, for `--etcd_endpoints`.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `etcd://127.0.0.1:{port}`, for `--ha-locator`.
    pub fn locator(&self) -> String {
        format!("etcd://{}", self.endpoint())
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        drop(self.process.take());
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

/// Returns one set of free ports for every master of a cluster (each binds its own address).
pub fn cluster_ports() -> MasterPorts {
    let p = free_ports(3);
    MasterPorts {
        rpc: p[0],
        metrics: p[1],
        events: p[2],
    }
}

/// A `mooncake_master --enable_ha=true` on `127.0.0.{n}`, killed on drop.
#[derive(Debug)]
pub struct HaMaster {
    venvs: Venvs,
    host: Ipv4Addr,
    ports: MasterPorts,
    etcd: String,
    process: Option<Guarded>,
}

impl HaMaster {
    /// Starts a master on `127.0.0.{n}` with `ports`, electing through `etcd`, and waits until
    /// it answers `/health` (as leader or standby).
    pub fn start(venvs: &Venvs, n: u8, ports: MasterPorts, etcd: &Etcd) -> HaMaster {
        let mut master = HaMaster {
            venvs: venvs.clone(),
            host: Ipv4Addr::new(127, 0, 0, n),
            ports,
            etcd: etcd.endpoint(),
            process: None,
        };
        master.launch();
        master
    }

    fn launch(&mut self) {
        let (h, p) = (self.host, self.ports);
        let started = Instant::now();
        'spawn: loop {
            let mut cmd = Command::new(&self.venvs.master_bin);
            cmd.arg("--enable_ha=true")
                .arg(format!("--etcd_endpoints={}", self.etcd))
                .arg(format!("--rpc_port={}", p.rpc))
                .arg(format!("--rpc_address={h}"))
                .arg(format!("--metrics_port={}", p.metrics))
                .arg(format!("--metrics_host={h}"))
                .arg("--enable_kv_events=true")
                .arg(format!("--kv_events_bind_endpoint=tcp://{h}:{}", p.events))
                .arg(format!("--kv_events_backend_id=ha-{h}"))
                .env("MC_TCP_BIND_ADDRESS", h.to_string())
                .stdin(Stdio::null());
            let mut process = Guarded::spawn(cmd, self.venvs.log_file(&format!("master-{h}")))
                .unwrap_or_else(|e| panic!("{e}"));
            loop {
                if !process.is_running() {
                    // A port of the previous run may still be held: try again for a while.
                    assert!(
                        started.elapsed() < Duration::from_secs(20),
                        "mooncake_master on {h} exited early (is {h} on lo?)\n{}",
                        process.log_tail()
                    );
                    std::thread::sleep(Duration::from_millis(200));
                    continue 'spawn;
                }
                if let Ok((200, _)) = http::get(self.http_addr(), "/health", Duration::from_secs(1))
                {
                    self.process = Some(process);
                    return;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "mooncake_master on {h} did not answer /health\n{}",
                    process.log_tail()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Kills it (SIGKILL, as a crash).
    pub fn kill(&mut self) {
        drop(self.process.take());
    }

    /// Starts it again on the same address and ports after [`HaMaster::kill`].
    pub fn start_again(&mut self) {
        assert!(self.process.is_none(), "kill it first");
        self.launch();
    }

    /// Its `/health` document (`Null` when it does not answer).
    pub fn health(&self) -> Value {
        match http::get(self.http_addr(), "/health", Duration::from_millis(500)) {
            Ok((200, body)) => serde_json::from_slice(&body).unwrap_or(Value::Null),
            _ => Value::Null,
        }
    }

    /// Whether `/health` says it serves as leader.
    pub fn is_serving(&self) -> bool {
        self.process.is_some() && self.health()["ha_state"] == "serving"
    }

    /// Waits until it serves; returns how long that took.
    pub fn wait_serving(&self, timeout: Duration) -> Duration {
        let started = Instant::now();
        while !self.is_serving() {
            assert!(
                started.elapsed() < timeout,
                "{} did not become the serving leader within {timeout:?}: {}",
                self.host,
                self.health()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        started.elapsed()
    }

    /// `127.0.0.{n}:{rpc}`: its RPC address, the value etcd holds while it leads.
    pub fn rpc_address(&self) -> String {
        format!("{}:{}", self.host, self.ports.rpc)
    }

    /// Its admin HTTP address.
    pub fn http_addr(&self) -> SocketAddr {
        SocketAddr::from((self.host, self.ports.metrics))
    }

    /// Which of `keys` it holds (`/batch_query_keys`); a master that does not answer holds none.
    pub fn holds(&self, keys: &[String]) -> bool {
        self.process.is_some()
            && http::batch_query_keys(self.http_addr(), keys, Duration::from_secs(5))
                .is_ok_and(|found| found.len() == keys.len() && found.iter().all(|(_, ok)| *ok))
    }
}

/// What the index says about the leader and itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaderState {
    /// Its health (`"live"`, ...).
    pub health: String,
    /// The leader it follows.
    pub address: Option<String>,
    /// Its view version.
    pub view_version: Option<u64>,
    /// Leader changes seen.
    pub changes: u64,
    /// The last failover, change seen to live, in ms.
    pub last_failover_ms: Option<u64>,
    /// The last failover, new leader serving to live, in ms.
    pub last_failover_after_serving_ms: Option<u64>,
    /// Batches applied.
    pub batches: u64,
    /// The leader discovery names that the index checks, not yet serving.
    pub candidate: Option<String>,
}

/// The index following the cluster: the tokio library, or a `serve` process over HTTP.
pub struct HaIndex(Inner);

enum Inner {
    /// The library on its own runtime.
    Tokio {
        /// The runtime.
        runtime: tokio::runtime::Runtime,
        /// The query handle.
        handle: QueryHandle,
        /// The subscriber.
        task: Option<SubscriberTask>,
    },
    /// `hicache-index serve --ha-locator ...`.
    Serve {
        /// Where it listens.
        addr: SocketAddr,
        /// The process.
        _process: Guarded,
    },
}

impl std::fmt::Debug for HaIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match &self.0 {
            Inner::Tokio { .. } => "Inner::Tokio",
            Inner::Serve { .. } => "Inner::Serve",
        })
    }
}

impl Drop for HaIndex {
    fn drop(&mut self) {
        if let Inner::Tokio { runtime, task, .. } = &mut self.0 {
            if let Some(task) = task.take() {
                runtime.block_on(task.shutdown());
            }
        }
    }
}

impl HaIndex {
    /// Starts the tokio library following the leader that `etcd` names, with `ports` (any
    /// master's host in the endpoints is replaced by the leader's).
    pub fn tokio(layout: &TestLayout, ports: MasterPorts, etcd: &Etcd) -> HaIndex {
        let session = Config {
            resync: Some(ResyncConfig::default()),
            verify: Some(VerifyConfig {
                interval: Duration::from_secs(1),
                ..VerifyConfig::default()
            }),
            leader: Some(LeaderConfig {
                check_interval: Duration::from_millis(100),
                ..LeaderConfig::default()
            }),
            ..crate::config_for(&format!("tcp://127.0.0.1:{}", ports.events), &[layout])
        };
        let locator = HaLocator::parse(&etcd.locator(), None).expect("a locator");
        let config = SubscriberConfig::new(session)
            .with_master_http(format!("http://127.0.0.1:{}", ports.metrics))
            .with_ha(locator);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let (handle, task) = {
            let _in = runtime.enter();
            Subscriber::spawn(config).expect("the subscriber starts")
        };
        HaIndex(Inner::Tokio {
            runtime,
            handle,
            task: Some(task),
        })
    }

    /// Starts `hicache-index serve --ha-locator` for `layout` (MHA).
    pub fn serve(venvs: &Venvs, layout: &TestLayout, ports: MasterPorts, etcd: &Etcd) -> HaIndex {
        let mut cmd = Command::new(binary());
        cmd.arg("serve")
            .args(["--events", &format!("tcp://127.0.0.1:{}", ports.events)])
            .args([
                "--master-http",
                &format!("http://127.0.0.1:{}", ports.metrics),
            ])
            .args(["--ha-locator", &etcd.locator()])
            .args(["--cluster-id", "mooncake_cluster"])
            .args(["--verify-interval", "1s"])
            .args(["--listen", "127.0.0.1:0"])
            .args(["--page-size", &layout.py.page_size.to_string()])
            .args(["--tp", &layout.py.tp.to_string()])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null());
        let (process, addr) = wait_listening(venvs, cmd, "serve-ha");
        HaIndex(Inner::Serve {
            addr,
            _process: process,
        })
    }

    /// Which way it runs.
    pub fn via(&self) -> &'static str {
        match &self.0 {
            Inner::Tokio { .. } => "tokio",
            Inner::Serve { .. } => "serve",
        }
    }

    /// What it says about the leader and itself.
    pub fn state(&self) -> LeaderState {
        match &self.0 {
            Inner::Tokio { handle, .. } => {
                let leader = handle.status().and_then(|s| s.leader).unwrap_or_default();
                let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
                LeaderState {
                    health: handle.health().as_str().into(),
                    address: leader.address,
                    view_version: leader.version,
                    changes: leader.changes,
                    last_failover_ms: ms(leader.last_failover),
                    last_failover_after_serving_ms: ms(leader.last_failover_after_serving),
                    batches: handle.counters().batches,
                    candidate: leader.candidate,
                }
            }
            Inner::Serve { addr, .. } => {
                let (_, body) = http::get(*addr, "/readyz", Duration::from_secs(5))
                    .unwrap_or_else(|e| panic!("GET /readyz: {e}"));
                let doc: Value = serde_json::from_slice(&body).expect("JSON from /readyz");
                let metrics = http::get_ok(*addr, "/metrics", Duration::from_secs(5))
                    .unwrap_or_else(|e| panic!("GET /metrics: {e}"));
                let batches = metrics
                    .lines()
                    .find_map(|l| l.strip_prefix("hicache_index_batches_total "))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                let l = &doc["leader"];
                LeaderState {
                    health: doc["health"].as_str().unwrap_or_default().into(),
                    address: l["address"].as_str().map(String::from),
                    view_version: l["view_version"].as_u64(),
                    changes: l["changes"].as_u64().unwrap_or(0),
                    last_failover_ms: l["last_failover_ms"].as_u64(),
                    last_failover_after_serving_ms: l["last_failover_after_serving_ms"].as_u64(),
                    batches,
                    candidate: l["candidate"].as_str().map(String::from),
                }
            }
        }
    }

    /// Whether it is live and follows `leader`.
    pub fn is_live_on(&self, leader: &HaMaster) -> bool {
        let s = self.state();
        s.health == Health::Live.as_str() && s.address == Some(leader.rpc_address())
    }

    /// Leading pages of `tokens` it claims under `layout`.
    pub fn prefix(&self, layout: &TestLayout, tokens: &[u32]) -> usize {
        self.ask(layout, tokens).0
    }

    /// Leading pages of `tokens` it claims under `layout`, with the trust (health) the answer
    /// carries: both read at once.
    pub fn ask(&self, layout: &TestLayout, tokens: &[u32]) -> (usize, String) {
        match &self.0 {
            Inner::Tokio { handle, .. } => {
                let hits = handle
                    .query(&layout.lookup(tokens))
                    .expect("a known layout");
                (hits.prefix_pages, hits.trust.as_str().into())
            }
            Inner::Serve { addr, .. } => {
                let request = json!({ "tokens": tokens }).to_string();
                let (status, body) =
                    http::post_json(*addr, "/v1/query", &request, Duration::from_secs(5))
                        .unwrap_or_else(|e| panic!("POST /v1/query: {e}"));
                let doc: Value = serde_json::from_slice(&body).expect("a JSON answer");
                assert_eq!(status, 200, "{doc}");
                (
                    doc["prefix_pages"].as_u64().expect("prefix_pages") as usize,
                    doc["trust"].as_str().unwrap_or_default().into(),
                )
            }
        }
    }

    /// Waits until `done` holds, failing after `timeout` with the index's state; returns how
    /// long it took.
    pub fn wait(
        &self,
        what: &str,
        timeout: Duration,
        mut done: impl FnMut(&HaIndex) -> bool,
    ) -> Duration {
        let started = Instant::now();
        while !done(self) {
            assert!(
                started.elapsed() < timeout,
                "{}: timed out after {timeout:?} waiting for {what}: {:?}",
                self.via(),
                self.state()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        started.elapsed()
    }
}

/// Whether something listens at `addr` (a master's port).
pub fn is_listening(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// Standard base64 with padding (etcd's JSON gateway takes keys and values so).
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, &b| n << 8 | u32::from(b)) << (8 * (3 - chunk.len()));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_pads_like_the_standard() {
        assert_eq!(super::base64(b"mooncake-store"), "bW9vbmNha2Utc3RvcmU=");
        assert_eq!(super::base64(b"ab"), "YWI=");
        assert_eq!(super::base64(b"abc"), "YWJj");
    }
}
