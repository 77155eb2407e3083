//! Tests of hicache-index against a real Mooncake master and a real store client.
//!
//! Run them with `.ci/mooncake-run`: it installs the master
//! (`mooncake-transfer-engine-cuda13==0.3.14`, which has the KV event publisher) and the store
//! client (`mooncake-transfer-engine-non-cuda==0.3.13.post1`) into venvs under
//! `target/mooncake/`, builds the tests, and runs them in a private network namespace with only
//! loopback up. The tests read the venvs' folder from [`process::VENVS_VAR`] and fail with that
//! advice when it is unset.
//!
//! The pieces:
//! - [`process`]: the `mooncake_master` (free loopback ports, ready on `/health`) and the Python
//!   store client driver (`store_client.py`, which computes SGLang HiCache keys on its own), both
//!   killed with their process groups when dropped;
//! - [`http`]: a tiny HTTP/1.1 `GET` for the master's admin side;
//! - [`index`]: the index under test, run three ways (the core on [`driver`], the tokio
//!   library, the `hicache-index serve` binary over HTTP) behind one interface;
//! - [`driver`]: a minimal synchronous driver of the core's `Session`;
//! - [`observer`]: a bystander SUB socket counting what the stream itself showed;
//! - [`ha`]: an HA cluster (etcd and masters on 127.0.0.1, 127.0.0.2 ...) and the index
//!   following its leader;
//! - [`proxy`]: an HTTP proxy in front of the master that can hold back key lists;
//! - this module: layouts described once for both sides, and helpers the scenarios share.

pub mod driver;
pub mod ha;
pub mod http;
pub mod index;
pub mod observer;
pub mod process;
pub mod proxy;

use std::time::Duration;

use hicache_index::{
    BackoffConfig, Config, Layout, Lookup, ModelLayout, Namespace, PageHash, PageHashes,
    SglangParams,
};
use serde_json::json;

use crate::index::IndexUnderTest;
use crate::observer::Observer;
use crate::process::{Master, PyLayout, StoreClient};

/// One SGLang layout, described for the core and for the Python side alike.
#[derive(Clone, Debug)]
pub struct TestLayout {
    /// The served model name a lookup names (`None`: the default layout).
    pub lookup_model: Option<String>,
    /// The core's layout.
    pub core: Layout,
    /// The same layout for the Python key computation.
    pub py: PyLayout,
}

impl TestLayout {
    /// MHA with `tp` ranks; `model` (if any) is both the lookup name and the key prefix.
    pub fn mha(page_size: u32, tp: u32, model: Option<&str>) -> TestLayout {
        let mut params = SglangParams::new(page_size, tp);
        params.model = model.map(String::from);
        TestLayout {
            lookup_model: model.map(String::from),
            core: Layout::from_sglang(&params).expect("a valid MHA layout"),
            py: PyLayout {
                page_size,
                tp,
                mla: false,
                model: model.map(String::from),
            },
        }
    }

    /// MLA (one `__k` object per page) without a key prefix, looked up as `lookup_model`.
    pub fn mla(page_size: u32, lookup_model: &str) -> TestLayout {
        let mut params = SglangParams::new(page_size, 1);
        params.mla = true;
        TestLayout {
            lookup_model: Some(lookup_model.into()),
            core: Layout::from_sglang(&params).expect("a valid MLA layout"),
            py: PyLayout {
                page_size,
                tp: 1,
                mla: true,
                model: None,
            },
        }
    }

    /// The layout as a session configures it.
    pub fn model_layout(&self) -> ModelLayout {
        ModelLayout {
            model: self.lookup_model.clone(),
            layout: self.core.clone(),
        }
    }

    /// A lookup of `tokens` under this layout.
    pub fn lookup<'a>(&'a self, tokens: &'a [u32]) -> Lookup<'a> {
        let l = Lookup::tokens(tokens);
        match &self.lookup_model {
            Some(m) => l.with_model(m),
            None => l,
        }
    }

    /// The page hashes the core computes for `tokens`.
    pub fn page_hashes(&self, tokens: &[u32]) -> Vec<PageHash> {
        PageHashes::new(
            tokens,
            self.core.page_size,
            self.core.eagle,
            Namespace::NONE,
        )
        .collect()
    }

