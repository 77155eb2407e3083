//! The index's options as `hicache-index serve` takes them, and what they make.
//!
//! [`IndexArgs`] is the subscriber half of `serve`'s flags (the event endpoint, the master's HTTP
//! side, HA, resync and verification, the layouts, the workers, the index's limits), with their
//! defaults and their checks; [`IndexArgs::plan`] turns them into the driver's
//! [`SubscriberConfig`]. The binary flattens it into `serve`, and the Python package parses the
//! same flags from keyword arguments, so that both start the same subscriber from the same
//! words, defaults and error messages.

pub mod layout_args;

use std::time::Duration;

use clap::Args;
use hicache_index::{Config, IndexConfig, LeaderConfig, ModelLayout, ResyncConfig, VerifyConfig};
use hicache_index_driver::{Control, HaLocator, HttpConfig, SubscriberConfig, WorkerPoller};

pub use layout_args::{parse_side_pool, LayoutArgs};

/// The subscriber's flags: `--events URL [--master-http URL] LAYOUT... [--workers URL,...]`.
#[derive(Args, Clone, Debug)]
pub struct IndexArgs {
    /// The master's KV event endpoint (its --kv_events_bind_endpoint), e.g. tcp://10.0.0.5:5557.
    #[arg(long, value_name = "URL")]
    pub events: String,
    /// The topic subscribed to; the Mooncake master sends an empty one.
    #[arg(long, value_name = "T", default_value = "")]
    pub topic: String,
    /// The master's HTTP admin side (e.g. http://10.0.0.5:9003). Turns on the bootstrap from
    /// its key list at start, resync after loss, and periodic verification.
    #[arg(long, value_name = "URL")]
    pub master_http: Option<String>,
    /// Follow a Mooncake HA cluster's leader, named in etcd (Mooncake's own form, e.g.
    /// etcd://10.0.0.1:2379;10.0.0.2:2379): the leader's host replaces the host of --events and
    /// --master-http, their ports kept. Needs --master-http.
    #[arg(
        long,
        value_name = "etcd://HOST:PORT[;HOST:PORT...]",
        requires = "master_http"
    )]
    pub ha_locator: Option<String>,
    /// The Mooncake cluster id of --ha-locator (the masters' MC_STORE_CLUSTER_ID).
    #[arg(long, value_name = "ID", requires = "ha_locator")]
    pub cluster_id: Option<String>,
    /// Turn the bootstrap and the resync after loss off (loss then only clears).
    #[arg(long, requires = "master_http")]
    pub no_resync: bool,
    /// How long fetching the master's key list may take.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10s")]
    pub resync_timeout: Duration,
    /// How often the master's /metrics is read for its store signals (a client's segment
    /// unmounted, a client suspected, offline or recovered: objects hidden, dropped or brought
    /// back without an event); a change reconciles the index with the key list. 0s: never.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "250ms")]
    pub store_watch_interval: Duration,
    /// Turn the periodic verification against silent removals off.
    #[arg(long, requires = "master_http")]
    pub no_verify: bool,
    /// Time between verification rounds.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "5s")]
    pub verify_interval: Duration,
    /// Keys checked per verification round.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub verify_sample: usize,
    /// The least time between two reconciles for objects verification found gone without an
    /// event (within it, a round removes only the keys it sampled, and the first round once it
    /// has passed reconciles): at most one key-list fetch for them in this time
    /// however often a master drops objects. 0s: every time.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30s")]
    pub verify_escalate_every: Duration,
    /// The layout flags.
    #[command(flatten)]
    pub layout: LayoutArgs,
    /// SGLang workers to learn each model's layout from (repeatable, or comma-separated):
    /// their served model name (GET /v1/models) and layout (GET /get_hicache_l3_cache_layout),
    /// polled every --worker-poll-interval. Layouts given with the flags above win for their
    /// model; workers of one model that disagree make that model answer misses. SGLang 0.5.23
    /// advertises layouts for MLA, DSA and DeepSeek-V4 models only: give MHA models (and DCP
    /// launches) --layout MODEL=FILE or the layout flags with --model. /readyz, /metrics and a
    /// WARN line say per worker what it advertises or why not, and per model whether it is ready.
    #[arg(long, value_name = "URL[,URL...]", value_delimiter = ',')]
    pub workers: Vec<String>,
    /// Time between two polls of the workers (a change is seen within one).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "2s")]
    pub worker_poll_interval: Duration,
    /// How long one request to a worker may take.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "2s")]
    pub worker_timeout: Duration,
    /// The most pages the index holds; a full index evicts the least recently useful.
    #[arg(long, value_name = "N", default_value_t = 1 << 20)]
    pub max_pages: usize,
    /// The prefix memo's budget in bytes: page digests of repeated prefixes, so that a token
    /// query over a known prefix costs no SHA-256 (0 turns it off).
    #[arg(long, value_name = "BYTES", default_value_t = hicache_index_driver::DEFAULT_MEMO_BYTES)]
    pub prefix_memo_bytes: usize,
}

impl IndexArgs {
    /// Checks the flags and everything they name (layout files, URLs) and makes the
    /// subscriber's configuration; the error is one line for a person (a usage error).
    pub fn plan(&self) -> Result<SubscriberConfig, String> {
        self.plan_with_layouts(Vec::new())
    }

