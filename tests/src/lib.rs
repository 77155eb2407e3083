//! The harness the integration tests share: a session driven by hand, with real Mooncake frames
//! from the simulator's encoder, and a transcript recorder for golden tests.

pub mod fuzz;

use std::fmt::Write as _;
use std::time::Duration;

use hicache_index::{
    ClearReason, Command, Config, Effect, Effects, EventKind, Health, Input, Instant, Layout,
    Lookup, Medium, ModelLayout, PageHash, ReorderConfig, Report, ResyncConfig, Seq, Session,
    SessionStatus, SglangParams, SnapshotRequest, Timestamp, VerifyRequest, Watermark,
};
use hicache_index_shortcuts::Shortcuts;
use hicache_index_sim::encode::{encode_message, MasterFlavor, OwnedBatch, OwnedEvent};

/// The endpoint every harness session is configured with.
pub const ENDPOINT: &str = "tcp://127.0.0.1:5557";

/// A TP `tp`, PP 1, MHA layout with page size 4 and no key prefix.
pub fn mha(tp: u32) -> Layout {
    Layout::from_sglang(&SglangParams::new(4, tp)).expect("a valid SGLang layout")
}

/// A configuration with `layout` as the default layout and the harness endpoint.
pub fn config(layout: Layout) -> Config {
    Config {
        endpoint: Some(ENDPOINT.into()),
        layouts: vec![ModelLayout {
            model: None,
            layout,
        }],
        ..Config::default()
    }
}

/// The page hashes of `tokens` under `layout`, without a namespace.
pub fn page_hashes(layout: &Layout, tokens: &[u32]) -> Vec<PageHash> {
    layout
        .page_hashes(tokens, hicache_index::Namespace::NONE)
        .collect()
}

/// A `stored` event for `key` in the default tenant, on cpu.
pub fn stored(key: impl Into<String>) -> OwnedEvent {
    OwnedEvent::new(EventKind::Stored, key)
}

/// A `removed` event for `key` in the default tenant.
pub fn removed(key: impl Into<String>) -> OwnedEvent {
    OwnedEvent::new(EventKind::Removed, key)
}

/// A publisher's `cleared` event: of every tenant (`None`), or of `tenant`.
pub fn publisher_clear(tenant: Option<&str>) -> OwnedEvent {
    let mut e = OwnedEvent::new(EventKind::Cleared, String::new());
    e.object_key = None;
    e.tenant_id = tenant.map(str::to_owned);
    e
}

/// `stored` events for every object of `page` under `layout`.
pub fn store_page(layout: &Layout, page: &PageHash) -> Vec<OwnedEvent> {
    layout.object_keys(page).map(stored).collect()
}

/// A session driven by hand: virtual time, the next sequence, and a log of every effect.
pub struct Harness {
    /// The session under test.
    pub session: Session,
    /// The current virtual time.
    pub now: Instant,
    /// The sequence the next [`Harness::batch`] uses.
    pub next_seq: u64,
    /// Every effect so far, in order.
    pub log: Vec<Effect>,
    event_id: u64,
}

impl Harness {
    /// Makes a session from `config` and connects it (the first timeout asks to connect).
    pub fn connected(config: Config) -> Harness {
        let mut h = Harness::new(config);
        let fx = h.session.handle_timeout(h.now);
        assert!(
            matches!(fx.first(), Some(Effect::Command(Command::Connect { .. }))),
            "a configured endpoint connects at once: {fx:?}"
        );
        let _ = h.record(fx);
        let fx = h.session.handle_connected(h.now);
        let _ = h.record(fx);
        h
    }

    /// Makes a session from `config`, connects it and, with resync on, answers the bootstrap
    /// fetch with an empty key list whose status point is "nothing published yet" (sequence 0,
    /// event id 0): the stream is placed, and continues at sequence 1 and event id 1 (rule R6 of
    /// the core's sequence module).
    pub fn placed(config: Config) -> Harness {
        let mut h = Harness::connected(config);
        if let Some(request) = h.fetch_request() {
            let lines: [&[u8]; 0] = [];
            let fx = h.session.handle(
                h.now,
                Input::Snapshot {
                    request,
                    watermark: Some(Watermark {
                        seq: Seq(0),
                        events: Some(0),
                    }),
                    lines: &lines,
                },
            );
            let _ = h.record(fx);
        }
        h
    }

