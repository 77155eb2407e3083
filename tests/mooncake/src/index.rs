//! The index under test, run three ways behind one small interface, so that every scenario
//! runs through each of them:
//!
//! - [`Via::Core`]: the core's `Session` on the synchronous test driver ([`crate::driver`]);
//! - [`Via::Tokio`]: the library as a router embeds it, `hicache_index_tokio::Subscriber` on a
//!   tokio runtime, asked through its `QueryHandle`;
//! - [`Via::Serve`]: the `hicache-index serve` binary as a separate process, asked over HTTP
//!   (`POST /v1/query`, `GET /metrics`), one process per layout (the binary serves one).
//!
//! Counters are read by name ([`Counts`]): from `Counters::fields()` in process, from the
//! Prometheus text of `/metrics` for the binary.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hicache_index::{Config, Health, Lookup, PageHash, ResyncConfig, VerifyConfig};
use hicache_index_tokio::{QueryHandle, Subscriber, SubscriberConfig, SubscriberTask};
use serde_json::{json, Value};

use crate::driver::IndexDriver;
use crate::process::{Guarded, Master, Venvs};
use crate::{config, http, TestLayout};

/// The environment variable that may name the `hicache-index` binary (default: next to the test
/// executable's folder, where `cargo build -p hicache-index-app --bin hicache-index` puts it).
pub const BIN_VAR: &str = "HICACHE_INDEX_BIN";

/// How a scenario runs the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// The core session on the synchronous test driver.
    Core,
    /// The tokio library (`Subscriber` + `QueryHandle`).
    Tokio,
    /// The `hicache-index serve` binary over HTTP.
    Serve,
}

/// What an index under test turns on besides live ingest.
#[derive(Clone, Debug, Default)]
pub struct Setup {
    /// Bootstrap and resync from the master's key list.
    pub resync: bool,
    /// Verify present keys every this often.
    pub verify: Option<Duration>,
    /// The master's HTTP side as the index sees it (default: the master itself; a
    /// [`crate::proxy::HttpProxy`] to hold snapshots).
    pub master_http: Option<SocketAddr>,
    /// [`Via::Serve`] runs one `serve` for every layout (`--layout MODEL=FILE` each, asked by
    /// the layout's lookup model) instead of one process per layout.
    pub one_serve: bool,
}

/// Every counter and gauge of an index, by the core's names (`gaps`, `objects`, ...).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts(pub BTreeMap<String, u64>);

impl std::ops::Index<&str> for Counts {
    type Output = u64;

    fn index(&self, name: &str) -> &u64 {
        self.0
            .get(name)
            .unwrap_or_else(|| panic!("no counter named {name:?} in {:?}", self.0))
    }
}

impl Counts {
    fn from_counters(c: &hicache_index::Counters) -> Counts {
        Counts(
            c.fields()
                .iter()
                .map(|(name, value, _)| ((*name).to_owned(), *value))
                .collect(),
        )
    }

    /// Reads `hicache_index_{name}[_total] {value}` lines of a Prometheus text.
    fn from_prometheus(text: &str) -> Counts {
        let mut out = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("hicache_index_") else {
                continue;
            };
            let Some((name, value)) = rest.split_once(' ') else {
                continue;
            };
            if name.contains('{') {
                continue;
            }
            // Gauges in seconds are the core's `_ms` figures (issue 29: base units).
            if let Some(stem) = name.strip_suffix("_seconds") {
                if let Ok(seconds) = value.trim().parse::<f64>() {
                    out.insert(format!("{stem}_ms"), (seconds * 1000.0).round() as u64);
                }
                continue;
            }
            let Ok(value) = value.trim().parse::<u64>() else {
                continue;
            };
            let name = name.strip_suffix("_total").unwrap_or(name);
            out.insert(name.to_owned(), value);
        }
        Counts(out)
    }
}

