//! HA leader discovery: the Mooncake master view key in etcd, watched, and polled while the watch
//! fails.
//!
//! The watcher runs on a thread of its own with a current-thread tokio runtime (the etcd client
//! is tokio-based; the smol driver uses it too). It only reads: every value of
//! `mooncake-store/<cluster_id>/master_view` it sees, with the key's create revision as the
//! view's version, goes to the loop as [`crate::Inbox::LeaderView`], and the core decides what
//! it means ([`hicache_index::leader`]).
//! ```text
//! connect -> GET key (value, create revision, header revision) -> LeaderView
//!         -> WATCH key from revision + 1 -> PUT: LeaderView / DELETE: Absent -> ...
//! any error: wait poll_interval, then GET again (a poll) and try to watch again
//! ```
//! It stops once the loop is gone (the inbox is closed).

use std::fmt;
use std::time::Duration;

#[cfg(feature = "etcd")]
use etcd_client::{Client, ConnectOptions, EventType, WatchOptions};
use hicache_index::leader::{master_view_key, parse_locator, DEFAULT_CLUSTER_ID};
#[cfg(feature = "etcd")]
use hicache_index::LeaderView;

use crate::handle::Control;

/// Where a Mooncake HA cluster's leader is named: its etcd endpoints and cluster id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HaLocator {
    /// The etcd endpoints (`host:port`).
    pub endpoints: Vec<String>,
    /// The Mooncake cluster id (`MC_STORE_CLUSTER_ID`; default `mooncake_cluster`).
    pub cluster_id: String,
    /// How long to wait before reading the key again after an etcd error (the fallback poll).
    pub poll_interval: Duration,
    /// Time allowed for connecting and for one etcd request.
    pub request_timeout: Duration,
}

/// Why an HA locator was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocatorError(pub String);

impl fmt::Display for LocatorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "HA locator {:?} is not etcd://host:port[;host:port...]",
            self.0
        )
    }
}

impl std::error::Error for LocatorError {}

impl HaLocator {
    /// Parses `etcd://host:port[;host:port...]` (Mooncake's own form) with a cluster id
    /// (`None`: `mooncake_cluster`).
    pub fn parse(locator: &str, cluster_id: Option<&str>) -> Result<HaLocator, LocatorError> {
        let endpoints = parse_locator(locator).ok_or_else(|| LocatorError(locator.into()))?;
        Ok(HaLocator {
            endpoints,
            cluster_id: cluster_id.unwrap_or(DEFAULT_CLUSTER_ID).into(),
            poll_interval: Duration::from_millis(500),
            request_timeout: Duration::from_secs(2),
        })
    }

    /// Returns the etcd key that names the leader.
    pub fn key(&self) -> String {
        master_view_key(&self.cluster_id)
    }
}

/// Refuses to follow an HA cluster: this build has no etcd client (the `etcd` feature, whose
/// build needs `protoc`).
#[cfg(not(feature = "etcd"))]
pub(crate) fn spawn(_: HaLocator, _: Control) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "built without the `etcd` feature (it needs protoc): rebuild with --features etcd (the binary: --features ha)",
    ))
}

#[cfg(feature = "etcd")]
/// Starts the watcher's thread; it hands every value it reads to `control` until the loop is
/// gone.
pub(crate) fn spawn(locator: HaLocator, control: Control) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("hicache-index-etcd".into())
        .spawn(move || runtime.block_on(run(locator, control)))?;
    Ok(())
}

#[cfg(feature = "etcd")]
/// Reads the key, then watches it; after any error waits and reads it again (a poll).
async fn run(locator: HaLocator, control: Control) {
    let key = locator.key();
    tracing::info!(endpoints = ?locator.endpoints, key, "following the HA leader through etcd");
    while !control.is_closed() {
        if let Err(error) = follow(&locator, &key, &control).await {
            tracing::warn!(%error, "etcd: watching the master view failed; polling");
        }
        if control.is_closed() {
            break;
        }
        tokio::time::sleep(locator.poll_interval).await;
    }
    tracing::debug!("etcd watcher stopped");
}

#[cfg(feature = "etcd")]
/// One connection: a read of the key, then its watch until it ends or fails.
async fn follow(
    locator: &HaLocator,
    key: &str,
    control: &Control,
) -> Result<(), etcd_client::Error> {
    let options = ConnectOptions::new()
        .with_connect_timeout(locator.request_timeout)
        .with_timeout(locator.request_timeout)
        .with_keep_alive(Duration::from_secs(2), locator.request_timeout);
    let mut client = Client::connect(&locator.endpoints, Some(options)).await?;
    let got = client.get(key, None).await?;
    let view = match got.kvs().first() {
        Some(kv) => view_of(Some(kv.value()), kv.create_revision()),
        None => LeaderView::Absent,
    };
    if !control.report_leader_view(view) {
        return Ok(());
    }
    let revision = got.header().map_or(0, |h| h.revision());
    let watch = WatchOptions::new().with_start_revision(revision + 1);
    // The watch outlives the per-request timeout: it is a stream, not one request.
    let mut stream = client.watch(key, Some(watch)).await?;
    loop {
        let message = tokio::select! {
            m = stream.message() => m?,
            () = tokio::time::sleep(locator.poll_interval) => {
                if control.is_closed() {
                    return Ok(());
                }
                continue;
            }
        };
        let Some(response) = message else {
            return Err(etcd_client::Error::WatchError("the watch ended".into()));
        };
        if response.canceled() {
            return Err(etcd_client::Error::WatchError(format!(
                "the watch was cancelled: {}",
                response.cancel_reason()
            )));
        }
        for event in response.events() {
            let view = match (event.event_type(), event.kv()) {
                (EventType::Put, Some(kv)) => view_of(Some(kv.value()), kv.create_revision()),
                _ => LeaderView::Absent,
            };
            if !control.report_leader_view(view) {
                return Ok(());
            }
        }
    }
}

#[cfg(feature = "etcd")]
/// Reads a master view value; a create revision below zero (none) is version 0.
fn view_of(value: Option<&[u8]>, create_revision: i64) -> LeaderView {
    let view = LeaderView::from_value(value, u64::try_from(create_revision).unwrap_or(0));
    tracing::debug!(?view, "etcd: master view");
    view
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locators_take_mooncakes_form_and_the_default_cluster_id() {
        let l = HaLocator::parse("etcd://127.0.0.1:2379;127.0.0.2:2379", None).unwrap();
        assert_eq!(l.endpoints, ["127.0.0.1:2379", "127.0.0.2:2379"]);
        assert_eq!(l.key(), "mooncake-store/mooncake_cluster/master_view");
        let l = HaLocator::parse("etcd://10.0.0.1:2379", Some("prod")).unwrap();
        assert_eq!(l.key(), "mooncake-store/prod/master_view");
        assert!(HaLocator::parse("127.0.0.1:2379", None).is_err());
    }
}
