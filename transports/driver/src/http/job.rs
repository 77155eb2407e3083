//! The jobs the core asks for over HTTP ([`HttpJob`]), what they give back ([`HttpOutcome`]), and
//! the parsers of the master's answers.

use hicache_index::{EventsStatus, Seq, StoreSignals, Watermark};

use super::error::HttpError;
use super::master::MasterHttp;

/// Work the core asked for over HTTP, run on a thread of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpJob {
    /// `GET /get_all_keys` for the fetch `request`.
    Snapshot {
        /// The core's request number.
        request: u64,
    },
    /// `GET /kv_events/status` for the status check `request`.
    Status {
        /// The core's request number.
        request: u64,
    },
    /// `GET /metrics` for the signals read `request`.
    Signals {
        /// The core's request number.
        request: u64,
    },
    /// `GET /batch_query_keys` for the verification `request`.
    Verify {
        /// The core's request number.
        request: u64,
        /// The keys to check.
        keys: Vec<String>,
    },
}

/// What an [`HttpJob`] found, handed back to the driver loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpOutcome {
    /// The watermark and the key list (one key per line), or why the list could not be had.
    Snapshot {
        /// The core's request number.
        request: u64,
        /// Where the master's stream stood before the list was read (`/kv_events/status`);
        /// `None` when the master did not tell.
        watermark: Option<Watermark>,
        /// The body of `/get_all_keys`, as the master sent it (split it with
        /// [`hicache_index::snapshot_lines`]).
        keys: Result<Vec<u8>, HttpError>,
    },
    /// The master's status, or why it could not be read.
    Status {
        /// The core's request number.
        request: u64,
        /// What `/kv_events/status` said (`Ok(None)`: it gave no counters).
        watermark: Result<Option<Watermark>, HttpError>,
    },
    /// The master's signals, or why they could not be read.
    Signals {
        /// The core's request number.
        request: u64,
        /// What `/metrics` said of the signal families (empty for a master without them or
        /// without `/metrics`).
        signals: Result<StoreSignals, HttpError>,
    },
    /// Which keys exist; keys the master did not answer about are left out.
    Verify {
        /// The core's request number.
        request: u64,
        /// Each answered key and whether it exists.
        results: Vec<(String, bool)>,
        /// The first failure, when some part of the key list could not be checked.
        error: Option<HttpError>,
    },
}

impl HttpJob {
    /// The core's request number of the job.
    pub fn request(&self) -> u64 {
        match self {
            HttpJob::Snapshot { request }
            | HttpJob::Status { request }
            | HttpJob::Signals { request }
            | HttpJob::Verify { request, .. } => *request,
        }
    }

    /// What the job found when it could not run at all.
    pub fn failed(self, error: HttpError) -> HttpOutcome {
        match self {
            HttpJob::Snapshot { request } => HttpOutcome::Snapshot {
                request,
                watermark: None,
                keys: Err(error),
            },
            HttpJob::Status { request } => HttpOutcome::Status {
                request,
                watermark: Err(error),
            },
            HttpJob::Signals { request } => HttpOutcome::Signals {
                request,
                signals: Err(error),
            },
            HttpJob::Verify { request, .. } => HttpOutcome::Verify {
                request,
                results: Vec::new(),
                error: Some(error),
            },
        }
    }

    /// The job to report as failed if it cannot be started: itself, without its keys.
    pub fn without_keys(&self) -> HttpJob {
        match self {
            HttpJob::Verify { request, .. } => HttpJob::Verify {
                request: *request,
                keys: Vec::new(),
            },
            other => other.clone(),
        }
    }