/// One answer, whichever way it was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// Leading pages fully present.
    pub prefix_pages: usize,
    /// Full pages in the request.
    pub total_pages: usize,
    /// Whether each page is fully present.
    pub pages: Vec<bool>,
    /// Of the prefix pages, those seen with a memory replica.
    pub memory_pages: usize,
    /// The index's health when it answered.
    pub trust: Health,
}

/// The tokio library on its own runtime.
struct TokioIndex {
    runtime: tokio::runtime::Runtime,
    handle: QueryHandle,
    task: Option<SubscriberTask>,
}

impl Drop for TokioIndex {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            self.runtime.block_on(task.shutdown());
        }
    }
}

/// One `hicache-index serve` process and a layout it serves.
struct ServeProcess {
    layout: TestLayout,
    addr: SocketAddr,
    /// Requests name the layout's lookup model (the process serves several models by name).
    by_name: bool,
    _process: std::sync::Arc<Guarded>,
}

enum Inner {
    Core(Box<IndexDriver>),
    Tokio(TokioIndex),
    Serve(Vec<ServeProcess>),
}

/// An index under test (see the module docs).
pub struct IndexUnderTest {
    via: Via,
    inner: Inner,
}

impl std::fmt::Debug for IndexUnderTest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexUnderTest")
            .field("via", &self.via)
            .finish_non_exhaustive()
    }
}

impl IndexUnderTest {
    /// Starts an index of `layouts` on `master`'s events, run `via` one of the three ways.
    pub fn start(
        via: Via,
        venvs: &Venvs,
        master: &Master,
        layouts: &[&TestLayout],
        setup: &Setup,
    ) -> IndexUnderTest {
        let http_addr = setup.master_http.unwrap_or_else(|| master.http_addr());
        let inner = match via {
            Via::Core => Inner::Core(Box::new(IndexDriver::new(
                core_config(master, layouts, setup),
                http_addr,
            ))),
            Via::Tokio => {
                let mut config = SubscriberConfig::new(core_config(master, layouts, setup));
                if setup.resync || setup.verify.is_some() {
                    config.master_http = Some(format!("http://{http_addr}"));
                }
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .expect("a tokio runtime");
                let (handle, task) = {
                    let _in = runtime.enter();
                    Subscriber::spawn(config).expect("the subscriber starts")
                };
                Inner::Tokio(TokioIndex {
                    runtime,
                    handle,
                    task: Some(task),
                })
            }
            Via::Serve if setup.one_serve => {
                Inner::Serve(spawn_one_serve(venvs, master, layouts, setup, http_addr))
            }
            Via::Serve => Inner::Serve(
                layouts
                    .iter()
                    .map(|l| spawn_serve(venvs, master, l, setup, http_addr))
                    .collect(),
            ),
        };
        IndexUnderTest { via, inner }
    }

    /// How this index runs.
    pub fn via(&self) -> Via {
        self.via
    }

    /// The core driver, when the index runs on it (for checks only it can make).
    pub fn driver(&self) -> Option<&IndexDriver> {
        match &self.inner {
            Inner::Core(d) => Some(d),
            _ => None,
        }
    }

    /// The core driver, mutably (to change how it drives).
    pub fn driver_mut(&mut self) -> Option<&mut IndexDriver> {
        match &mut self.inner {
            Inner::Core(d) => Some(d),
            _ => None,
        }
    }

    /// Lets the index work for up to `max_wait`: steps the core driver; the others run on
    /// their own threads or processes.
    pub fn pump(&mut self, max_wait: Duration) {
        if let Inner::Core(d) = &mut self.inner {
            d.step(max_wait);
        }
    }

    /// Every counter and gauge; with several `serve` processes, those of the first.
    pub fn counters(&self) -> Counts {
        self.each_counters().swap_remove(0)
    }

