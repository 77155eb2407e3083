//! `watch`: prints each batch of a master's event stream, the operator's first tool.
//!
//! A core [`Session`] with no layouts follows the stream, so gaps, duplicates, restarts,
//! malformed and stray messages are exactly what the index would see (its effects); the batch
//! itself is decoded again only to count its events for display. The sockets are the
//! transports' own ([`hicache_index_driver::socket`]), polled on this thread.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use hicache_index::{
    decode, Command, Config, Counters, Effect, Effects, EventKind, Input, Instant, Report, Session,
    StrayReason, Timestamp,
};
use hicache_index_driver::socket::{self, Link, LinkEvent, MAX_FRAMES};
use hicache_index_driver::SocketConfig;
use serde::Serialize;
use serde_json::json;

use crate::{parse_duration, say, Outcome};

/// `watch --events URL [--topic T] [--json]`
#[derive(Args, Debug)]
pub(crate) struct WatchArgs {
    /// The master's KV event endpoint, e.g. tcp://10.0.0.5:5557.
    #[arg(long, value_name = "URL")]
    events: String,
    /// The topic subscribed to; the Mooncake master sends an empty one.
    #[arg(long, value_name = "T", default_value = "")]
    topic: String,
    /// Print one JSON object per line instead of text.
    #[arg(long)]
    json: bool,
    /// Stop after this many messages.
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// Stop after this long (e.g. 30s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    duration: Option<Duration>,
}

/// Follows the stream until `--count`, `--duration`, a closed stdout or an interrupt.
pub(crate) fn run(args: WatchArgs) -> Outcome {
    crate::serve::check_endpoint(&args.events)?;
    let topic = args.topic.clone().into_bytes();
    let mut session = Session::new(Config {
        endpoint: Some(args.events.clone()),
        topic: topic.clone(),
        ..Config::default()
    })
    .map_err(|e| format!("invalid configuration: {e}"))?;
    let mut watch = Watch {
        json: args.json,
        start: std::time::Instant::now(),
        ctx: zmq::Context::new(),
        topic,
        link: None,
        messages: 0,
        open: true,
    };
    let end = args.duration.map(|d| watch.start + d);
    let mut parts: Vec<zmq::Message> = Vec::new();
    while watch.open && args.count.is_none_or(|n| watch.messages < n) {
        let now = std::time::Instant::now();
        if end.is_some_and(|end| now >= end) {
            break;
        }
        if session.poll_timeout().is_some_and(|d| d <= watch.now()) {
            let fx = session.handle(watch.now(), Input::Timeout);
            watch.execute(&mut session, fx)?;
        }
        // Wait for a message, a monitor event or the next deadline (at most 100 ms).
        let mut wait = Duration::from_millis(100);
        if let Some(d) = session.poll_timeout() {
            wait = wait.min(Duration::from_nanos(
                d.as_nanos().saturating_sub(watch.now().as_nanos()),
            ));
        }
        if let Some(end) = end {
            wait = wait.min(end.saturating_duration_since(now));
        }
        let Some(link) = &watch.link else {
            std::thread::sleep(wait);
            continue;
        };
        let millis = i64::try_from(wait.as_millis()).unwrap_or(100);
        let mut items = [
            link.sub.as_poll_item(zmq::POLLIN),
            link.monitor.as_poll_item(zmq::POLLIN),
        ];
        zmq::poll(&mut items, millis).map_err(|e| format!("polling the socket failed: {e}"))?;
        // Messages first, then connection events (a disconnect ends the link).
        while args.count.is_none_or(|n| watch.messages < n) && watch.open {
            let Some(link) = &watch.link else { break };
            let count = match socket::recv_message(&link.sub, &mut parts) {
                Ok(count) => count,
                Err(zmq::Error::EAGAIN) => break,
                Err(e) => return Err(format!("receiving failed: {e}")),
            };
            let kept = count.min(MAX_FRAMES);
            let frames: Vec<&[u8]> = parts[..kept].iter().map(|p| &p[..]).collect();
            let fx = session.handle(watch.now(), Input::Message(&frames));
            watch.messages += 1;
            watch.show_message(&frames, count, &fx);
            watch.execute(&mut session, fx)?;
        }
        while let Some(link) = &watch.link {
            let event = match socket::recv_message(&link.monitor, &mut parts) {
                Ok(_) => socket::parse_monitor_event(&parts[0]),
                Err(_) => break,
            };
            let fx = match event {
                Some(LinkEvent::Connected) => {
                    watch.show_connection("connected", None);
                    session.handle(watch.now(), Input::Connected)
                }
                Some(LinkEvent::Disconnected) => {
                    watch.link = None;
                    session.handle(watch.now(), Input::Disconnected)
                }
                _ => continue,
            };
            watch.execute(&mut session, fx)?;
        }
    }
    watch.link = None;
    eprintln!(
        "hicache-index: {}",
        summary(&session.counters(), watch.messages)
    );
    Ok(ExitCode::SUCCESS)
}

