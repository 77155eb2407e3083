//! One history being played: the real [`Session`], driven through [`Session::handle`] by a
//! driver that executes its commands against the [`Model`], and judged by the [`Oracle`] after
//! every input, through the session's [`Reader`].

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use hicache_index::{
    Command, Config, Effects, Health, IndexConfig, Input, Instant, ModelLayout, Reader,
    ReorderConfig, Report, ResyncConfig, Session, SnapshotRequest, StatusRequest, VerifyConfig,
    VerifyRequest, Watermark,
};

use crate::fingerprint;
use crate::model::{page_name, Catalog, Fetch, Key, Master, Message, Model, EPOCH_MS, PAGES};
use crate::oracle::{Judgement, Oracle, STALE_BOUND};

/// The reorder window's `max_delay` when the window is on (and its `max_held`: 4 batches).
pub const WINDOW: Duration = Duration::from_millis(50);

/// How long the network holds a delayed batch: past the reorder window.
pub const DELAY: Duration = Duration::from_millis(60);

/// How long after the master goes idle the index must be live and exact.
pub const LIVE_BOUND: Duration = Duration::from_secs(30);

/// The most timeouts one letter may fire (more is a session that keeps asking for a wake-up
/// without moving on).
const MAX_WAKEUPS: usize = 1_000;

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
            resync: Some(ResyncConfig::default()),
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
        format!(
            "window {}, status {}, {} runs",
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

/// A reply the driver owes the session.
#[derive(Debug)]
enum Reply {
    Connected,
    Verify {
        request: VerifyRequest,
        results: Vec<(String, bool)>,
    },
    /// An idle master's fetch, answered at once.
    Answer,
    /// A quiet stream's status check (rule R11), answered at once with the master's counters.
    Status {
        request: StatusRequest,
        watermark: Option<Watermark>,
    },
}

/// One history being played.
pub struct World {
    setup: Setup,
    session: Session,
    reader: Arc<Reader>,
    /// The master, the network and the driver's answer in progress.
    pub model: Model,
    /// The judge.
    pub oracle: Oracle,
    now: Instant,
    inbox: VecDeque<Reply>,
    idle: bool,
    judging: bool,
    /// A claim was judged stale (excused by an invisible restart) at some point.
    excused: bool,
    /// Since when each page has been claimed without a break.
    claimed_since: [Option<Instant>; PAGES],
    connects: usize,
    trace: Option<String>,
    problem: Option<(Problem, Option<String>)>,
}

impl World {
    /// A session that just connected to a master that holds nothing (its bootstrap fetch
    /// asked for); `trace` records every input, effect and judgement readably.
    pub fn new(setup: Setup, trace: bool) -> World {
        let session = Session::new(setup.config()).expect("the checker's configuration is valid");
        let reader = session.reader();
        let mut world = World {
            setup,
            session,
            reader,
            model: Model::new(),
            oracle: Oracle::new(setup.grace()),
            now: Instant::ZERO,
            inbox: VecDeque::new(),
            idle: false,
            judging: true,
            claimed_since: [None; PAGES],
            excused: false,
            connects: 0,
            trace: trace.then(String::new),
            problem: None,
        };
        world.note("start: the session connects to run 1 (holding nothing)");
        world.advance_to(Instant::ZERO);
        world
    }

    /// Returns the first problem found, with the trace up to it when tracing.
    pub fn problem(&self) -> Option<&(Problem, Option<String>)> {
        self.problem.as_ref()
    }

    /// Returns the trace so far (empty unless tracing).
    pub fn trace(&self) -> &str {
        self.trace.as_deref().unwrap_or("")
    }

    /// Turns judging the claims after every input on or off (a replay of a history already
    /// judged need not judge it again).
    pub fn set_judging(&mut self, on: bool) {
        self.judging = on;
    }

    /// Reports whether a claim was judged stale (excused by an invisible restart) at some
    /// point of this history.
    pub fn saw_excused_claim(&self) -> bool {
        self.excused
    }

    /// Returns the session under test.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Returns the current virtual time.
    pub fn now(&self) -> Instant {
        self.now
    }

    fn note(&mut self, line: impl AsRef<str>) {
        if let Some(trace) = &mut self.trace {
            let _ = writeln!(trace, "  {}", line.as_ref());
        }
    }

    fn fail(&mut self, problem: Problem) {
        if self.problem.is_none() {
            self.note(format!("!! {problem}"));
            self.problem = Some((problem, self.trace.clone()));
        }
    }

    /// The letters enabled now, in a fixed order. Pages never touched yet are symmetric: only
    /// the first of them is offered.
    pub fn enabled(&self) -> Vec<Letter> {
        let m = &self.model;
        let mut letters = Vec::new();
        let touched = self.touched_pages();
        for page in 0..PAGES.min(touched + 1) {
            for fate in [
                Fate::Delivered,
                Fate::Dropped,
                Fate::Undecodable,
                Fate::Delayed,
            ] {
                if fate == Fate::Delayed && m.delayed.is_some() {
                    continue;
                }
                letters.push(Letter::Toggle {
                    page: page as u8,
                    fate,
                });
            }
        }
        if m.master.run < self.setup.max_runs {
            letters.push(Letter::Restart { same_sizes: true });
            letters.push(Letter::Restart { same_sizes: false });
        }
        letters.push(Letter::Reconnect);
        if m.last_handed.is_some() {
            letters.push(Letter::Copy);
        }
        if m.delayed.is_some() {
            letters.push(Letter::Release);
        }
        if let Some(fetch) = &m.fetch {
            match (&fetch.status, &fetch.keys, fetch.begun) {
                (None, _, _) => {
                    letters.push(Letter::ReadStatus);
                    letters.push(Letter::Answer);
                }
                (Some(_), None, _) => letters.push(Letter::ReadKeys),
                (Some(_), Some(_), false) => letters.push(Letter::Deliver),
                (Some(_), Some(_), true) => letters.push(Letter::EndSnapshot),
            }
        }
        if self.session.poll_timeout().is_some() {
            letters.push(Letter::Tick);
        }
        letters.push(Letter::Idle);
        letters
    }

    /// How many pages any change touched so far (the pages are touched in order A, B, C).
    fn touched_pages(&self) -> usize {
        (0..PAGES)
            .rev()
            .find(|&p| self.oracle.touched(p))
            .map_or(0, |p| p + 1)
    }

    /// Plays one letter; returns how an idle master's history ended (for [`Letter::Idle`]).
    pub fn play(&mut self, letter: Letter) -> Option<Ending> {
        if let Some(trace) = &mut self.trace {
            let _ = writeln!(
                trace,
                "{:>8.3}s {}",
                self.now.as_nanos() as f64 / 1e9,
                describe(letter, &self.model)
            );
        }
        match letter {
            Letter::Toggle { page, fate } => self.toggle(usize::from(page), fate),
            Letter::Restart { same_sizes } => {
                let old = &self.model.master;
                let filler = if same_sizes {
                    old.filler
                } else {
                    1 - old.filler
                };
                let run = old.run + 1;
                self.model.master = Master::new(run, filler);
                self.oracle.restart(run);
            }
            Letter::Reconnect => self.reconnect(),
            Letter::Copy => {
                let message = self.model.last_handed.clone().expect("Copy is enabled");
                self.hand(message);
            }
            Letter::Release => {
                let until = self.now + DELAY;
                self.advance_to(until);
                let message = self.model.delayed.take().expect("Release is enabled");
                self.hand(message);
            }
            Letter::ReadStatus => self.read_status(),
            Letter::ReadKeys => self.read_keys(),
            Letter::Deliver => self.deliver(),
            Letter::EndSnapshot => self.end_snapshot(),
            Letter::Answer => {
                self.read_status();
                self.read_keys();
                self.answer_whole();
            }
            Letter::Tick => {
                if let Some(at) = self.session.poll_timeout() {
                    self.advance_to(at.max(self.now));
                }
            }
            Letter::Idle => return Some(self.go_idle()),
        }
        None
    }

    fn toggle(&mut self, page: usize, fate: Fate) {
        let stored = !self.model.master.holds(page);
        let events = self.model.master.toggle(page);
        let master = &mut self.model.master;
        let dropped = fate == Fate::Dropped;
        let pos = self
            .oracle
            .page(page, stored, master.run, master.next_seq, dropped);
        if dropped {
            master.next_seq += events.len() as u64;
            return;
        }
        self.model.stamped += 1;
        let message = Message {
            run: master.run,
            seq: master.next_seq,
            first_id: master.next_id,
            stamp_ms: EPOCH_MS + self.now.as_nanos() / 1_000_000 + self.model.stamped,
            readable: fate != Fate::Undecodable,
            events,
            pos,
        };
        master.next_seq += 1;
        master.next_id += message.events.len() as u64;
        match fate {
            Fate::Delivered => self.hand(message),
            Fate::Undecodable => self.hand(message),
            Fate::Delayed => self.model.delayed = Some(message),
            Fate::Dropped => unreachable!("handled above"),
        }
    }

    fn hand(&mut self, message: Message) {
        self.oracle.handed(self.now, &message);
        let frames = message.frames();
        self.model.last_handed = Some(message);
        let borrowed: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        self.input(Input::Message(&borrowed));
    }

    fn reconnect(&mut self) {
        let connects = self.connects;
        self.input(Input::Disconnected);
        for _ in 0..MAX_WAKEUPS {
            if self.connects > connects {
                return;
            }
            let Some(at) = self.session.poll_timeout() else {
                break;
            };
            self.advance_to(at.max(self.now));
        }
        self.note("(the session never asked to connect again)");
    }

    fn read_status(&mut self) {
        let status = self.setup.status.then(|| self.model.master.watermark());
        let run = self.model.master.run;
        let fetch = self.model.fetch.as_mut().expect("a fetch is in progress");
        fetch.status = Some((run, status));
    }

    fn read_keys(&mut self) {
        let catalog = Catalog::get();
        let mut keys: Vec<Key> = self.model.master.held.iter().copied().collect();
        // The list's order: by name (the master's own order is its map's; any will do).
        keys.sort_by_key(|k| catalog.name(*k));
        let fetch = self.model.fetch.as_mut().expect("a fetch is in progress");
        fetch.keys = Some(keys);
    }

    fn lines(keys: &[Key]) -> Vec<Vec<u8>> {
        let catalog = Catalog::get();
        keys.iter().map(|k| catalog.name(*k).into_bytes()).collect()
    }

    fn deliver(&mut self) {
        let fetch = self.model.fetch.clone().expect("a fetch is in progress");
        let watermark = self.status_handed(&fetch);
        let lines = Self::lines(fetch.keys.as_deref().expect("the keys were read"));
        self.input(Input::SnapshotBegin {
            request: fetch.request,
            watermark,
        });
        if self.session.snapshot_progress(fetch.request).is_none() {
            self.note("(the session does not take it: the handover is dropped)");
            self.drop_fetch(fetch.request);
            return;
        }
        let half: Vec<&[u8]> = lines[..lines.len() / 2].iter().map(Vec::as_slice).collect();
        self.input(Input::SnapshotLines {
            request: fetch.request,
            lines: &half,
        });
        if let Some(f) = &mut self.model.fetch {
            if f.request == fetch.request {
                f.begun = true;
            }
        }
    }

    fn end_snapshot(&mut self) {
        let fetch = self.model.fetch.clone().expect("a fetch is in progress");
        self.drop_fetch(fetch.request);
        if self.session.snapshot_progress(fetch.request).is_none() {
            self.note("(the session no longer takes it: the handover is dropped)");
            return;
        }
        let lines = Self::lines(fetch.keys.as_deref().expect("the keys were read"));
        let rest: Vec<&[u8]> = lines[lines.len() / 2..].iter().map(Vec::as_slice).collect();
        self.input(Input::SnapshotLines {
            request: fetch.request,
            lines: &rest,
        });
        self.input(Input::SnapshotEnd {
            request: fetch.request,
        });
    }

    fn answer_whole(&mut self) {
        let fetch = self.model.fetch.clone().expect("a fetch is in progress");
        self.drop_fetch(fetch.request);
        let lines = Self::lines(fetch.keys.as_deref().expect("the keys were read"));
        let borrowed: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
        let watermark = self.status_handed(&fetch);
        self.input(Input::Snapshot {
            request: fetch.request,
            watermark,
            lines: &borrowed,
        });
    }

    /// The watermark of `fetch`, about to be handed over: what the session learns of the run
    /// that answered.
    fn status_handed(&mut self, fetch: &Fetch) -> Option<Watermark> {
        let (run, watermark) = fetch.status.expect("the status was read");
        if let Some(w) = watermark {
            if let Some(events) = w.events {
                self.oracle.status_handed(self.now, run, w.seq.0, events);
            }
        }
        watermark
    }

    /// Forgets the fetch `request` (answered or dropped), unless a newer one replaced it.
    fn drop_fetch(&mut self, request: SnapshotRequest) {
        if self
            .model
            .fetch
            .as_ref()
            .is_some_and(|f| f.request == request)
        {
            self.model.fetch = None;
        }
    }

    /// The master goes idle; returns how the history ended (a problem is recorded).
    fn go_idle(&mut self) -> Ending {
        self.idle = true;
        let start = self.now;
        if self.model.delayed.is_some() {
            let until = self.now + DELAY;
            self.advance_to(until);
            if let Some(message) = self.model.delayed.take() {
                self.hand(message);
            }
        }
        // The answer in progress completes with what it read; the rest is read now.
        if let Some(fetch) = self.model.fetch.clone() {
            if fetch.begun {
                self.end_snapshot();
            } else {
                if fetch.status.is_none() {
                    self.read_status();
                }
                if fetch.keys.is_none() {
                    self.read_keys();
                }
                self.answer_whole();
            }
        }
        self.drain();
        let end = start + LIVE_BOUND;
        self.advance_to(end);
        let health = self.session.health();
        let mut missing = false;
        let mut extra = false;
        for page in 0..PAGES {
            let claimed = self.claims(page);
            let held = self.model.master.holds(page);
            // Without the master's counters a tail the queue dropped cannot be known (rule R11
            // needs them): its page is not asked to be exact.
            if !self.setup.status && self.oracle.unknowable(page) {
                continue;
            }
            // What no rule can know is a miss at worst, never a hit: it is not asked for.
            let status = self.setup.status.then(|| {
                let w = self.model.master.watermark();
                (self.model.master.run, w.seq.0, w.events.unwrap_or(0))
            });
            if held && !claimed && self.oracle.missing_unknowable(page, status) {
                continue;
            }
            missing |= held && !claimed;
            extra |= claimed && !held;
        }
        self.note(format!(
            "idle for {LIVE_BOUND:?}: health {}, {}",
            health.as_str(),
            self.claims_line()
        ));
        if health != Health::Live {
            if !self.setup.status && health == Health::Recovering && !extra {
                self.note("stall: a master without status counters (expected, visible)");
                return Ending::Stall;
            }
            self.fail(Problem::NotLive {
                health: health.as_str().into(),
            });
        } else if missing || extra {
            self.fail(Problem::NotExact { missing, extra });
        }
        Ending::Live
    }

    /// Moves time to `until`, firing every deadline due on the way.
    fn advance_to(&mut self, until: Instant) {
        let mut fired = 0;
        while let Some(at) = self.session.poll_timeout() {
            if at > until || self.problem.is_some() {
                break;
            }
            fired += 1;
            if fired > MAX_WAKEUPS {
                self.fail(Problem::Busy);
                return;
            }
            self.now = self.now.max(at);
            self.input(Input::Timeout);
        }
        self.now = self.now.max(until);
    }

    /// Hands one input over, executes what it asks, and judges every claim after it.
    fn input(&mut self, input: Input<'_>) {
        if self.trace.is_some() {
            let shown = show_input(&input);
            self.note(format!("> {shown}"));
        }
        let now = self.now;
        let session = &mut self.session;
        let fx = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            session.handle(now, input)
        })) {
            Ok(fx) => fx,
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                self.fail(Problem::Panic(message));
                return;
            }
        };
        self.execute(fx);
        self.judge();
        self.drain();
    }

    fn drain(&mut self) {
        while let Some(reply) = self.inbox.pop_front() {
            if self.problem.is_some() {
                self.inbox.clear();
                return;
            }
            match reply {
                Reply::Connected => self.input(Input::Connected),
                Reply::Verify { request, results } => {
                    let borrowed: Vec<(&str, bool)> =
                        results.iter().map(|(k, b)| (k.as_str(), *b)).collect();
                    self.input(Input::VerifyResult {
                        request,
                        results: &borrowed,
                    });
                }
                Reply::Status { request, watermark } => {
                    self.input(Input::Status { request, watermark });
                }
                Reply::Answer => {
                    if self.model.fetch.is_some() {
                        self.read_status();
                        self.read_keys();
                        self.answer_whole();
                    }
                }
            }
        }
    }

    /// Executes the commands (a driver matches them exhaustively).
    fn execute(&mut self, fx: Effects) {
        for effect in fx {
            match effect {
                hicache_index::Effect::Command(command) => {
                    if self.trace.is_some() {
                        let shown = match &command {
                            // As a set: which slot of the index a page sits in orders the keys
                            // and decides nothing while every key is asked (the shipped sample).
                            Command::VerifyKeys { request, keys } => {
                                let mut names: Vec<String> =
                                    keys.iter().map(|k| short(k)).collect();
                                names.sort();
                                format!(
                                    "VerifyKeys {{ request: {request}, keys: {{{}}} }}",
                                    names.join(", ")
                                )
                            }
                            other => format!("{other:?}"),
                        };
                        self.note(format!("  < {shown}"));
                    }
                    match command {
                        Command::Connect { .. } => {
                            self.connects += 1;
                            self.inbox.push_back(Reply::Connected);
                        }
                        Command::Disconnect => {}
                        Command::FetchSnapshot { request } => {
                            self.model.fetch = Some(Fetch {
                                request,
                                status: None,
                                keys: None,
                                begun: false,
                            });
                            if self.idle {
                                self.inbox.push_back(Reply::Answer);
                            }
                        }
                        Command::VerifyKeys { request, keys } => {
                            let catalog = Catalog::get();
                            let held = &self.model.master.held;
                            let results = keys
                                .into_iter()
                                .map(|k| {
                                    let present =
                                        catalog.key_named(&k).is_some_and(|k| held.contains(&k));
                                    (k, present)
                                })
                                .collect();
                            self.inbox.push_back(Reply::Verify { request, results });
                        }
                        Command::ReadStatus { request } => {
                            let watermark =
                                self.setup.status.then(|| self.model.master.watermark());
                            self.inbox.push_back(Reply::Status { request, watermark });
                        }
                        Command::CheckLeader { .. } | Command::UseMaster { .. } => {
                            // No HA leader is configured: never asked.
                        }
                    }
                }
                hicache_index::Effect::Report(report) => {
                    if self.trace.is_some() && !matches!(report, Report::HealthChanged { .. }) {
                        self.note(format!("  < {report:?}"));
                    }
                }
            }
        }
    }

    /// Reports whether the session claims page `page` (a query through its reader).
    fn claims(&self, page: usize) -> bool {
        self.claimed()[page]
    }

    /// Which pages the session claims: one query through its reader for pages A, B, C, with
    /// each page's answer in the map (an MLA page has one pool: a page in the map is a page a
    /// router asking about it alone is told is there).
    fn claimed(&self) -> [bool; PAGES] {
        let catalog = Catalog::get();
        let lookup = hicache_index::Lookup::page_hashes(&catalog.hashes);
        let mut map = [false; PAGES];
        let hits = match self.reader.query_map(&lookup, &mut map) {
            Ok(hits) => hits,
            // Only a writer on another thread makes a lock-free query give up; there is none.
            Err(e) => panic!("the reader did not answer: {e:?}"),
        };
        let leading = map.iter().take_while(|&&c| c).count();
        assert_eq!(
            hits.prefix_pages, leading,
            "the prefix is the map's leading run"
        );
        map
    }

    fn claims_line(&self) -> String {
        let claimed: String = (0..PAGES)
            .filter(|&p| self.claims(p))
            .map(page_name)
            .collect();
        let held: String = (0..PAGES)
            .filter(|&p| self.model.master.holds(p))
            .map(page_name)
            .collect();
        format!(
            "index claims {{{claimed}}}, master (run {}) holds {{{held}}}",
            self.model.master.run
        )
    }

    /// Notes which pages are claimed now and judges every claim (unless replaying).
    fn judge(&mut self) {
        let claimed = self.claimed();
        for (since, &c) in self.claimed_since.iter_mut().zip(&claimed) {
            *since = if c { since.or(Some(self.now)) } else { None };
        }
        if !self.judging {
            return;
        }
        let health = self.reader.health();
        for (page, _) in claimed.iter().enumerate().filter(|(_, c)| **c) {
            let since = self.claimed_since[page].expect("claimed");
            match self.oracle.judge(self.now, page, since) {
                Judgement::Fine => {}
                Judgement::FalseHit => {
                    self.note(format!(
                        "page {} claimed: {}",
                        page_name(page),
                        self.claims_line()
                    ));
                    self.fail(Problem::FalseHit {
                        health: health.as_str().into(),
                    });
                }
                Judgement::Stale { age } if age > STALE_BOUND => {
                    self.note(format!(
                        "page {} claimed {age:?} after an invisible restart: {}",
                        page_name(page),
                        self.claims_line()
                    ));
                    self.fail(Problem::StaleTooLong);
                }
                Judgement::Stale { .. } => self.excused = true,
            }
        }
    }

    /// A hash of everything that decides what any continuation of this history does: the
    /// model, the oracle's canonical form, the time, and the session's state (its `Debug`
    /// form without counters and configuration, and what its index holds).
    pub fn fingerprint(&self) -> u128 {
        use std::hash::Hash;
        let mut h = fingerprint::Fast::default();
        // The model, with its messages' history positions counted from the oracle's horizon.
        let m = &self.model;
        let message = |msg: &Option<Message>| {
            msg.as_ref().map(|msg| {
                let mut msg = msg.clone();
                msg.pos = self.oracle.relative(self.now, msg.pos);
                msg
            })
        };
        (
            &m.master,
            m.stamped,
            message(&m.delayed),
            message(&m.last_handed),
            &m.fetch,
        )
            .hash(&mut h);
        self.oracle.canonical(self.now).hash(&mut h);
        // Which letters are offered depends on it (see `World::enabled`).
        self.touched_pages().hash(&mut h);
        // When a claim began matters only against a restart's excuse, which begins no earlier
        // than the restart: before one, only whether there is a claim.
        if self.oracle.has_restart() {
            self.claimed_since.hash(&mut h);
        }
        self.now.hash(&mut h);
        self.idle.hash(&mut h);
        fingerprint::hash_debug(&self.session, &mut h);
        let catalog = Catalog::get();
        for key in &catalog.keys {
            self.session
                .index()
                .contains_key(hicache_index::DEFAULT_TENANT, key)
                .hash(&mut h);
        }
        self.claimed().hash(&mut h);
        self.excused.hash(&mut h);
        h.finish128()
    }
}

