//! The world's setup and alphabet: which world is explored, its letters, and how a history
//! ends or fails.

use std::time::Duration;

use hicache_index::{Config, IndexConfig, ModelLayout, ReorderConfig, ResyncConfig, VerifyConfig};

use crate::model::Catalog;
use crate::oracle::STALE_BOUND;

use super::timing::{LIVE_BOUND, WINDOW};

/// Which world to explore.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Setup {
    /// The reorder window is on (`max_held` 4, `max_delay` [`WINDOW`]); off is the shipped
    /// setup.
    pub window: bool,
    /// The master answers `/kv_events/status` with its counters; without, every fetch's
    /// watermark is `None`.
    pub status: bool,
    /// How many runs of the master a history may see (restarts + 1).
    pub max_runs: u8,
    /// How many faults ([`Letter::is_fault`]) a history may hold; `None`: any number.
    pub max_faults: Option<u8>,
}

impl Setup {
    /// The session's configuration: the shipped defaults (resync and verification on, as
    /// `serve --master-http` runs), a small index, and the window if asked.
    pub fn config(&self) -> Config {
        Config {
            endpoint: Some("tcp://127.0.0.1:5557".into()),
            layouts: vec![ModelLayout {
                model: None,
                layout: Catalog::get().layout.clone(),
            }],
            index: IndexConfig {
                max_pages: 64,
                max_namespaces: 16,
                ..IndexConfig::default()
            },
            reorder: if self.window {
                ReorderConfig {
                    max_held: 4,
                    max_delay: Some(WINDOW),
                }
            } else {
                ReorderConfig::default()
            },
            // The watch of the master's signals is off: this alphabet has no silent removal, so
            // its signals would never move (its reconciles are checked by the simulator, whose
            // silent removals move them, and by tests/tests/store_watch.rs).
            resync: Some(ResyncConfig {
                store_watch: None,
                ..ResyncConfig::default()
            }),
            verify: Some(VerifyConfig::default()),
            ..Config::default()
        }
    }

    /// How long a handed message may rightly be held by the session.
    pub fn grace(&self) -> Duration {
        if self.window {
            WINDOW
        } else {
            Duration::ZERO
        }
    }

    /// A short name: `window off, status on`.
    pub fn name(&self) -> String {
        let on = |b: bool| if b { "on" } else { "off" };
        let faults = match self.max_faults {
            Some(n) => format!(", at most {n} faults"),
            None => String::new(),
        };
        format!(
            "window {}, status {}, {} runs{faults}",
            on(self.window),
            on(self.status),
            self.max_runs
        )
    }
}

/// What becomes of a change's batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fate {
    /// Published and handed to the session at once.
    Delivered,
    /// Dropped by the master's queue: its sequences are skipped, no event id is.
    Dropped,
    /// Published, and handed with a payload that cannot be decoded.
    Undecodable,
    /// Published and held by the network, past the reorder window, until [`Letter::Release`].
    Delayed,
}

/// One step of a history: the alphabet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Letter {
    /// The master stores page `page` (absent) or removes it (present); its batch meets `fate`.
    Toggle {
        /// The page.
        page: u8,
        /// What becomes of its batch.
        fate: Fate,
    },
    /// The master restarts, unseen by the transport (no `Disconnected`): sequences and event
    /// ids from 1, nothing held; its batches hold as many events as the old run's, or not.
    Restart {
        /// The new run's batches have the old run's sizes.
        same_sizes: bool,
    },
    /// The transport reports `Disconnected` and connects again (after the session's backoff).
    Reconnect,
    /// The network hands the last message again.
    Copy,
    /// The delayed batch arrives, past the window.
    Release,
    /// The driver reads `/kv_events/status` for the fetch in progress, now.
    ReadStatus,
    /// The driver reads `/get_all_keys` for the fetch in progress, now.
    ReadKeys,
    /// The driver begins handing the answer over: `SnapshotBegin` and the first half of the
    /// lines.
    Deliver,
    /// The driver hands over the rest of the lines and `SnapshotEnd`.
    EndSnapshot,
    /// The driver reads status and key list now and hands them over whole (`Snapshot`).
    Answer,
    /// Time passes to the session's next deadline.
    Tick,
    /// The master goes idle: nothing changes any more, the network delivers what it holds,
    /// every request is answered at once; the index must be live and exact within
    /// [`LIVE_BOUND`].
    Idle,
}

impl Letter {
    /// Reports whether the letter is a fault of the master or the network (a batch dropped,
    /// undecodable or delayed, a restart, a reconnect, a copy), as [`Setup::max_faults`]
    /// counts them; the driver's interleavings and time passing are not.
    pub fn is_fault(self) -> bool {
        match self {
            Letter::Toggle { fate, .. } => fate != Fate::Delivered,
            Letter::Restart { .. } | Letter::Reconnect | Letter::Copy => true,
            _ => false,
        }
    }

    /// The kind of fault or interleaving the letter is, for telling failures apart (`None`
    /// for the plain ones: a delivered change, a whole answer read at once, going idle).
    pub fn kind(self) -> Option<&'static str> {
        Some(match self {
            Letter::Toggle { fate, .. } => match fate {
                Fate::Delivered => return None,
                Fate::Dropped => "queue drop",
                Fate::Undecodable => "undecodable",
                Fate::Delayed => "delay",
            },
            Letter::Restart { same_sizes: true } => "restart (same sizes)",
            Letter::Restart { same_sizes: false } => "restart (other sizes)",
            Letter::Reconnect => "reconnect",
            Letter::Copy => "copy",
            Letter::Release => return None,
            Letter::ReadStatus | Letter::ReadKeys => "answer read early",
            Letter::Deliver | Letter::EndSnapshot => "chunked answer",
            Letter::Tick => "time",
            Letter::Answer | Letter::Idle => return None,
        })
    }
}

/// A way the session broke a rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Problem {
    /// A page was claimed that the master did not hold at any moment the session could still
    /// be reflecting.
    FalseHit {
        /// The health the answer carried.
        health: String,
    },
    /// A claim resting on an invisible restart outlived [`STALE_BOUND`].
    StaleTooLong,
    /// After [`LIVE_BOUND`] of an idle master the index was not live.
    NotLive {
        /// Its health then.
        health: String,
    },
    /// After [`LIVE_BOUND`] of an idle master the index was live but not exact.
    NotExact {
        /// A page the master held was missing.
        missing: bool,
        /// A page the master lacked was claimed (a false hit the oracle excused earlier).
        extra: bool,
    },
    /// The session asked for wake-ups without moving on.
    Busy,
    /// The session panicked.
    Panic(String),
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::FalseHit { health } => write!(f, "false hit (health {health})"),
            Problem::StaleTooLong => write!(
                f,
                "claim resting on an invisible restart longer than {STALE_BOUND:?}"
            ),
            Problem::NotLive { health } => write!(
                f,
                "idle master, index not live after {LIVE_BOUND:?} (health {health})"
            ),
            Problem::NotExact { missing, extra } => write!(
                f,
                "idle master, index live but not exact after {LIVE_BOUND:?} (missing pages: {missing}, extra pages: {extra})"
            ),
            Problem::Busy => write!(f, "wake-ups without progress"),
            Problem::Panic(message) => write!(f, "panic: {message}"),
        }
    }
}

/// How an idle master's history ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Live and exact in time.
    Live,
    /// A master without status counters left the index recovering, visibly: expected.
    Stall,
}