    /// Every counter and gauge of each process (one entry unless `serve` runs several).
    pub fn each_counters(&self) -> Vec<Counts> {
        match &self.inner {
            Inner::Core(d) => vec![Counts::from_counters(&d.session().status(d.now()).counters)],
            Inner::Tokio(t) => vec![Counts::from_counters(&t.handle.counters())],
            Inner::Serve(ps) => ps
                .iter()
                .map(|p| Counts::from_prometheus(&p.metrics()))
                .collect(),
        }
    }

    /// The health; with several `serve` processes, the first that is not live (else live).
    pub fn health(&self) -> Health {
        match &self.inner {
            Inner::Core(d) => d.session().status(d.now()).health,
            Inner::Tokio(t) => t.handle.health(),
            Inner::Serve(ps) => ps
                .iter()
                .map(ServeProcess::health)
                .find(|h| *h != Health::Live)
                .unwrap_or(Health::Live),
        }
    }

    /// Asks about `tokens` under `layout`.
    pub fn ask(&self, layout: &TestLayout, tokens: &[u32]) -> Answer {
        match &self.inner {
            Inner::Serve(ps) => {
                let p = serve_for(ps, layout);
                // The whole map, to hold against the in-process answers' (issue 29: by default
                // the map ends at the first miss).
                p.ask(json!({ "tokens": tokens, "model": p.model(layout), "page_map": true }))
            }
            _ => self.ask_in_process(layout, &layout.lookup(tokens), tokens.len()),
        }
    }

    /// Whether page `hash` of `layout` is fully present (a one-page lookup).
    pub fn is_hit(&self, layout: &TestLayout, hash: &PageHash) -> bool {
        let answer = match &self.inner {
            Inner::Serve(ps) => {
                let p = serve_for(ps, layout);
                p.ask(json!({ "page_hashes": [hash.to_string()], "model": p.model(layout) }))
            }
            _ => {
                let hashes = [*hash];
                let mut lookup = Lookup::page_hashes(&hashes);
                if let Some(m) = &layout.lookup_model {
                    lookup = lookup.with_model(m);
                }
                self.ask_in_process(layout, &lookup, layout.core.page_size as usize)
            }
        };
        answer.prefix_pages == 1
    }

    /// Asks about the pages `hashes` of `layout` at once, each probed (`page_map`): one request
    /// over HTTP for [`Via::Serve`] however unrelated the pages (at most `serve`'s
    /// `--max-page-hashes`, 16,384).
    pub fn ask_pages(&self, layout: &TestLayout, hashes: &[PageHash]) -> Answer {
        match &self.inner {
            Inner::Serve(ps) => {
                let p = serve_for(ps, layout);
                let hashes: Vec<String> = hashes.iter().map(ToString::to_string).collect();
                p.ask(json!({
                    "page_hashes": hashes,
                    "model": p.model(layout),
                    "page_map": true,
                }))
            }
            _ => {
                let mut lookup = Lookup::page_hashes(hashes);
                if let Some(m) = &layout.lookup_model {
                    lookup = lookup.with_model(m);
                }
                self.ask_in_process(
                    layout,
                    &lookup,
                    hashes.len() * layout.core.page_size as usize,
                )
            }
        }
    }

    /// How many leading pages of `tokens` are fully present.
    pub fn prefix(&self, layout: &TestLayout, tokens: &[u32]) -> usize {
        self.ask(layout, tokens).prefix_pages
    }

    fn ask_in_process(&self, layout: &TestLayout, lookup: &Lookup<'_>, tokens: usize) -> Answer {
        let mut map = vec![false; tokens / layout.core.page_size.max(1) as usize + 1];
        let hits = match &self.inner {
            Inner::Core(d) => d.session().query_map(lookup, &mut map),
            Inner::Tokio(t) => t.handle.query_map(lookup, &mut map),
            Inner::Serve(_) => unreachable!("asked over HTTP"),
        }
        .expect("a known layout");
        map.truncate(hits.total_pages);
        Answer {
            prefix_pages: hits.prefix_pages,
            total_pages: hits.total_pages,
            pages: map,
            memory_pages: hits.memory_pages,
            trust: hits.trust,
        }
    }
}

