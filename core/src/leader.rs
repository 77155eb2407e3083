//! Following the leader of a Mooncake HA cluster: which master the stream comes from, and when a
//! new one may be trusted.
//!
//! In HA mode several masters run and one, elected through etcd, serves; its RPC address is the
//! value of `mooncake-store/<cluster_id>/master_view` (spec section 9). The driver watches that
//! key and hands every value it reads over as [`crate::Input::LeaderView`]; this module decides
//! what the value means.
//!
//! # The rules
//! - **An incarnation is an address with a view version** (the key's etcd create revision: the
//!   key is created anew at every election, so a leader restarted at the same address comes
//!   back with a new one). Any other incarnation than the one followed is a new stream: the
//!   session forgets at once, drops its connection and reconnects to nothing until the new
//!   leader serves. A value of `__mooncake_service_warming__:<n>`, or no key, is no leader.
//! - **A new leader is followed only once it serves**: the session asks the driver to check it
//!   ([`crate::Command::CheckLeader`]: `GET /health`, then `GET /kv_events/status`), and commits
//!   only when `/health` says `serving` for the address discovery named, with a master view
//!   version no older than the candidate's (Mooncake's `view_version` is the key's create
//!   revision) nor than any the session followed, and the status answers. Until then it asks
//!   again every [`LeaderConfig::check_interval`]. Then it points the driver's HTTP side at the
//!   leader ([`crate::Command::UseMaster`]) and connects to its event endpoint (the configured
//!   endpoint with the leader's host); the usual resync from the new leader follows.
//! - **The old leader is fenced**: between seeing a new incarnation and committing to it, every
//!   batch fed is dropped (the old connection's late messages; counted as
//!   [`crate::Counters::fenced_batches`]), check answers of an older request or an older master
//!   view are refused, and every pending fetch or verification is forgotten (their answers are
//!   stale by request number).
//! - A status saying `"enabled":false` is [`crate::Health::EventsDisabled`]: the master was
//!   built without the publisher, and nothing the index could learn would be true.

use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use crate::time::Instant;

/// The value etcd holds while a new leader warms up (followed by `:<n>`).
pub const WARMING_PREFIX: &str = "__mooncake_service_warming__";

/// The default Mooncake cluster id (`MC_STORE_CLUSTER_ID`).
pub const DEFAULT_CLUSTER_ID: &str = "mooncake_cluster";

/// Returns the etcd key that names the leader of `cluster_id`.
pub fn master_view_key(cluster_id: &str) -> String {
    let mut key = String::from("mooncake-store/");
    key.push_str(cluster_id);
    key.push_str("/master_view");
    key
}

/// How the session checks a new leader before following it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderConfig {
    /// Time between checks of a leader that does not serve yet.
    pub check_interval: Duration,
    /// How long the driver may take to answer a check.
    pub check_timeout: Duration,
}

impl Default for LeaderConfig {
    fn default() -> Self {
        LeaderConfig {
            check_interval: Duration::from_millis(250),
            check_timeout: Duration::from_secs(2),
        }
    }
}

/// What leader discovery says: the master view key's value and its version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaderView {
    /// A master leads at `address` (`host:rpc_port`).
    Leader {
        /// The leader's RPC address.
        address: String,
        /// The view's version (the key's etcd create revision).
        version: u64,
    },
    /// A new leader warms up: nobody serves yet.
    Warming {
        /// The view's version.
        version: u64,
    },
    /// No key, or a value that is no address: no leader.
    Absent,
}

impl LeaderView {
    /// Reads a master view value (`None`: the key does not exist) with its version.
    pub fn from_value(value: Option<&[u8]>, version: u64) -> LeaderView {
        let Some(text) = value.and_then(|v| core::str::from_utf8(v).ok()) else {
            return LeaderView::Absent;
        };
        if text.starts_with(WARMING_PREFIX) {
            return LeaderView::Warming { version };
        }
        match host_of(text) {
            Some(_) if !text.bytes().any(|b| b.is_ascii_whitespace()) => LeaderView::Leader {
                address: text.into(),
                version,
            },
            _ => LeaderView::Absent,
        }
    }