    /// Answers the last fetch the session asked for with `keys` and a status point at sequence
    /// `seq` and the last event id given so far; returns the effects (also logged).
    pub fn answer_fetch(&mut self, seq: u64, keys: &[&str]) -> Effects {
        let events = self.event_id - 1;
        self.answer_fetch_at(seq, events, keys)
    }

    /// Answers the last fetch the session asked for with `keys` and the status point
    /// (`seq`, `events`); returns the effects (also logged).
    pub fn answer_fetch_at(&mut self, seq: u64, events: u64, keys: &[&str]) -> Effects {
        let request = self.fetch_request().expect("a fetch was asked for");
        let lines: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
        let watermark = Watermark {
            seq: Seq(seq),
            events: Some(events),
        };
        let fx = self.session.handle(
            self.now,
            Input::Snapshot {
                request,
                watermark: Some(watermark),
                lines: &lines,
            },
        );
        self.record(fx)
    }

    /// Answers the last status check the session asked for (rule R11) with the status
    /// (`seq`, `events`); returns the effects (also logged).
    pub fn answer_status(&mut self, seq: u64, events: u64) -> Effects {
        let request = self
            .log
            .iter()
            .rev()
            .find_map(|e| match e {
                Effect::Command(Command::ReadStatus { request }) => Some(*request),
                _ => None,
            })
            .expect("a status check was asked for");
        let watermark = Some(Watermark {
            seq: Seq(seq),
            events: Some(events),
        });
        let fx = self
            .session
            .handle(self.now, Input::Status { request, watermark });
        self.record(fx)
    }

    /// The last snapshot fetch the session asked for, if any.
    pub fn fetch_request(&self) -> Option<SnapshotRequest> {
        self.log.iter().rev().find_map(|e| match e {
            Effect::Command(Command::FetchSnapshot { request }) => Some(*request),
            _ => None,
        })
    }

    /// Makes a session from `config` without driving it.
    pub fn new(config: Config) -> Harness {
        let session = Session::new(config).expect("a valid configuration");
        Harness {
            session,
            now: Instant::ZERO,
            next_seq: 1,
            log: Vec::new(),
            event_id: 1,
        }
    }

    /// Moves virtual time forward by `millis`.
    pub fn advance(&mut self, millis: u64) {
        self.now = Instant::from_nanos(self.now.as_nanos() + millis * 1_000_000);
    }

    /// Publishes `events` as the next batch; returns its effects (also logged).
    pub fn batch(&mut self, events: Vec<OwnedEvent>) -> Effects {
        let seq = self.next_seq;
        self.batch_at(seq, events)
    }

    /// Publishes `events` as batch `seq` (the next batch is `seq + 1`).
    pub fn batch_at(&mut self, seq: u64, events: Vec<OwnedEvent>) -> Effects {
        let frames = self.frames(seq, events);
        self.next_seq = seq.wrapping_add(1);
        self.feed_frames(&frames)
    }

    /// Sets the event id the next event gets, as a publisher that started again (from 1) or
    /// that lost events after publishing them.
    pub fn set_next_event_id(&mut self, id: u64) {
        self.event_id = id;
    }

    /// Encodes `events` as batch `seq` with fresh event ids, without feeding it.
    pub fn frames(&mut self, seq: u64, mut events: Vec<OwnedEvent>) -> [Vec<u8>; 3] {
        for e in &mut events {
            e.event_id = Some(self.event_id);
            self.event_id += 1;
        }
        let batch = OwnedBatch {
            seq: Seq(seq),
            timestamp: Timestamp::Millis(1_767_225_600_000 + self.now.as_nanos() / 1_000_000),
            dp_rank: Some(0),
            events,
        };
        encode_message(b"", &batch, MasterFlavor::Release0314)
    }

    /// Feeds raw frames; returns the effects (also logged).
    pub fn feed_frames(&mut self, frames: &[Vec<u8>]) -> Effects {
        let borrowed: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let fx = self.session.feed(self.now, &borrowed);
        self.record(fx)
    }

