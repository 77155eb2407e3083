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

#[cfg(feature = "etcd")]
use std::time::Duration;

#[cfg(feature = "etcd")]
use etcd_client::{Client, ConnectOptions, EventType, WatchOptions};
#[cfg(feature = "etcd")]
use hicache_index::LeaderView;

use crate::config::HaLocator;
use crate::handle::Control;

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
