//! One history being played: the real [`Session`], driven through [`Session::handle`] by a
//! driver that executes its commands against the [`Model`], and judged by the [`Oracle`] after
//! every input, through the session's [`Reader`].

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Arc;

use hicache_index::{
    Command, Effects, Health, Input, Instant, Reader, Report, Session, SnapshotRequest,
    StatusRequest, VerifyRequest, Watermark,
};

use crate::model::{Catalog, Fetch, Key, Master, Message, Model, EPOCH_MS, PAGES};
use crate::oracle::Oracle;

mod judge;
mod letters;
mod show;
mod timing;

pub use self::letters::{Ending, Fate, Letter, Problem, Setup};
pub use self::show::describe;
use self::show::{short, show_input};
pub use self::timing::{DELAY, LIVE_BOUND, WINDOW};

/// The most timeouts one letter may fire (more is a session that keeps asking for a wake-up
/// without moving on).
const MAX_WAKEUPS: usize = 1_000;

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
    /// Faults played so far ([`Letter::is_fault`]).
    faults: u8,
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
            faults: 0,
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
        if self.setup.max_faults.is_some_and(|max| self.faults >= max) {
            letters.retain(|l| !l.is_fault());
        }
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
        if letter.is_fault() {
            self.faults = self.faults.saturating_add(1);
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
        let run = self.model.master.run;
        let fetch = self.model.fetch.as_mut().expect("a fetch is in progress");
        fetch.keys = Some((run, keys));
    }

    /// The key list `fetch` read: the run that answered, and its keys.
    fn list(fetch: &Fetch) -> (u8, &[Key]) {
        let (run, keys) = fetch.keys.as_ref().expect("the keys were read");
        (*run, keys)
    }

    /// Tells the oracle the key list of `fetch` is handed whole now.
    fn list_handed(&mut self, fetch: &Fetch) {
        let (run, keys) = Self::list(fetch);
        let mut named = [false; PAGES];
        for key in keys {
            if let Key::Page(p) = key {
                named[usize::from(*p)] = true;
            }
        }
        self.oracle.list_handed(self.now, run, named);
    }

    fn lines(keys: &[Key]) -> Vec<Vec<u8>> {
        let catalog = Catalog::get();
        keys.iter().map(|k| catalog.name(*k).into_bytes()).collect()
    }

    fn deliver(&mut self) {
        let fetch = self.model.fetch.clone().expect("a fetch is in progress");
        let watermark = self.status_handed(&fetch);
        let lines = Self::lines(Self::list(&fetch).1);
        self.input(Input::SnapshotBegin {
            request: fetch.request,
            watermark,
        });
        if self
            .session
            .status(self.now)
            .snapshot_applied(fetch.request)
            .is_none()
        {
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
        if self
            .session
            .status(self.now)
            .snapshot_applied(fetch.request)
            .is_none()
        {
            self.note("(the session no longer takes it: the handover is dropped)");
            return;
        }
        let lines = Self::lines(Self::list(&fetch).1);
        let rest: Vec<&[u8]> = lines[lines.len() / 2..].iter().map(Vec::as_slice).collect();
        self.input(Input::SnapshotLines {
            request: fetch.request,
            lines: &rest,
        });
        self.list_handed(&fetch);
        self.input(Input::SnapshotEnd {
            request: fetch.request,
        });
    }

    fn answer_whole(&mut self) {
        let fetch = self.model.fetch.clone().expect("a fetch is in progress");
        self.drop_fetch(fetch.request);
        let lines = Self::lines(Self::list(&fetch).1);
        let borrowed: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
        let watermark = self.status_handed(&fetch);
        self.list_handed(&fetch);
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
        let health = self.session.status(self.now).health;
        let mut missing = false;
        let mut extra = false;
        let claims = self.claimed();
        for (page, &claimed) in claims.iter().enumerate() {
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
        if self.trace.is_some() {
            let line = self.claims_line();
            self.note(format!(
                "idle for {LIVE_BOUND:?}: health {}, {line}",
                health.as_str()
            ));
        }
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
                        Command::ReadSignals { .. } => {
                            // The watch is off (`Setup::config`): never asked.
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
}