    /// Calls `handle_timeout` at the session's deadline (moving time there); `None` when idle.
    pub fn fire_timeout(&mut self) -> Option<Effects> {
        let at = self.session.poll_timeout()?;
        self.now = self.now.max(at);
        let fx = self.session.handle_timeout(self.now);
        Some(self.record(fx))
    }

    /// Fires every timeout that is due, moving time to each, until none is pending or
    /// `max_rounds` fired; returns their effects in order.
    pub fn fire_until_idle(&mut self, max_rounds: usize) -> Vec<Effect> {
        let mut seen = Vec::new();
        for _ in 0..max_rounds {
            let Some(fx) = self.fire_timeout() else {
                break;
            };
            seen.extend(fx.iter().cloned());
            if self.session.poll_timeout().is_none() {
                break;
            }
        }
        seen
    }

    /// Logs a copy of `fx` and hands it back.
    pub fn record(&mut self, fx: Effects) -> Effects {
        self.log.extend(fx.iter().cloned());
        fx
    }

    /// Leading pages of `tokens` fully present, with the default layout and tenant.
    pub fn prefix(&self, tokens: &[u32]) -> usize {
        self.session
            .query(&Lookup::tokens(tokens))
            .expect("the default layout answers")
            .prefix_pages
    }

    /// Whether each page of the default layout is claimed on its own (a query of that one
    /// page hash).
    pub fn claimed(&self, pages: &[PageHash]) -> Vec<bool> {
        pages
            .iter()
            .map(|p| {
                self.session
                    .query(&Lookup::page_hashes(std::slice::from_ref(p)))
                    .expect("the default layout answers")
                    .prefix_pages
                    == 1
            })
            .collect()
    }

    /// Where the session is, as of the harness's time ([`Session::status`]).
    pub fn status(&self) -> SessionStatus {
        self.session.status(self.now)
    }

    /// The session's health.
    pub fn health(&self) -> Health {
        self.status().health
    }

    /// Answers the last question the session asked the master about keys
    /// ([`Command::VerifyKeys`]): the master holds each of them when `held`; returns the
    /// effects (also logged).
    pub fn answer_question(&mut self, held: bool) -> Effects {
        let (request, keys) = self
            .log
            .iter()
            .rev()
            .find_map(|e| question(std::slice::from_ref(e)))
            .expect("a question was asked");
        self.answer(request, &keys, held)
    }

    /// Answers the question `request` about `keys` (the master holds each of them when
    /// `held`); returns the effects (also logged).
    pub fn answer(&mut self, request: VerifyRequest, keys: &[String], held: bool) -> Effects {
        let results: Vec<(&str, bool)> = keys.iter().map(|k| (k.as_str(), held)).collect();
        let fx = self.session.handle(
            self.now,
            Input::VerifyResult {
                request,
                results: &results,
            },
        );
        self.record(fx)
    }
}

/// The question `fx` asks the master about keys ([`Command::VerifyKeys`]), if any: its request
/// and keys.
pub fn question(fx: &[Effect]) -> Option<(VerifyRequest, Vec<String>)> {
    fx.iter().find_map(|e| match e {
        Effect::Command(Command::VerifyKeys { request, keys }) => Some((*request, keys.clone())),
        _ => None,
    })
}

/// Writes effects one per line, for transcripts.
pub fn transcript_lines(out: &mut String, step: &str, fx: &[Effect]) {
    let _ = writeln!(out, "> {step}");
    for e in fx {
        let _ = writeln!(out, "  {e:?}");
    }
}

/// Compares `actual` with the checked-in transcript `name` (under `tests/transcripts/`);
/// `UPDATE_TRANSCRIPTS=1` rewrites it instead.
pub fn assert_transcript(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("transcripts")
        .join(name);
    if std::env::var_os("UPDATE_TRANSCRIPTS").is_some() {
        std::fs::create_dir_all(path.parent().expect("transcripts have a folder"))
            .expect("create transcripts folder");
        std::fs::write(&path, actual).expect("write transcript");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "missing transcript {}: {e} (run with UPDATE_TRANSCRIPTS=1)",
            path.display()
        )
    });
    assert_eq!(
        actual, expected,
        "transcript {name} changed (UPDATE_TRANSCRIPTS=1 rewrites it after review)"
    );
}

