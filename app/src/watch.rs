//! `watch`: prints each batch of a master's event stream, the operator's first tool.
//!
//! It runs the transports' own loop ([`hicache_index_driver::run::run`] on tokio) around a core
//! [`hicache_index::Session`] with no layouts, which follows the stream: gaps, duplicates,
//! restarts, malformed and stray messages are exactly what the index would see (its effects).
//! The watcher is the driver's [`Observer`]: it prints each message with what the session made
//! of it, and the connection changes, and asks the loop to stop after `--count` messages or
//! once stdout is closed; `--duration` ends it with a stop request. The batch itself is decoded
//! again only to count its events for display.

use std::ops::ControlFlow;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use hicache_index::sequence::Skip;
use hicache_index::{
    decode, Command, Config, Counters, Effect, Effects, EventKind, Instant, Report, StrayReason,
    Timestamp,
};
use hicache_index_driver::run::run as drive;
use hicache_index_driver::{
    prepare_observed, Error, LinkChange, Observed, Observer, Parts, SubscriberConfig,
};
use hicache_index_options::parse_duration;
use hicache_index_tokio::Tokio;
use serde::Serialize;
use serde_json::json;

use crate::outcome::{say, Failure, Outcome};

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
    crate::serve::check_endpoint(&args.events).map_err(Failure::Usage)?;
    let config = SubscriberConfig {
        // Nobody queries this index.
        prefix_memo_bytes: 0,
        ..SubscriberConfig::new(Config {
            endpoint: Some(args.events.clone()),
            topic: args.topic.clone().into_bytes(),
            ..Config::default()
        })
    };
    let mut watch = Watch {
        json: args.json,
        count: args.count,
        messages: 0,
        open: true,
        endpoint: String::new(),
        failed: None,
    };
    let Parts {
        driver,
        query,
        control,
        inbox,
    } = prepare_observed(config, &mut watch).map_err(|e| match e {
        Error::Config(e) => format!("invalid configuration: {e}"),
        e => e.to_string(),
    })?;
    if args.count == Some(0) || args.duration.is_some_and(|d| d.is_zero()) {
        // Already at its end: nothing is connected.
        drop(driver);
    } else {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| format!("cannot start the runtime: {e}"))?;
        runtime.block_on(async {
            if let Some(duration) = args.duration {
                tokio::spawn(async move {
                    tokio::time::sleep(duration).await;
                    control.stop();
                });
            }
            drive::<Tokio>(driver, inbox).await;
        });
    }
    if let Some(error) = watch.failed {
        return Err(error.into());
    }
    eprintln!(
        "hicache-index: {}",
        summary(&query.counters(), watch.messages)
    );
    Ok(ExitCode::SUCCESS)
}

/// The watcher, the driver's observer: what it prints, and when it asks the loop to stop.
struct Watch {
    json: bool,
    /// `--count`.
    count: Option<u64>,
    messages: u64,
    /// False once stdout is closed.
    open: bool,
    /// The endpoint last connected to.
    endpoint: String,
    /// Why the watch fails: the sockets for `endpoint` could not be opened.
    failed: Option<String>,
}

impl Observer for Watch {
    fn observe(&mut self, now: Instant, seen: Observed<'_>) -> ControlFlow<()> {
        match seen {
            Observed::Message { frames, effects } => {
                self.messages += 1;
                self.show_message(frames, effects);
                self.show_effects(now, effects);
            }
            Observed::Link(LinkChange::Connected) => self.show_connection("connected", None),
            // The reconnection that follows is shown with the session's effects.
            Observed::Link(LinkChange::Disconnected) => {}
            Observed::Link(LinkChange::Failed(error)) => {
                self.failed = Some(format!("cannot subscribe to {}: {error}", self.endpoint));
                return ControlFlow::Break(());
            }
            Observed::Effects(effects) => self.show_effects(now, effects),
        }
        self.go_on()
    }
}

impl Watch {
    /// Goes on while stdout is open and `--count` is not reached.
    fn go_on(&self) -> ControlFlow<()> {
        if self.open && self.count.is_none_or(|n| self.messages < n) {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(())
        }
    }

    /// Prints `text`, or with `--json` the JSON line `json` makes (only then is it called).
    fn print(&mut self, text: String, json: impl FnOnce() -> String) {
        let line = if self.json { json() } else { text };
        self.open &= say(&line);
    }

    /// Shows the connection effects of a call made at `now` (the driver executes them).
    fn show_effects(&mut self, now: Instant, fx: &Effects) {
        for effect in fx.iter() {
            match effect {
                Effect::Command(Command::Connect { endpoint }) => {
                    self.endpoint.clone_from(endpoint);
                    self.show_connection("connecting", Some(endpoint));
                }
                Effect::Report(Report::ReconnectScheduled { at, .. }) => {
                    let delay = at.as_nanos().saturating_sub(now.as_nanos()) / 1_000_000;
                    self.print(
                        format!("disconnected; connecting again in {delay} ms"),
                        || {
                            json!({ "connection": "disconnected", "retry_in_ms": delay })
                                .to_string()
                        },
                    );
                }
                // The other reports are shown with their message. Configured without resync,
                // verification or HA, the session asks for no other command (were it to fetch a
                // snapshot, the driver, with no HTTP side, answers that the fetch failed).
                _ => {}
            }
        }
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
    fn show_message(&mut self, frames: &[&[u8]], fx: &Effects) {
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
            // The session read it as a batch, so this does not happen; show the frame count
            // (all of them: a message of more than `MAX_FRAMES` is a stray).
            let count = frames.len();
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
                Effect::Report(Report::OtherRun { position, received }) => {
                    let last = position.map_or(0, |s| s.0);
                    notes.push(format!("RESTART: back from {last} to {}", received.0));
                    line.restart = Some(RestartNote {
                        last,
                        received: received.0,
                    });
                }
                Effect::Report(Report::Skipped {
                    seq,
                    why: Skip::Copy,
                }) => {
                    notes.push(format!("DUPLICATE of {} (skipped)", seq.0));
                    line.duplicate = true;
                }
                Effect::Report(Report::Skipped { seq, .. }) => {
                    notes.push(format!("SKIPPED {} (at or before a status point)", seq.0));
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