/// The watcher's IO state.
struct Watch {
    json: bool,
    start: std::time::Instant,
    ctx: zmq::Context,
    topic: Vec<u8>,
    link: Option<Link>,
    messages: u64,
    /// False once stdout is closed.
    open: bool,
}

impl Watch {
    fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// Prints `text`, or with `--json` the JSON line `json` makes (only then is it called).
    fn print(&mut self, text: String, json: impl FnOnce() -> String) {
        let line = if self.json { json() } else { text };
        self.open &= say(&line);
    }

    /// Executes the session's connection effects and shows the reconnection ones.
    fn execute(&mut self, session: &mut Session, fx: Effects) -> Result<(), String> {
        for effect in fx {
            match effect {
                Effect::Command(Command::Connect { endpoint }) => {
                    self.link = None;
                    self.show_connection("connecting", Some(&endpoint));
                    match socket::open(&self.ctx, &endpoint, &self.topic, &SocketConfig::default())
                    {
                        Ok(link) => self.link = Some(link),
                        Err(e) => {
                            return Err(format!("cannot subscribe to {endpoint}: {e}"));
                        }
                    }
                }
                Effect::Command(Command::Disconnect) => self.link = None,
                Effect::Report(Report::ReconnectScheduled { at, .. }) => {
                    let delay = at.as_nanos().saturating_sub(self.now().as_nanos()) / 1_000_000;
                    self.print(
                        format!("disconnected; connecting again in {delay} ms"),
                        || {
                            json!({ "connection": "disconnected", "retry_in_ms": delay })
                                .to_string()
                        },
                    );
                }
                // Configured without resync, verification or HA, the session asks for none of
                // these; were it to, watch has no HTTP side: the answer is a failure.
                Effect::Command(Command::FetchSnapshot { request }) => {
                    let fx = session.handle(self.now(), Input::SnapshotFailed { request });
                    self.execute(session, fx)?;
                }
                Effect::Command(Command::VerifyKeys { request, .. }) => {
                    let fx = session.handle(self.now(), Input::VerifyFailed { request });
                    self.execute(session, fx)?;
                }
                Effect::Command(Command::CheckLeader { .. } | Command::UseMaster { .. }) => {}
                // The other reports were shown with their message.
                Effect::Report(_) => {}
            }
        }
        Ok(())
    }

    fn show_connection(&mut self, state: &str, endpoint: Option<&str>) {
        let text = match endpoint {
            Some(e) => format!("{state} to {e}"),
            None => state.to_owned(),
        };
        self.print(text, || {
            json!({ "connection": state, "endpoint": endpoint }).to_string()
        });
    }