/// A medium-disk copy of a stored event.
pub fn on_disk(mut event: OwnedEvent) -> OwnedEvent {
    event.medium = Some(Medium::Disk);
    event
}

// ---- shared by the false-hit histories (tests/tests/false_hits*.rs) ----

/// The tokens of `pages` pages of 4 (1, 2, 3, ...).
pub fn tokens(pages: u32) -> Vec<u32> {
    (1..=pages * 4).collect()
}

/// `cfg` with resynchronisation from the master's key list on.
pub fn resync(cfg: Config) -> Config {
    Config {
        resync: Some(ResyncConfig::default()),
        ..cfg
    }
}

/// `cfg` with a reorder window of `max_held` batches and a 50 ms deadline, and resync (a
/// reorder window needs it: rule R7 of the core's sequence module).
pub fn reorder(cfg: Config, max_held: usize) -> Config {
    Config {
        reorder: ReorderConfig {
            max_held,
            max_delay: Some(Duration::from_millis(50)),
        },
        resync: cfg.resync.or(Some(ResyncConfig::default())),
        ..cfg
    }
}

/// The reasons of the clears among `fx`, in order.
pub fn cleared(fx: &[Effect]) -> Vec<ClearReason> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Report(Report::Cleared { reason, .. }) => Some(*reason),
            _ => None,
        })
        .collect()
}

/// `n` events of a key no layout tracks (filler that only moves event ids).
pub fn filler(n: usize) -> Vec<OwnedEvent> {
    (0..n).map(|i| removed(format!("filler-{i}"))).collect()
}

/// An old run's batch held behind a hole, with the batches of a new run held after it (an
/// unseen restart: libzmq queues each connection's messages apart), must never apply: the old
/// run stores page A in its seq 9 (ids 20-21); the new run, which lost A, starts its ids at
/// `new_run_first_id` and has its seq 1-3 lost and seq 4, 5, ... of `sizes` events held too.
/// The window gives up on its hole (R7): what it held came before the next fetch is asked, so
/// the key list holds it (R6), and nothing held applies. Asserts the miss, and that the new run
/// goes on once the master's status places the stream.
pub fn old_batch_released_after_the_new_run(new_run_first_id: u64, sizes: &[usize]) {
    let layout = mha(1);
    let mut h = Harness::placed(reorder(config(layout.clone()), 8));
    let t = tokens(1);
    let page = page_hashes(&layout, &t)[0];
    let _ = h.batch_at(1, filler(2));
    let _ = h.batch_at(2, filler(2));
    // The old master's seq 9 (its 3-8 lost) stores page A and is held behind the hole.
    h.set_next_event_id(20);
    let _ = h.batch_at(9, store_page(&layout, &page));
    h.advance(5);
    h.set_next_event_id(new_run_first_id);
    let mut next = 4;
    for &events in sizes {
        let _ = h.batch_at(next, filler(events));
        next += 1;
    }
    // The window gives up on its hole (or a batch of the new run already showed another run):
    // nothing it held applies.
    h.advance(100);
    if h.session.poll_timeout().is_some_and(|at| at <= h.now) {
        let _ = h.fire_timeout();
    }
    assert_eq!(h.status().last_applied_seq, None, "{:?}", h.log);
    assert_eq!(
        h.prefix(&t),
        0,
        "page A is not at the master (the new run never stored it): {:?}",
        h.log
    );
    // The master's status places the new run's stream at its last batch; it goes on from there.
    let _ = h.answer_fetch(next - 1, &[]);
    let _ = h.batch_at(next, filler(1));
    if next == 9 {
        // Numbered like the old run's seq 9, which was heard (held, then dropped with the
        // hole), with other bytes: a twin, so another run's than that one (R5). The stream
        // cannot tell which of the two the status point is of: it forgets once, and the next
        // status places it.
        assert_eq!(h.status().last_applied_seq, None, "{:?}", h.log);
        assert_eq!(h.prefix(&t), 0);
        let _ = h.answer_fetch(next, &[]);
        next += 1;
        let _ = h.batch_at(next, filler(1));
    }
    assert_eq!(h.status().last_applied_seq, Some(Seq(next)), "{:?}", h.log);
    assert_eq!(h.prefix(&t), 0);
}