    /// Returns the leader's host, if a leader is named.
    pub fn host(&self) -> Option<&str> {
        match self {
            LeaderView::Leader { address, .. } => host_of(address),
            _ => None,
        }
    }
}

/// What `/kv_events/status` said about the publisher.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventsStatus {
    /// `"enabled":true`.
    Enabled,
    /// `"enabled":false`: a build without the publisher.
    Disabled,
    /// `"success":false`: the service plane is not active (a standby, or a leader warming up).
    Inactive,
    /// No answer, or one without either field.
    Unknown,
}

/// What a candidate leader's admin side said: `GET /health`, then `GET /kv_events/status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderStatus {
    /// `/health` said `"ha_state":"serving"` (or, from a master without HA states,
    /// `"role":"leader"` with `"service_ready":true`).
    pub serving: bool,
    /// `/health`'s `leader_address`, when it names one.
    pub leader_address: Option<String>,
    /// `/health`'s `view_version`, when it tells.
    pub view_version: Option<u64>,
    /// What `/kv_events/status` said.
    pub events: EventsStatus,
}

/// Where the session is with the cluster's leader (see [`crate::SessionStatus::leader`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaderInfo {
    /// The leader followed (its RPC address), if one was committed to.
    pub address: Option<String>,
    /// Its view version in discovery.
    pub version: Option<u64>,
    /// Its own `view_version` from `/health`.
    pub master_view_version: Option<u64>,
    /// The leader discovery names and the session checks, not yet serving.
    pub candidate: Option<String>,
    /// The last failover: from the leader change seen to live again.
    pub last_failover: Option<Duration>,
    /// The last failover: from the new leader found serving to live again.
    pub last_failover_after_serving: Option<Duration>,
    /// Leader changes seen.
    pub changes: u64,
}

/// One leader: an address and a view version.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Incarnation {
    address: String,
    version: u64,
}

/// The check of a candidate leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    Idle,
    InFlight { request: u64, deadline: Instant },
    Waiting { retry_at: Instant },
}

/// A failover in progress: when the change was seen and when the new leader was found serving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Failover {
    began: Instant,
    serving: Option<Instant>,
}

/// What a discovery value means for the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ViewStep {
    /// Nothing changes.
    Same,
    /// Another incarnation than the one followed (or awaited): forget and disconnect; a check
    /// of the candidate follows if `request` is set.
    Changed { check: Option<u64> },
}

/// What a check answer means for the session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StatusStep {
    /// Not the check in flight: an answer no longer awaited.
    Unawaited,
    /// Not serving (yet), or refused: checked again later.
    NotYet,
    /// Serving, but its publisher is off.
    Disabled,
    /// Serving: follow it at `host`.
    Follow { host: String },
}

/// The leader-following sub-machine a [`crate::Session`] owns when HA is on.
#[derive(Debug)]
pub(crate) struct Leader {
    config: LeaderConfig,
    followed: Option<Incarnation>,
    candidate: Option<Incarnation>,
    /// The highest `/health` view version followed: older answers are an old leader's.
    master_view: Option<u64>,
    check: Check,
    next_request: u64,
    failover: Option<Failover>,
    last_failover: Option<(Duration, Option<Duration>)>,
    changes: u64,
}

impl Leader {
    /// Makes the machine with no leader known.
    pub(crate) fn new(config: LeaderConfig) -> Leader {
        Leader {
            config,
            followed: None,
            candidate: None,
            master_view: None,
            check: Check::Idle,
            next_request: 1,
            failover: None,
            last_failover: None,
            changes: 0,
        }
    }

    /// Reports whether the session follows a committed leader (batches are its stream).
    pub(crate) fn is_following(&self) -> bool {
        self.followed.is_some()
    }

    /// Takes a discovery value in.
    pub(crate) fn handle_view(&mut self, now: Instant, view: &LeaderView) -> ViewStep {
        let seen = match view {
            LeaderView::Leader { address, version } => Some(Incarnation {
                address: address.clone(),
                version: *version,
            }),
            LeaderView::Warming { .. } | LeaderView::Absent => None,
        };
        let current = self.candidate.as_ref().or(self.followed.as_ref());
        if seen.is_some() && seen.as_ref() == current {
            return ViewStep::Same;
        }
        if seen.is_none() && current.is_none() {
            return ViewStep::Same;
        }
        if self.followed.is_some() || self.candidate.is_some() {
            self.changes += 1;
        }
        if self.followed.is_some() || self.failover.is_none() {
            self.failover = Some(Failover {
                began: now,
                serving: None,
            });
        }
        self.followed = None;
        self.candidate = seen;
        self.check = Check::Idle;
        let check = self.candidate.is_some().then(|| self.start_check(now));
        ViewStep::Changed { check }
    }