/// The session configuration of a scenario (quick reconnects as in [`config`]).
fn core_config(master: &Master, layouts: &[&TestLayout], setup: &Setup) -> Config {
    Config {
        resync: setup.resync.then(ResyncConfig::default),
        verify: setup.verify.map(|interval| VerifyConfig {
            interval,
            ..VerifyConfig::default()
        }),
        ..config(master, layouts)
    }
}

/// The `hicache-index` binary (see [`BIN_VAR`]).
pub(crate) fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os(BIN_VAR) {
        return PathBuf::from(path);
    }
    // target/<profile>/deps/<test> -> target/<profile>/hicache-index
    let exe = std::env::current_exe().expect("the test executable");
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("hicache-index"))
        .expect("a target folder");
    assert!(
        path.exists(),
        "{} is missing: build it first (`cargo build -p hicache-index-app --bin \
         hicache-index`, as .ci/mooncake-run does) or name it in {BIN_VAR}",
        path.display()
    );
    path
}

fn spawn_serve(
    venvs: &Venvs,
    master: &Master,
    layout: &TestLayout,
    setup: &Setup,
    http_addr: SocketAddr,
) -> ServeProcess {
    let mut cmd = Command::new(binary());
    cmd.arg("serve")
        .args(["--page-size", &layout.py.page_size.to_string()])
        .args(["--tp", &layout.py.tp.to_string()]);
    if layout.py.mla {
        cmd.arg("--mla");
    }
    if let Some(model) = &layout.py.model {
        cmd.args(["--model", model]);
    }
    serve_args(&mut cmd, master, setup, http_addr);
    let (process, addr) = wait_listening(venvs, cmd, "serve");
    ServeProcess {
        layout: layout.clone(),
        addr,
        by_name: false,
        _process: std::sync::Arc::new(process),
    }
}

/// Starts one `serve` for every layout, each from its layout document (`--layout MODEL=FILE`,
/// the file written beside the logs); every layout MUST have a lookup model.
fn spawn_one_serve(
    venvs: &Venvs,
    master: &Master,
    layouts: &[&TestLayout],
    setup: &Setup,
    http_addr: SocketAddr,
) -> Vec<ServeProcess> {
    let mut cmd = Command::new(binary());
    cmd.arg("serve");
    for layout in layouts {
        let model = layout
            .lookup_model
            .as_deref()
            .expect("one serve for several layouts asks each by its model");
        let path = venvs.log_file(&format!("layout-{}.json", model.replace('/', "-")));
        std::fs::write(&path, layout_document(&layout.core)).expect("the layout file is written");
        cmd.args(["--layout", &format!("{model}={}", path.display())]);
    }
    serve_args(&mut cmd, master, setup, http_addr);
    let (process, addr) = wait_listening(venvs, cmd, "serve");
    let process = std::sync::Arc::new(process);
    layouts
        .iter()
        .map(|layout| ServeProcess {
            layout: (*layout).clone(),
            addr,
            by_name: true,
            _process: process.clone(),
        })
        .collect()
}

/// SGLang's layout document (`GET /get_hicache_l3_cache_layout`) of `layout`.
fn layout_document(layout: &hicache_index::Layout) -> String {
    let pools: Vec<Value> = layout
        .pools
        .iter()
        .map(|p| match p.hit_policy {
            hicache_index::HitPolicy::AllPages => {
                json!({ "pool": p.name, "suffixes": p.suffixes, "hit_policy": "all_pages" })
            }
            hicache_index::HitPolicy::TrailingPages(w) => json!({
                "pool": p.name, "suffixes": p.suffixes,
                "hit_policy": "trailing_pages", "trailing_pages": w,
            }),
        })
        .collect();
    json!({
        "backend": "mooncake",
        "page_size": layout.page_size,
        "hicache_object_layout": { "key_prefix": layout.key_prefix, "pools": pools },
    })
    .to_string()
}