    /// The object keys the core expects for `tokens`, page by page.
    pub fn object_keys(&self, tokens: &[u32]) -> Vec<String> {
        self.page_hashes(tokens)
            .iter()
            .flat_map(|h| self.core.object_keys(h).collect::<Vec<_>>())
            .collect()
    }
}

/// A session config for `master`: its event endpoint, `layouts`, quick reconnects; no resync and
/// no verification (set them per scenario).
pub fn config(master: &Master, layouts: &[&TestLayout]) -> Config {
    config_for(&master.event_endpoint(), layouts)
}

/// A session config for the event `endpoint`: `layouts`, quick reconnects; no resync and no
/// verification.
pub fn config_for(endpoint: &str, layouts: &[&TestLayout]) -> Config {
    Config {
        endpoint: Some(endpoint.into()),
        layouts: layouts.iter().map(|l| l.model_layout()).collect(),
        backoff: BackoffConfig {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(500),
            ..BackoffConfig::default()
        },
        ..Config::default()
    }
}

/// Lets every index work once (the core driver steps for at most 1 ms; the others run on their
/// own, so this only waits 1 ms).
pub fn pump_all(indexes: &mut [&mut IndexUnderTest]) {
    let mut any_core = false;
    for i in indexes.iter_mut() {
        if i.driver().is_some() {
            i.pump(Duration::from_millis(1));
            any_core = true;
        }
    }
    if !any_core {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Lets every index work until `done` holds, failing after `timeout`; returns how long it took.
pub fn run_until(
    indexes: &mut [&mut IndexUnderTest],
    what: &str,
    timeout: Duration,
    mut done: impl FnMut(&[&mut IndexUnderTest]) -> bool,
) -> Duration {
    let started = std::time::Instant::now();
    loop {
        if done(indexes) {
            return started.elapsed();
        }
        if started.elapsed() > timeout {
            let state: Vec<String> = indexes
                .iter()
                .map(|i| {
                    format!(
                        "{:?}: {:?} {:?} http errors {:?}",
                        i.via(),
                        i.health(),
                        i.counters(),
                        i.driver().map(|d| d.http_errors().to_vec())
                    )
                })
                .collect();
            panic!("timed out after {timeout:?} waiting for {what}: {state:#?}");
        }
        pump_all(indexes);
    }
}

/// Lets every index work for `duration`.
pub fn run_for(indexes: &mut [&mut IndexUnderTest], duration: Duration) {
    let until = std::time::Instant::now() + duration;
    while std::time::Instant::now() < until {
        pump_all(indexes);
    }
}

/// Waits until every index's subscription carries events: puts probe keys (`probe-...`, which
/// parse as no page) one at a time until each index has applied one more batch and the
/// observer has received one more message. ZeroMQ drops what a PUB sends before a subscription
/// reaches it, so a connected socket alone proves nothing. Returns how many probes it put.
pub fn wait_subscribed(
    indexes: &mut [&mut IndexUnderTest],
    observer: &Observer,
    client: &mut StoreClient,
) -> u64 {
    static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let started = std::time::Instant::now();
    let before: Vec<u64> = indexes.iter().map(|i| i.counters()["batches"]).collect();
    let seen = observer.messages();
    let mut probes = 0;
    loop {
        probes += 1;
        let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        client.call(json!({"op": "put", "keys": [format!("probe-{}-{n}", std::process::id())]}));
        let round = std::time::Instant::now();
        while round.elapsed() < Duration::from_millis(200) {
            pump_all(indexes);
            if observer.messages() > seen
                && indexes
                    .iter()
                    .zip(&before)
                    .all(|(i, b)| i.counters()["batches"] > *b)
            {
                return probes;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no event reached the subscribers within 20 s"
        );
    }
}

/// Whether `key` is one of the probe keys of [`wait_subscribed`].
pub fn is_probe(key: &str) -> bool {
    key.starts_with("probe-")
}

/// Prints one line of the scenario report (shown with `--nocapture`, as `.ci/mooncake-run`
/// runs the tests).
pub fn report(scenario: &str, text: impl std::fmt::Display) {
    eprintln!("[mooncake] {scenario}: {text}");
}