    fn start_check(&mut self, now: Instant) -> u64 {
        let request = self.next_request;
        self.next_request += 1;
        self.check = Check::InFlight {
            request,
            deadline: now + self.config.check_timeout,
        };
        request
    }

    /// Returns the candidate's host, for a check.
    pub(crate) fn candidate_host(&self) -> Option<&str> {
        self.candidate.as_ref().and_then(|c| host_of(&c.address))
    }

    /// Takes a check answer in.
    pub(crate) fn handle_status(
        &mut self,
        now: Instant,
        request: u64,
        status: &LeaderStatus,
    ) -> StatusStep {
        match self.check {
            Check::InFlight { request: r, .. } if r == request => {}
            _ => return StatusStep::Unawaited,
        }
        let Some(candidate) = &self.candidate else {
            return StatusStep::Unawaited;
        };
        let address_ok = status
            .leader_address
            .as_deref()
            .is_none_or(|a| a == candidate.address);
        // Mooncake's `view_version` is the master view key's create revision (measured on
        // 0.3.14 with etcd): an answer of an older view is the old leader's.
        let view_ok = status
            .view_version
            .is_none_or(|v| v >= candidate.version && self.master_view.is_none_or(|m| v >= m));
        let active = !matches!(status.events, EventsStatus::Inactive);
        if !(status.serving && address_ok && view_ok && active) {
            self.check = Check::Waiting {
                retry_at: now + self.config.check_interval,
            };
            return StatusStep::NotYet;
        }
        if status.events == EventsStatus::Disabled {
            self.check = Check::Waiting {
                retry_at: now + self.config.check_interval,
            };
            return StatusStep::Disabled;
        }
        let host = host_of(&candidate.address)
            .expect("a candidate is a parsed address")
            .into();
        self.followed = self.candidate.take();
        self.master_view = status.view_version.max(self.master_view);
        self.check = Check::Idle;
        if let Some(f) = &mut self.failover {
            f.serving = Some(now);
        }
        StatusStep::Follow { host }
    }

    /// Reports that the session became live: a failover in progress ends.
    pub(crate) fn note_live(&mut self, now: Instant) {
        if !self.is_following() {
            return;
        }
        if self.changes == 0 {
            // The first leader followed: a start, not a failover.
            self.failover = None;
            return;
        }
        if let Some(f) = self.failover.take() {
            self.last_failover = Some((
                now.saturating_duration_since(f.began),
                f.serving.map(|s| now.saturating_duration_since(s)),
            ));
        }
    }

    /// Returns when [`Leader::handle_timeout`] is due.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match self.check {
            Check::Idle => None,
            Check::InFlight { deadline, .. } => Some(deadline),
            Check::Waiting { retry_at } => Some(retry_at),
        }
    }

    /// Returns the request number of a new check when one is due at `now`.
    pub(crate) fn handle_timeout(&mut self, now: Instant) -> Option<u64> {
        match self.check {
            Check::InFlight { deadline, .. } | Check::Waiting { retry_at: deadline }
                if deadline <= now && self.candidate.is_some() =>
            {
                Some(self.start_check(now))
            }
            _ => None,
        }
    }

    /// Describes where the machine is.
    pub(crate) fn info(&self) -> LeaderInfo {
        LeaderInfo {
            address: self.followed.as_ref().map(|f| f.address.clone()),
            version: self.followed.as_ref().map(|f| f.version),
            master_view_version: self.followed.as_ref().and(self.master_view),
            candidate: self.candidate.as_ref().map(|c| c.address.clone()),
            last_failover: self.last_failover.map(|f| f.0),
            last_failover_after_serving: self.last_failover.and_then(|f| f.1),
            changes: self.changes,
        }
    }
}