/// The arguments every `serve` of a scenario takes: the master, the listen address, logging,
/// resync and verification.
fn serve_args(cmd: &mut Command, master: &Master, setup: &Setup, http_addr: SocketAddr) {
    cmd.args(["--events", &master.event_endpoint()])
        .args(["--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null());
    if setup.resync || setup.verify.is_some() {
        cmd.args(["--master-http", &format!("http://{http_addr}")]);
        if !setup.resync {
            cmd.arg("--no-resync");
        }
        match setup.verify {
            Some(interval) => {
                cmd.args(["--verify-interval", &format!("{}ms", interval.as_millis())]);
            }
            None => {
                cmd.arg("--no-verify");
            }
        }
    }
}

/// Starts `hicache-index serve` as `cmd` (logging to the venvs' log file `log_name`) and waits
/// up to 10 s for the address it listens on.
pub(crate) fn wait_listening(venvs: &Venvs, cmd: Command, log_name: &str) -> (Guarded, SocketAddr) {
    let log = venvs.log_file(log_name);
    let mut process = Guarded::spawn(cmd, log.clone()).unwrap_or_else(|e| panic!("{e}"));
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(addr) = text
            .lines()
            .find_map(|l| l.split_once("http listening on http://").map(|(_, a)| a))
            .and_then(|a| a.trim().parse::<SocketAddr>().ok())
        {
            return (process, addr);
        }
        assert!(
            process.is_running(),
            "hicache-index serve exited early\n{}",
            process.log_tail()
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "hicache-index serve did not listen within 10 s\n{}",
            process.log_tail()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn serve_for<'a>(processes: &'a [ServeProcess], layout: &TestLayout) -> &'a ServeProcess {
    processes
        .iter()
        .find(|p| p.layout.core == layout.core && p.layout.lookup_model == layout.lookup_model)
        .expect("a serve process for this layout")
}

impl ServeProcess {
    const TIMEOUT: Duration = Duration::from_secs(10);

    /// The model a request for `layout` names.
    fn model<'l>(&self, layout: &'l TestLayout) -> Option<&'l str> {
        match self.by_name {
            true => layout.lookup_model.as_deref(),
            false => layout.py.model.as_deref(),
        }
    }

    fn metrics(&self) -> String {
        http::get_ok(self.addr, "/metrics", Self::TIMEOUT).unwrap_or_else(|e| panic!("{e}"))
    }

    fn health(&self) -> Health {
        let text = self.metrics();
        Health::ALL
            .into_iter()
            .find(|h| {
                text.contains(&format!(
                    "hicache_index_health{{state=\"{}\"}} 1",
                    h.as_str()
                ))
            })
            .unwrap_or_else(|| panic!("no health state in /metrics:\n{text}"))
    }

    fn ask(&self, request: Value) -> Answer {
        let (status, body) =
            http::post_json(self.addr, "/v1/query", &request.to_string(), Self::TIMEOUT)
                .unwrap_or_else(|e| panic!("{e}"));
        let doc: Value = serde_json::from_slice(&body).expect("a JSON answer");
        assert_eq!(status, 200, "POST /v1/query {request}: {doc}");
        let n = |f: &str| doc[f].as_u64().unwrap_or_else(|| panic!("{f} in {doc}")) as usize;
        let trust = doc["trust"].as_str().unwrap_or_default();
        Answer {
            prefix_pages: n("prefix_pages"),
            total_pages: n("total_pages"),
            pages: doc["pages"]
                .as_array()
                .map(|a| a.iter().map(|b| b.as_bool() == Some(true)).collect())
                .unwrap_or_default(),
            memory_pages: n("memory_pages"),
            trust: Health::ALL
                .into_iter()
                .find(|h| h.as_str() == trust)
                .unwrap_or_else(|| panic!("unknown trust {trust:?}")),
        }
    }
}