    /// Runs the job with blocking `GET`s to `http`; call it off the event loop.
    pub fn run(self, http: &MasterHttp) -> HttpOutcome {
        match self {
            HttpJob::Snapshot { request } => {
                // The watermark first: every batch after it must then reach the stream.
                let status = http.get("/kv_events/status");
                let disabled = status
                    .as_deref()
                    .is_ok_and(|body| parse_events_status(Some(body)) == EventsStatus::Disabled);
                let watermark = status.ok().and_then(|body| parse_watermark(&body));
                let keys = match disabled {
                    true => Err(HttpError::EventsDisabled),
                    false => http.get("/get_all_keys"),
                };
                HttpOutcome::Snapshot {
                    request,
                    watermark,
                    keys,
                }
            }
            HttpJob::Status { request } => HttpOutcome::Status {
                request,
                watermark: http
                    .get("/kv_events/status")
                    .map(|body| parse_watermark(&body)),
            },
            HttpJob::Signals { request } => HttpOutcome::Signals {
                request,
                signals: match http.get("/metrics") {
                    Ok(body) => parse_signals(&body),
                    // A master without `/metrics` has nothing to watch.
                    Err(HttpError::Status(404)) => Ok(StoreSignals::default()),
                    Err(e) => Err(e),
                },
            },
            HttpJob::Verify { request, keys } => {
                let mut results = Vec::with_capacity(keys.len());
                let mut error = None;
                for target in http.batch_query_targets(&keys) {
                    match http.get(&target).and_then(|b| parse_batch_query(&b)) {
                        Ok(found) => results.extend(found),
                        Err(e) => {
                            error.get_or_insert(e);
                        }
                    }
                }
                HttpOutcome::Verify {
                    request,
                    results,
                    error,
                }
            }
        }
    }
}

/// Reads the watermark from a `/kv_events/status` answer: `published_batches + dropped_events`,
/// the last sequence the master assigned (each dropped event consumes one), and
/// `published_events`, the last event id it gave, when it tells.
pub fn parse_watermark(body: &[u8]) -> Option<Watermark> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let field = |name| value.get(name).and_then(serde_json::Value::as_u64);
    let seq = field("published_batches")?.checked_add(field("dropped_events")?)?;
    Some(Watermark {
        seq: Seq(seq),
        events: field("published_events"),
    })
}

/// Reads the store signals ([`hicache_index::signals`]) from a `/metrics` answer in the
/// Prometheus text format (parsed by `prometheus-parse`): each family's samples summed, the
/// others ignored.
pub fn parse_signals(body: &[u8]) -> Result<StoreSignals, HttpError> {
    let text = std::str::from_utf8(body).map_err(|_| HttpError::Malformed("not UTF-8"))?;
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .map_err(|_| HttpError::Malformed("not the Prometheus text format"))?;
    let mut signals = StoreSignals::default();
    for sample in &scrape.samples {
        use prometheus_parse::Value;
        if let Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) = sample.value {
            signals.add(&sample.metric, v);
        }
    }
    Ok(signals)
}

/// Reads a `/batch_query_keys` answer: `{"success":true,"data":{"<key>":{"ok":bool,...}}}`.
pub fn parse_batch_query(body: &[u8]) -> Result<Vec<(String, bool)>, HttpError> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| HttpError::Malformed("not JSON"))?;
    if value.get("success").and_then(serde_json::Value::as_bool) != Some(true) {
        return Err(HttpError::Malformed("success is not true"));
    }
    let data = value
        .get("data")
        .and_then(serde_json::Value::as_object)
        .ok_or(HttpError::Malformed("no data object"))?;
    Ok(data
        .iter()
        .filter_map(|(key, entry)| {
            let ok = entry.get("ok").and_then(serde_json::Value::as_bool)?;
            Some((key.clone(), ok))
        })
        .collect())
}

/// Reads `/kv_events/status`: `"enabled":true|false`, or `"success":false` from a master whose
/// service plane is not active; `None` (no answer) is unknown.
pub fn parse_events_status(body: Option<&[u8]>) -> EventsStatus {
    let Some(value) = body.and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok()) else {
        return EventsStatus::Unknown;
    };
    match (
        value.get("enabled").and_then(serde_json::Value::as_bool),
        value.get("success").and_then(serde_json::Value::as_bool),
    ) {
        (Some(true), _) => EventsStatus::Enabled,
        (Some(false), _) => EventsStatus::Disabled,
        (None, Some(false)) => EventsStatus::Inactive,
        _ => EventsStatus::Unknown,
    }
}