/// Returns the host of `host:port` (an IPv6 host in brackets loses them), if both are there.
pub fn host_of(address: &str) -> Option<&str> {
    let (host, port) = match address.strip_prefix('[') {
        Some(v6) => {
            let (host, rest) = v6.split_once(']')?;
            (host, rest.strip_prefix(':')?)
        }
        None => address.rsplit_once(':')?,
    };
    (!host.is_empty() && port.parse::<u16>().is_ok()).then_some(host)
}

/// Returns `endpoint` (`scheme://host:port[...]`) with its host replaced by `host`, the port
/// and the rest kept; `None` when it has no host to replace.
pub fn replace_host(endpoint: &str, host: &str) -> Option<String> {
    let (scheme, rest) = endpoint.split_once("://")?;
    let end = rest.find('/').unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let port = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once(']')?.1,
        None => authority.rfind(':').map_or("", |i| &authority[i..]),
    };
    let mut out = String::with_capacity(endpoint.len() + host.len());
    out.push_str(scheme);
    out.push_str("://");
    if host.contains(':') {
        out.push('[');
        out.push_str(host);
        out.push(']');
    } else {
        out.push_str(host);
    }
    out.push_str(port);
    out.push_str(tail);
    Some(out)
}

/// Splits an HA locator `etcd://host:port[;host:port...]` into its etcd endpoints.
pub fn parse_locator(locator: &str) -> Option<Vec<String>> {
    let rest = locator.strip_prefix("etcd://")?;
    let endpoints: Vec<String> = rest
        .split(';')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(String::from)
        .collect();
    (!endpoints.is_empty() && endpoints.iter().all(|e| host_of(e).is_some())).then_some(endpoints)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warming_values_and_missing_keys_name_no_leader() {
        assert_eq!(
            LeaderView::from_value(Some(b"__mooncake_service_warming__:3"), 7),
            LeaderView::Warming { version: 7 }
        );
        assert_eq!(LeaderView::from_value(None, 0), LeaderView::Absent);
        assert_eq!(
            LeaderView::from_value(Some(b"nonsense"), 2),
            LeaderView::Absent
        );
        let v = LeaderView::from_value(Some(b"127.0.0.2:50051"), 9);
        assert_eq!(v.host(), Some("127.0.0.2"));
    }

    #[test]
    fn the_leaders_host_replaces_the_endpoints_host_and_keeps_its_port() {
        assert_eq!(
            replace_host("tcp://127.0.0.1:5557", "127.0.0.2").as_deref(),
            Some("tcp://127.0.0.2:5557")
        );
        assert_eq!(
            replace_host("http://master:9003/base", "10.0.0.5").as_deref(),
            Some("http://10.0.0.5:9003/base")
        );
        assert_eq!(
            replace_host("tcp://[::1]:5557", "fe80::2").as_deref(),
            Some("tcp://[fe80::2]:5557")
        );
        assert_eq!(replace_host("no scheme", "h"), None);
    }

    #[test]
    fn locators_name_one_or_more_etcd_endpoints() {
        assert_eq!(
            parse_locator("etcd://127.0.0.1:2379;10.0.0.2:2379"),
            Some(alloc::vec!["127.0.0.1:2379".into(), "10.0.0.2:2379".into()])
        );
        assert_eq!(parse_locator("etcd://"), None);
        assert_eq!(parse_locator("redis://127.0.0.1:6379"), None);
        assert_eq!(parse_locator("etcd://nohostport"), None);
    }

    #[test]
    fn check_retries_move_the_deadline_forward() {
        let mut l = Leader::new(LeaderConfig::default());
        let view = LeaderView::from_value(Some(b"127.0.0.1:50051"), 1);
        let ViewStep::Changed { check: Some(r) } = l.handle_view(Instant::ZERO, &view) else {
            panic!("a first leader is checked");
        };
        let first = l.poll_timeout().expect("a check in flight has a deadline");
        assert_eq!(l.handle_timeout(Instant::ZERO), None, "early: no-op");
        assert!(l.handle_timeout(first).is_some_and(|n| n != r));
        assert!(l.poll_timeout().expect("again in flight") > first);
    }
}
