//! What a subscriber is made from: the core's [`Config`] plus the IO settings a driver needs.

use std::fmt;
use std::time::Duration;

use hicache_index::leader::{master_view_key, parse_locator, DEFAULT_CLUSTER_ID};
use hicache_index::{Config, ConfigError, ResyncConfig, VerifyConfig};

/// Everything a subscriber (tokio or smol) is made from.
#[derive(Clone, Debug)]
pub struct SubscriberConfig {
    /// The session's configuration: endpoint, topic, layouts, limits, resync and verification.
    pub session: Config,
    /// The master's HTTP admin base URL (e.g. `http://10.0.0.5:9003`). It MUST be set when
    /// `session.resync` or `session.verify` is on: they are executed over it.
    pub master_http: Option<String>,
    /// ZeroMQ socket limits.
    pub socket: SocketConfig,
    /// HTTP client limits.
    pub http: HttpConfig,
    /// How often every counter is exported to the `metrics` facade.
    pub metrics_interval: Duration,
    /// The prefix memo's budget in bytes (page digests of repeated prefixes, shared by every
    /// query); 0 turns it off.
    pub prefix_memo_bytes: usize,
    /// Follow a Mooncake HA cluster's leader, named in etcd: the leader's host then replaces
    /// the host of `session.endpoint` and of `master_http` (their ports kept), and the session
    /// follows the leader (`session.leader`, default timing when unset). `None`: one fixed master.
    pub ha: Option<HaLocator>,
}

impl SubscriberConfig {
    /// Wraps a session configuration with the default IO settings and no master HTTP side.
    pub fn new(session: Config) -> SubscriberConfig {
        SubscriberConfig {
            session,
            master_http: None,
            socket: SocketConfig::default(),
            http: HttpConfig::default(),
            metrics_interval: Duration::from_secs(1),
            prefix_memo_bytes: crate::memo::DEFAULT_MEMO_BYTES,
            ha: None,
        }
    }

    /// Follows the leader of the HA cluster `locator` names (see [`SubscriberConfig::ha`]); the
    /// master HTTP URL MUST be set too (its port and path are kept).
    pub fn with_ha(mut self, locator: HaLocator) -> SubscriberConfig {
        self.ha = Some(locator);
        self.session.leader.get_or_insert_with(Default::default);
        self
    }

    /// Sets the master's HTTP base URL and turns on resynchronisation (with the watch of the
    /// master's store signals, [`hicache_index::signals`]) and verification with their
    /// defaults where the session configuration left them off.
    pub fn with_master_http(mut self, url: impl Into<String>) -> SubscriberConfig {
        self.master_http = Some(url.into());
        self.session.resync.get_or_insert_with(|| ResyncConfig {
            store_watch: Some(hicache_index::signals::DEFAULT_STORE_WATCH),
            ..ResyncConfig::default()
        });
        self.session
            .verify
            .get_or_insert_with(VerifyConfig::default);
        self
    }
}

/// Limits of the ZeroMQ SUB socket, so that a runaway publisher cannot exhaust memory.
///
/// The memory libzmq may hold for one subscriber is bounded by about
/// `receive_hwm * max_message_bytes * 3` (three frames a message).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketConfig {
    /// `ZMQ_MAXMSGSIZE`: a larger frame drops the connection (the core then clears and
    /// reconnects). A Mooncake batch of 64 events is about 25 KiB.
    pub max_message_bytes: i64,
    /// `ZMQ_RCVHWM`: messages queued before libzmq drops (a drop shows up as a gap).
    pub receive_hwm: i32,
    /// `ZMQ_HEARTBEAT_IVL`: how often the subscriber pings the publisher (zero: never).
    pub heartbeat_interval: Duration,
    /// `ZMQ_HEARTBEAT_TIMEOUT`: a publisher silent this long after a ping is disconnected.
    pub heartbeat_timeout: Duration,
    /// Messages fed per turn of the driver loop before it looks at timers and answers again.
    pub drain_budget: usize,
}

impl Default for SocketConfig {
    fn default() -> Self {
        SocketConfig {
            max_message_bytes: 1 << 20,
            receive_hwm: 8192,
            heartbeat_interval: Duration::from_secs(5),
            heartbeat_timeout: Duration::from_secs(15),
            drain_budget: 256,
        }
    }
}

/// Limits of the master HTTP client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpConfig {
    /// Time allowed for one request, connect to last byte. It SHOULD be shorter than the core's
    /// fetch and verify timeouts, or answers arrive after the core gave up on them.
    pub request_timeout: Duration,
    /// The largest response body accepted (a `/get_all_keys` of 1M keys is about 100 MB).
    pub max_body_bytes: usize,
    /// The longest request target; `/batch_query_keys` key lists are split to stay under it.
    pub max_target_bytes: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            request_timeout: Duration::from_secs(5),
            max_body_bytes: 512 << 20,
            max_target_bytes: 6000,
        }
    }
}

/// Why a subscriber could not be started.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The session refused its configuration.
    Config(ConfigError),
    /// Resync or verification is on but no master HTTP URL is set.
    MasterHttpRequired,
    /// The master HTTP URL is not `http://host[:port][/path]`.
    MasterHttpUrl(String),
    /// A socket setting is out of range.
    Socket(&'static str),
    /// The etcd watcher could not be started.
    Etcd(String),
    /// The SGLang worker poller could not be started.
    Workers(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(e) => write!(f, "invalid session configuration: {e}"),
            Error::MasterHttpRequired => {
                f.write_str("resync and verification need the master's HTTP URL")
            }
            Error::MasterHttpUrl(url) => {
                write!(
                    f,
                    "master HTTP URL {url:?} is not http://host[:port][/path]"
                )
            }
            Error::Socket(what) => write!(f, "invalid socket setting: {what}"),
            Error::Etcd(e) => write!(f, "starting the etcd watcher failed: {e}"),
            Error::Workers(e) => write!(f, "starting the worker poller failed: {e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Error {
        Error::Config(e)
    }
}

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