    /// Does what [`IndexArgs::plan`] does with `layouts` made by the caller (e.g. from SGLang
    /// documents it holds) instead of the layout flags', when `layouts` is not empty.
    pub fn plan_with_layouts(&self, layouts: Vec<ModelLayout>) -> Result<SubscriberConfig, String> {
        check_endpoint(&self.events)?;
        if self.worker_poll_interval.is_zero() || self.worker_timeout.is_zero() {
            return Err("--worker-poll-interval and --worker-timeout must be positive".into());
        }
        let layouts = if !layouts.is_empty() {
            if self.layout.is_given() {
                return Err("give the layout as flags or as layouts, not both".into());
            }
            layouts
        } else if self.layout.is_given() || self.workers.is_empty() {
            self.layout.to_model_layouts()?
        } else {
            Vec::new()
        };
        let mut session = Config {
            endpoint: Some(self.events.clone()),
            topic: self.topic.clone().into_bytes(),
            layouts,
            index: IndexConfig {
                max_pages: self.max_pages,
                ..IndexConfig::default()
            },
            ..Config::default()
        };
        let mut http = HttpConfig::default();
        if self.master_http.is_some() {
            if !self.no_resync {
                session.resync = Some(ResyncConfig {
                    fetch_timeout: self.resync_timeout,
                    store_watch: Some(self.store_watch_interval)
                        .filter(|interval| !interval.is_zero()),
                    ..ResyncConfig::default()
                });
                http.request_timeout = http.request_timeout.min(self.resync_timeout);
            }
            if !self.no_verify {
                let verify = VerifyConfig {
                    interval: self.verify_interval,
                    sample: self.verify_sample,
                    escalate_every: self.verify_escalate_every,
                    ..VerifyConfig::default()
                };
                http.request_timeout = http.request_timeout.min(verify.timeout);
                session.verify = Some(verify);
            }
            if let Some(url) = &self.master_http {
                hicache_index_driver::MasterHttp::new(url, http).map_err(|e| e.to_string())?;
            }
        }
        let ha = self
            .ha_locator
            .as_deref()
            .map(|l| HaLocator::parse(l, self.cluster_id.as_deref()))
            .transpose()
            .map_err(|e| format!("--ha-locator: {e}"))?;
        if ha.is_some() {
            if cfg!(not(feature = "ha")) {
                return Err(
                    "--ha-locator: this hicache-index was built without HA support (the \
                            `ha` feature, a default one)"
                        .into(),
                );
            }
            session.leader = Some(LeaderConfig::default());
        }
        Ok(SubscriberConfig {
            master_http: self.master_http.clone(),
            http,
            prefix_memo_bytes: self.prefix_memo_bytes,
            ha,
            ..SubscriberConfig::new(session)
        })
    }

    /// Starts polling `--workers` for their models and layouts, reported to the subscriber
    /// `control` steers (`None` without workers). Stopped and joined when dropped.
    pub fn spawn_workers(&self, control: Control) -> Result<Option<WorkerPoller>, String> {
        if self.workers.is_empty() {
            return Ok(None);
        }
        let http = HttpConfig {
            request_timeout: self.worker_timeout,
            max_body_bytes: 4 << 20,
            ..HttpConfig::default()
        };
        WorkerPoller::spawn(
            &self.workers,
            self.worker_poll_interval,
            http,
            self.layout.eagle,
            control,
        )
        .map(Some)
        .map_err(|e| e.to_string())
    }
}

/// Why a subscriber whose master said its publisher is off stops (`serve` exits with it).
pub const EVENTS_DISABLED: &str = "the master's KV event publisher is off (\"enabled\":false in \
     /kv_events/status): it was built without it, and the index would stay empty; run a master \
     with the publisher (e.g. PyPI mooncake-transfer-engine-cuda13 0.3.14)";

/// The optional features of the subscriber built in, comma-separated (`ha` or nothing).
pub fn features() -> Vec<&'static str> {
    let mut on = Vec::new();
    if cfg!(feature = "ha") {
        on.push("ha");
    }
    on
}

/// Renders a clap error as one line: the first paragraph of its message, without `error: `
/// (how the binary and the Python package report a bad flag or keyword).
pub fn clap_message(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let first: Vec<&str> = rendered
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    let line = first.join(" ");
    line.strip_prefix("error: ").unwrap_or(&line).to_owned()
}

/// Parses a duration with `humantime` (`30s`, `250ms`, `2m`, `1h 30m`, ...); a bare number,
/// fractions allowed, is seconds (`1.5`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        // A bare number is seconds (humantime asks for a unit).
        let value: f64 = text
            .parse()
            .map_err(|_| format!("{text:?} is not a duration like 30s, 250ms or 2m"))?;
        return Duration::try_from_secs_f64(value).map_err(|_| format!("{text:?} is out of range"));
    }
    humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration like 30s, 250ms or 2m ({e})"))
}

/// Checks that `url` is a ZeroMQ endpoint a SUB socket can connect to.
pub fn check_endpoint(url: &str) -> Result<(), String> {
    let bad = || format!("--events {url:?} is not tcp://HOST:PORT or ipc://PATH");
    if let Some(rest) = url.strip_prefix("tcp://") {
        let (host, port) = rest.rsplit_once(':').ok_or_else(bad)?;
        if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(bad());
        }
        return Ok(());
    }
    match url.strip_prefix("ipc://") {
        Some(path) if !path.is_empty() => Ok(()),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_and_without_units() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("1e400").is_err());
        assert!(parse_duration("99999999999999999999999h").is_err());
    }
}