/// Describes a letter readably, as it applies to `model`.
pub fn describe(letter: Letter, model: &Model) -> String {
    let m = &model.master;
    match letter {
        Letter::Toggle { page, fate } => {
            let p = usize::from(page);
            let verb = if m.holds(p) { "removes" } else { "stores" };
            let events = 1 + u64::from(m.filler);
            let batch = match fate {
                Fate::Dropped => format!(
                    "its batch dropped by the queue (sequences {}..={} skipped)",
                    m.next_seq,
                    m.next_seq + events - 1
                ),
                _ => format!(
                    "batch seq {}, event ids {}..={}{}",
                    m.next_seq,
                    m.next_id,
                    m.next_id + events - 1,
                    match fate {
                        Fate::Delivered => "",
                        Fate::Undecodable => ", undecodable",
                        Fate::Delayed => ", delayed by the network",
                        Fate::Dropped => unreachable!(),
                    }
                ),
            };
            format!("run {} {verb} page {}: {batch}", m.run, page_name(p))
        }
        Letter::Restart { same_sizes } => format!(
            "the master restarts unseen (run {}, batches {} the old run's sizes)",
            m.run + 1,
            if same_sizes { "of" } else { "unlike" }
        ),
        Letter::Reconnect => "the transport reconnects".into(),
        Letter::Copy => "the network hands the last message again".into(),
        Letter::Release => "the delayed batch arrives, past the window".into(),
        Letter::ReadStatus => format!(
            "the driver reads /kv_events/status now (run {}: {:?})",
            m.run,
            m.watermark()
        ),
        Letter::ReadKeys => format!("the driver reads /get_all_keys now (run {})", m.run),
        Letter::Deliver => "the driver begins handing the snapshot over".into(),
        Letter::EndSnapshot => "the driver hands over the rest of the snapshot".into(),
        Letter::Answer => format!(
            "the driver reads status and key list now (run {}) and hands them over",
            m.run
        ),
        Letter::Tick => "time passes to the next deadline".into(),
        Letter::Idle => "the master goes idle".into(),
    }
}