    /// Shows one message with what the session made of it.
    fn show_message(&mut self, frames: &[&[u8]], count: usize, fx: &Effects) {
        for effect in fx.iter() {
            match effect {
                Effect::Report(Report::Stray { reason }) => {
                    let (text, value) = match reason {
                        StrayReason::Topic => (
                            format!(
                                "stray: another topic ({:?})",
                                String::from_utf8_lossy(frames[0])
                            ),
                            json!({ "stray": "topic", "topic": String::from_utf8_lossy(frames[0]) })
                                .to_string(),
                        ),
                        StrayReason::FrameCount(n) => (
                            format!("stray: {n} frames instead of 3"),
                            json!({ "stray": "frame_count", "frames": n }).to_string(),
                        ),
                    };
                    return self.print(text, || value);
                }
                Effect::Report(Report::Malformed { error }) => {
                    return self.print(format!("malformed: {error}"), || {
                        json!({ "malformed": error.to_string() }).to_string()
                    });
                }
                _ => {}
            }
        }
        let Ok(batch) = decode(frames) else {
            // The session read it as a batch, so this does not happen; show the frame count.
            return self.print(format!("unreadable message of {count} frames"), || {
                json!({ "malformed": format!("{count} frames") }).to_string()
            });
        };
        let (mut stored, mut removed, mut cleared, mut unknown) = (0usize, 0usize, 0usize, 0usize);
        for event in &batch.events {
            match event.kind {
                EventKind::Stored => stored += 1,
                EventKind::Removed => removed += 1,
                EventKind::Cleared => cleared += 1,
                EventKind::Unknown => unknown += 1,
            }
        }
        let mut line = BatchLine {
            seq: batch.seq.0,
            timestamp_ms: match batch.timestamp {
                Timestamp::Millis(ms) => Some(ms as f64),
                Timestamp::Seconds(s) if s.is_finite() => Some(s * 1000.0),
                _ => None,
            }
            .map(|t| t as i64),
            events: batch.events.len(),
            stored,
            removed,
            cleared,
            unknown,
            gap: None,
            duplicate: false,
            restart: None,
        };
        let mut notes = Vec::new();
        for effect in fx.iter() {
            match effect {
                Effect::Report(Report::Gap { expected, received }) => {
                    let missing = received.0.saturating_sub(expected.0);
                    notes.push(format!("GAP: expected {}, {missing} missing", expected.0));
                    line.gap = Some(GapNote {
                        expected: expected.0,
                        received: received.0,
                        missing,
                    });
                }
                Effect::Report(Report::Restart { last, received }) => {
                    notes.push(format!("RESTART: back from {} to {}", last.0, received.0));
                    line.restart = Some(RestartNote {
                        last: last.0,
                        received: received.0,
                    });
                }
                Effect::Report(Report::Duplicate { seq })
                | Effect::Report(Report::Late { seq }) => {
                    notes.push(format!("DUPLICATE of {} (skipped)", seq.0));
                    line.duplicate = true;
                }
                _ => {}
            }
        }
        let counts: Vec<String> = [
            (stored, "stored"),
            (removed, "removed"),
            (cleared, "cleared"),
            (unknown, "unknown"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        let mut text = format!(
            "seq {:<8} {}  {:>3} event{}{}{}",
            line.seq,
            clock(line.timestamp_ms),
            line.events,
            if line.events == 1 { "" } else { "s" },
            if counts.is_empty() { "" } else { ": " },
            counts.join(", ")
        );
        for note in &notes {
            text.push_str("  ");
            text.push_str(note);
        }
        self.print(text, || {
            serde_json::to_string(&line).expect("a batch line always serialises")
        });
    }
}

/// One batch as `--json` prints it (fields in this order).
#[derive(Serialize)]
struct BatchLine {
    seq: u64,
    timestamp_ms: Option<i64>,
    events: usize,
    stored: usize,
    removed: usize,
    cleared: usize,
    unknown: usize,
    gap: Option<GapNote>,
    duplicate: bool,
    restart: Option<RestartNote>,
}

/// A gap: the sequence expected, the one that arrived, how many are missing.
#[derive(Serialize)]
struct GapNote {
    expected: u64,
    received: u64,
    missing: u64,
}

/// A restart: the last sequence of the old stream and the first of the new.
#[derive(Serialize)]
struct RestartNote {
    last: u64,
    received: u64,
}

/// Formats epoch milliseconds as a UTC time of day, `HH:MM:SS.mmmZ`.
fn clock(ms: Option<i64>) -> String {
    match ms {
        Some(ms) if ms >= 0 => {
            let ms = ms as u64;
            let day = ms % 86_400_000;
            format!(
                "{:02}:{:02}:{:02}.{:03}Z",
                day / 3_600_000,
                day / 60_000 % 60,
                day / 1000 % 60,
                day % 1000
            )
        }
        _ => "--:--:--.---Z".to_owned(),
    }
}

/// One line on what was seen.
fn summary(c: &Counters, messages: u64) -> String {
    format!(
        "{messages} messages: {} batches ({} events), {} gaps ({} sequences missing), {} duplicates, {} restarts, {} malformed, {} stray",
        c.batches + c.duplicates,
        c.events,
        c.gaps,
        c.missing_sequences,
        c.duplicates,
        c.restarts,
        c.malformed_seq + c.malformed_payload,
        c.stray_topic + c.stray_frame_count
    )
}
