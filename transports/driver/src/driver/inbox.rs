//! What reaches the loop through its inbox: requests of the handles and the outcomes of HTTP
//! jobs.

use hicache_index::{
    Input, LeaderRequest, SignalsRequest, SnapshotRequest, StatusRequest, VerifyRequest,
};

use crate::handle::Inbox;
use crate::http::{HttpError, HttpOutcome};
use crate::observe::Observer;

use super::key_list::Handover;
use super::{Driver, KEY_LIST, SIGNALS, STATUS_CHECK, VERIFICATION};

impl<O: Observer> Driver<O> {
    /// Handles a request or an HTTP outcome; returns false when the loop must stop.
    pub fn handle_inbox(&mut self, msg: Inbox) -> bool {
        match msg {
            Inbox::Stop => return false,
            Inbox::Worker { worker, info } => self.call(|s, now| {
                s.handle(
                    now,
                    Input::Worker {
                        worker: &worker,
                        info,
                    },
                )
            }),
            Inbox::Clear => self.call(|s, now| s.handle(now, Input::Clear)),
            Inbox::Http(HttpOutcome::Snapshot {
                request,
                watermark,
                keys,
            }) => match keys {
                Ok(body) => {
                    self.shared.episodes.succeeded(KEY_LIST);
                    let request = SnapshotRequest(request);
                    // Only begun here: the loop hands the lines over in chunks, feeding the
                    // live batches queued meanwhile between them (see `advance_snapshot`).
                    self.call(|s, now| s.handle(now, Input::SnapshotBegin { request, watermark }));
                    self.handover = Some(Handover::new(request, body));
                }
                Err(HttpError::EventsDisabled) => {
                    tracing::error!(
                        request,
                        "the master's KV event publisher is off (\"enabled\":false in \
                         /kv_events/status): the index stays empty; run a master built with it"
                    );
                    let request = SnapshotRequest(request);
                    self.call(|s, now| s.handle(now, Input::EventsDisabled { request }));
                }
                Err(error) => {
                    let url = self.http_url();
                    self.shared
                        .episodes
                        .failed(KEY_LIST, &url, &error.to_string());
                    let request = SnapshotRequest(request);
                    self.call(|s, now| s.handle(now, Input::SnapshotFailed { request }));
                }
            },
            Inbox::LeaderView(view) => {
                tracing::info!(?view, "HA discovery");
                self.call(|s, now| s.handle(now, Input::LeaderView(&view)));
            }
            Inbox::LeaderStatus { request, status } => {
                tracing::debug!(request, ?status, "leader check");
                if status.events == hicache_index::EventsStatus::Disabled && status.serving {
                    tracing::error!(
                        request,
                        "the leader's KV event publisher is off (\"enabled\":false): not followed"
                    );
                }
                let request = LeaderRequest(request);
                let status = &status;
                self.call(|s, now| s.handle(now, Input::LeaderStatus { request, status }));
            }
            Inbox::Http(HttpOutcome::Status { request, watermark }) => {
                let watermark = match watermark {
                    Ok(watermark) => {
                        self.shared.episodes.succeeded(STATUS_CHECK);
                        watermark
                    }
                    Err(error) => {
                        let url = self.http_url();
                        let cause = error.to_string();
                        self.shared.episodes.failed(STATUS_CHECK, &url, &cause);
                        None
                    }
                };
                let request = StatusRequest(request);
                self.call(|s, now| s.handle(now, Input::Status { request, watermark }));
            }
            Inbox::Http(HttpOutcome::Signals { request, signals }) => {
                let signals = match signals {
                    Ok(signals) => {
                        self.shared.episodes.succeeded(SIGNALS);
                        Some(signals)
                    }
                    Err(error) => {
                        let url = self.http_url();
                        let cause = error.to_string();
                        self.shared.episodes.failed(SIGNALS, &url, &cause);
                        None
                    }
                };
                let request = SignalsRequest(request);
                self.call(|s, now| s.handle(now, Input::Signals { request, signals }));
            }
            Inbox::Http(HttpOutcome::Verify {
                request,
                results,
                error,
            }) => {
                match &error {
                    Some(error) => {
                        let url = self.http_url();
                        let cause = format!("{error} ({} of the keys answered)", results.len());
                        self.shared.episodes.failed(VERIFICATION, &url, &cause);
                    }
                    None => self.shared.episodes.succeeded(VERIFICATION),
                }
                let request = VerifyRequest(request);
                if error.is_some() && results.is_empty() {
                    self.call(|s, now| s.handle(now, Input::VerifyFailed { request }));
                } else {
                    // Keys of chunks that failed are left out: neither present nor absent.
                    let answers: Vec<(&str, bool)> =
                        results.iter().map(|(k, ok)| (k.as_str(), *ok)).collect();
                    let results = &answers[..];
                    self.call(|s, now| s.handle(now, Input::VerifyResult { request, results }));
                }
            }
        }
        true
    }
}