/// Shows an input briefly.
fn show_input(input: &Input<'_>) -> String {
    match input {
        Input::Message(frames) if frames.len() == 3 && frames[1].len() == 8 => {
            let seq = u64::from_be_bytes(frames[1].try_into().expect("eight bytes"));
            match hicache_index::decode(frames) {
                Ok(batch) => format!(
                    "Message seq {seq}, {} events, ids {:?}..={:?}",
                    batch.events.len(),
                    batch.events.first().and_then(|e| e.event_id),
                    batch.events.last().and_then(|e| e.event_id)
                ),
                Err(_) => format!("Message seq {seq}, undecodable"),
            }
        }
        Input::Snapshot {
            request,
            watermark,
            lines,
        } => format!(
            "Snapshot {{ request: {request}, watermark: {}, {} lines }}",
            show_watermark(*watermark),
            lines.len()
        ),
        Input::SnapshotBegin { request, watermark } => format!(
            "SnapshotBegin {{ request: {request}, watermark: {} }}",
            show_watermark(*watermark)
        ),
        Input::SnapshotLines { request, lines } => format!(
            "SnapshotLines {{ request: {request}, {} lines }}",
            lines.len()
        ),
        Input::VerifyResult { request, results } => {
            let mut shown: Vec<String> = results
                .iter()
                .map(|(k, ok)| format!("{}: {ok}", short(k)))
                .collect();
            shown.sort();
            format!(
                "VerifyResult {{ request: {request}, {} }}",
                shown.join(", ")
            )
        }
        other => format!("{other:?}"),
    }
}

fn show_watermark(watermark: Option<Watermark>) -> String {
    match watermark {
        Some(w) => format!("seq {}, events {:?}", w.seq.0, w.events),
        None => "none".into(),
    }
}

/// A page key by its page's name, any other key as it is.
fn short(key: &str) -> String {
    let catalog = Catalog::get();
    match catalog.keys.iter().position(|k| k == key) {
        Some(p) => format!("page {}", page_name(p)),
        None => key.into(),
    }
}
