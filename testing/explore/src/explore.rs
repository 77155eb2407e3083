//! The enumeration: breadth first over histories, one level per letter, merging histories that
//! reach the same state (see [`World::fingerprint`]), replaying each state's first history from
//! the root to expand it (a session cannot be cloned).
//!
//! Breadth first makes the first failure found of each class a shortest one. Histories are
//! counted exactly over the graph of states: a state reached by several histories is expanded
//! once, and its continuations count once per history that reaches it.
//!
//! The last level is not merged: each history one letter short of the depth is played on to
//! its last letter and then to idle on the same session, so the deepest histories (most of
//! them) cost neither a replay nor a fingerprint, and their endings are played, not inferred
//! from a merged state.
//!
//! A failure ends its history (it is not continued). Failures are told apart by the problem
//! and by which kinds of fault and interleaving their history holds ([`Letter::kind`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::world::{Ending, Letter, Problem, Setup, World};

/// What to explore.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// The world.
    pub setup: Setup,
    /// Every history of this many letters is played, each prefix followed by the master
    /// going idle ([`Letter::Idle`]).
    pub depth: usize,
    /// Threads.
    pub jobs: usize,
    /// How many merges of two histories into one state to audit (see [`audit`]).
    pub audits: usize,
}

/// What became of one letter played after a state.
#[derive(Clone, Copy, Debug)]
enum Edge {
    /// The state reached.
    To(u32),
    /// The history ended.
    End(End<u32>),
    /// The history reached the last level and was played on to idle at once: how that ended.
    Idled(End<u32>),
}

/// How a history ended; `F` names a failure (the problem, then the class's number).
#[derive(Clone, Copy, Debug)]
enum End<F> {
    /// The master went idle and the index was live and exact in time (`true`: after an
    /// excused claim on the way).
    Live(bool),
    /// The master went idle without status counters, the index visibly recovering.
    Stall,
    /// A problem was found.
    Failed(F),
}

impl<F> End<F> {
    /// The same ending with its failure named by `f`.
    fn map<G>(self, f: impl FnOnce(F) -> G) -> End<G> {
        match self {
            End::Live(excused) => End::Live(excused),
            End::Stall => End::Stall,
            End::Failed(failure) => End::Failed(f(failure)),
        }
    }
}

/// What one letter played after a state gave.
enum Played {
    State(u128),
    End(End<Problem>),
    Idled(End<Problem>),
}

/// How much of a state's continuation [`expand`] plays.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// Every enabled letter, each child fingerprinted.
    Letters,
    /// Every enabled letter, each child then played to idle at once (the level before the
    /// last).
    LettersThenIdle,
    /// Only the idle ending (the last level: a state first reached earlier).
    Idle,
}

/// What expanding one state gave: its index in the level, each letter's outcome, and the
/// letters played.
type Expanded = (usize, Vec<(Letter, Played)>, u64);

/// One failure class: a problem, and the kinds of fault in its histories.
#[derive(Clone, Debug)]
pub struct Class {
    /// The problem.
    pub problem: Problem,
    /// The kinds of fault and interleaving its histories hold.
    pub kinds: BTreeSet<&'static str>,
    /// Histories that end in it.
    pub histories: u128,
    /// A shortest history that shows it.
    pub example: Vec<Letter>,
    /// That history played again with its trace: every input, effect and judgement.
    pub trace: String,
}

/// One level of the enumeration: the states reached by histories of that many letters.
#[derive(Clone, Copy, Debug, Default)]
pub struct Level {
    /// Distinct states reached at this level (some may have been expanded at an earlier one).
    pub states: usize,
    /// States first reached here, and expanded.
    pub new_states: usize,
    /// Histories of this many letters that did not end before it (not ended, not failed).
    pub histories: u128,
    /// Of those, the ones played on to idle at once, not merged into states (at the last
    /// level: see the module docs).
    pub idled: u128,
}

/// What an exploration found.
#[derive(Clone, Debug)]
pub struct Summary {
    /// What was explored.
    pub options: Options,
    /// Per level, from the root (level 0).
    pub levels: Vec<Level>,
    /// Distinct states expanded.
    pub states: usize,
    /// Every history played: each letter sequence once, idle endings and failures included.
    pub histories: u128,
    /// Histories that ended with the master idle and the index live and exact.
    pub live: u128,
    /// Of those, the ones whose session held a claim excused by an invisible restart on the
    /// way (the class whose bound, [`crate::oracle::STALE_BOUND`], is asserted).
    pub live_after_excuse: u128,
    /// Histories that ended with a master without status counters idle and the index visibly
    /// recovering (expected, neither pass nor failure).
    pub stalls: u128,
    /// Letters played by the session, replays included.
    pub letters_played: u64,
    /// The failure classes, in the order found.
    pub failures: Vec<Class>,
    /// Merges audited, and those whose histories then behaved differently (the fingerprint
    /// left out something that decides behaviour: the counts above are then not to be trusted).
    pub audited: usize,
    /// The first merge that behaved differently: both histories and the continuation.
    pub unsound: Option<String>,
}

impl Summary {
    /// Histories that failed.
    pub fn failed(&self) -> u128 {
        self.failures.iter().map(|c| c.histories).sum()
    }

    /// The classes whose kinds hold no other class's kinds of the same problem: the distinct
    /// ways found to break each rule.
    pub fn minimal_classes(&self) -> Vec<&Class> {
        self.failures
            .iter()
            .filter(|c| {
                !self.failures.iter().any(|o| {
                    o.problem == c.problem && o.kinds != c.kinds && o.kinds.is_subset(&c.kinds)
                })
            })
            .collect()
    }
}

/// Plays `history` from the root; returns the world after it. Without a trace the claims are
/// not judged on the way (they were when the history was first played).
pub fn replay(setup: Setup, history: &[Letter], trace: bool) -> World {
    let mut world = World::new(setup, trace);
    world.set_judging(trace);
    for &letter in history {
        let _ = world.play(letter);
    }
    world.set_judging(true);
    world
}

/// Expands the state `history` reaches as `reach` says, each letter played on a replay of its
/// own. Returns what each gave and the letters played.
fn expand(setup: Setup, history: &[Letter], reach: Reach) -> (Vec<(Letter, Played)>, u64) {
    let mut world = Some(replay(setup, history, false));
    let mut played = history.len() as u64;
    let letters = match (&world, reach) {
        (_, Reach::Idle) => vec![Letter::Idle],
        (Some(w), _) => w.enabled(),
        (None, _) => unreachable!("the world was just made"),
    };
    let count = letters.len();
    let mut out = Vec::with_capacity(count);
    for (i, letter) in letters.into_iter().enumerate() {
        let mut w = match world.take() {
            Some(w) if i + 1 == count => w,
            other => {
                world = other;
                played += history.len() as u64;
                replay(setup, history, false)
            }
        };
        played += 1;
        let result = match (ended(&mut w, letter), reach) {
            (Some(end), _) => Played::End(end),
            (None, Reach::LettersThenIdle) => {
                played += 1;
                Played::Idled(ended(&mut w, Letter::Idle).expect("idle ends a history"))
            }
            (None, _) => Played::State(w.fingerprint()),
        };
        out.push((letter, result));
    }
    (out, played)
}

/// Plays `letter`; returns how the history ended, if it did.
fn ended(w: &mut World, letter: Letter) -> Option<End<Problem>> {
    let ending = w.play(letter);
    match (w.problem(), ending) {
        (Some((problem, _)), _) => Some(End::Failed(problem.clone())),
        (None, Some(Ending::Live)) => Some(End::Live(w.saw_excused_claim())),
        (None, Some(Ending::Stall)) => Some(End::Stall),
        (None, None) => None,
    }
}

/// Runs the exploration.
pub fn explore(options: Options) -> Summary {
    let setup = options.setup;
    let root_fp = World::new(setup, false).fingerprint();
    // Every state: its first history (dropped once expanded) and its edges.
    let mut histories: Vec<Vec<Letter>> = vec![Vec::new()];
    let mut edges: Vec<Option<Vec<(Letter, Edge)>>> = vec![None];
    let mut ids: HashMap<u128, u32> = HashMap::from([(root_fp, 0)]);
    let mut classes: HashMap<(Problem, BTreeSet<&'static str>), u32> = HashMap::new();
    let mut summary = Summary {
        options,
        levels: Vec::new(),
        states: 0,
        histories: 0,
        live: 0,
        live_after_excuse: 0,
        stalls: 0,
        letters_played: 0,
        failures: Vec::new(),
        audited: 0,
        unsound: None,
    };
    // Merges of a history into a state another history reached first, sampled for the audit.
    let mut merges: Vec<(Vec<Letter>, Vec<Letter>)> = Vec::new();
    let mut merges_seen = 0usize;
    // The states at this level and how many histories reach each.
    let mut level: Vec<(u32, u128)> = vec![(0, 1)];
    // Histories of the next level played on to idle at once (not merged into states).
    let mut idled: u128 = 0;
    for d in 0..=options.depth {
        let last = d == options.depth;
        let reach = match options.depth - d {
            0 => Reach::Idle,
            1 => Reach::LettersThenIdle,
            _ => Reach::Letters,
        };
        let expand_now: Vec<u32> = level
            .iter()
            .map(|&(s, _)| s)
            .filter(|&s| edges[s as usize].is_none())
            .collect();
        summary.levels.push(Level {
            states: level.len(),
            new_states: expand_now.len(),
            histories: level.iter().map(|&(_, n)| n).sum::<u128>() + idled,
            idled,
        });
        let next = AtomicUsize::new(0);
        let results: Mutex<Vec<Expanded>> = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..options.jobs.max(1) {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&state) = expand_now.get(i) else {
                        break;
                    };
                    let (children, played) = expand(setup, &histories[state as usize], reach);
                    results
                        .lock()
                        .expect("no worker panics holding it")
                        .push((i, children, played));
                });
            }
        });
        let mut results = results.into_inner().expect("no worker panicked");
        results.sort_unstable_by_key(|(i, _, _)| *i);
        for (i, children, played) in results {
            summary.letters_played += played;
            let state = expand_now[i];
            let mut out = Vec::with_capacity(children.len());
            for (letter, result) in children {
                let mut failed = |problem: Problem, tail: &[Letter]| {
                    let mut example = histories[state as usize].clone();
                    example.push(letter);
                    example.extend_from_slice(tail);
                    let kinds: BTreeSet<&'static str> =
                        example.iter().filter_map(|l| l.kind()).collect();
                    let failures = &mut summary.failures;
                    *classes
                        .entry((problem.clone(), kinds.clone()))
                        .or_insert_with(|| {
                            failures.push(Class {
                                problem,
                                kinds,
                                histories: 0,
                                example,
                                trace: String::new(),
                            });
                            (failures.len() - 1) as u32
                        })
                };
                let edge = match result {
                    Played::State(fp) => {
                        let id = match ids.get(&fp) {
                            Some(&id) => {
                                let first = &histories[id as usize];
                                // Same-level merges still have the first history at hand.
                                if first.len() == d + 1 && merges.len() < options.audits {
                                    merges_seen += 1;
                                    if merges_seen % 7 == 1 {
                                        let mut h = histories[state as usize].clone();
                                        h.push(letter);
                                        merges.push((first.clone(), h));
                                    }
                                }
                                id
                            }
                            None => {
                                let mut h = histories[state as usize].clone();
                                h.push(letter);
                                histories.push(h);
                                edges.push(None);
                                let id = (edges.len() - 1) as u32;
                                ids.insert(fp, id);
                                id
                            }
                        };
                        Edge::To(id)
                    }
                    Played::End(end) => Edge::End(end.map(|p| failed(p, &[]))),
                    Played::Idled(end) => Edge::Idled(end.map(|p| failed(p, &[Letter::Idle]))),
                };
                out.push((letter, edge));
            }
            edges[state as usize] = Some(out);
            summary.states += 1;
        }
        for &state in &expand_now {
            histories[state as usize] = Vec::new();
        }
        // Count the histories through every edge of this level.
        let mut next_level: Vec<(u32, u128)> = Vec::new();
        let mut slot_of: HashMap<u32, usize> = HashMap::new();
        idled = 0;
        for &(state, n) in &level {
            let expanded = edges[state as usize].as_ref().expect("expanded");
            // At the last level only the idle ending counts (a state expanded at an earlier
            // level has every letter's edge).
            for &(_, edge) in expanded.iter().filter(|(l, _)| !last || *l == Letter::Idle) {
                summary.histories += n;
                let end = match edge {
                    Edge::To(child) => {
                        let slot = *slot_of.entry(child).or_insert_with(|| {
                            next_level.push((child, 0));
                            next_level.len() - 1
                        });
                        next_level[slot].1 += n;
                        continue;
                    }
                    Edge::End(end) => end,
                    Edge::Idled(end) => {
                        // The history of the next level, and its idle ending.
                        idled += n;
                        summary.histories += n;
                        end
                    }
                };
                match end {
                    End::Live(excused) => {
                        summary.live += n;
                        if excused {
                            summary.live_after_excuse += n;
                        }
                    }
                    End::Stall => summary.stalls += n,
                    End::Failed(class) => summary.failures[class as usize].histories += n,
                }
            }
        }
        if last {
            break;
        }
        level = next_level;
    }
    for (i, (a, b)) in merges.iter().enumerate() {
        summary.audited += 1;
        if let Some(report) = audit(setup, a, b, i as u64) {
            summary.unsound = Some(report);
            break;
        }
    }
    for class in &mut summary.failures {
        let world = replay(setup, &class.example, true);
        class.trace = match world.problem() {
            Some((_, Some(trace))) => trace.clone(),
            _ => world.trace().to_owned(),
        };
    }
    summary
}

/// Checks that two histories merged into one state behave alike: the same random
/// continuations (seeded by `seed`), played after each, must give the same trace. Returns a
/// report of the first difference.
pub fn audit(setup: Setup, a: &[Letter], b: &[Letter], seed: u64) -> Option<String> {
    let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for _ in 0..4 {
        let mut wa = replay(setup, a, true);
        let mut wb = replay(setup, b, true);
        let (from_a, from_b) = (wa.trace().len(), wb.trace().len());
        let mut continuation = Vec::new();
        for _ in 0..4 {
            let (la, lb) = (wa.enabled(), wb.enabled());
            if la != lb {
                return Some(format!(
                    "histories {a:?} and {b:?} merged, then after {continuation:?} enable {la:?} and {lb:?}"
                ));
            }
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let letter = la[(rng % la.len() as u64) as usize];
            continuation.push(letter);
            let _ = wa.play(letter);
            let _ = wb.play(letter);
            if letter == Letter::Idle {
                break;
            }
        }
        let (ta, tb) = (&wa.trace()[from_a..], &wb.trace()[from_b..]);
        if ta != tb {
            return Some(format!(
                "histories {a:?} and {b:?} merged, then {continuation:?} gave\n{ta}\nand\n{tb}"
            ));
        }
    }
    None
}

/// Renders a summary readably: the counts, then each distinct way found to break a rule
/// ([`Summary::minimal_classes`]) with a shortest history and its trace.
pub fn render(summary: &Summary, took: std::time::Duration) -> String {
    use std::fmt::Write as _;
    let o = &summary.options;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "== exhaustive check: {}, depth {} (every history of {} letters, each prefix then idle), {} jobs",
        o.setup.name(),
        o.depth,
        o.depth,
        o.jobs
    );
    for (d, level) in summary.levels.iter().enumerate() {
        if level.idled > 0 {
            let _ = writeln!(
                out,
                "   level {d}: {} histories, {} played on to idle at once (not merged), the rest reach {} distinct states ({} new)",
                level.histories, level.idled, level.states, level.new_states
            );
        } else {
            let _ = writeln!(
                out,
                "   level {d}: {} histories reach {} distinct states ({} new)",
                level.histories, level.states, level.new_states
            );
        }
    }
    let _ = writeln!(
        out,
        "   histories {}: live and exact {} ({} after a claim excused by an invisible restart), expected stalls {}, failed {}; distinct states expanded {}; letters played {} (replays included); {:.1} s",
        summary.histories,
        summary.live,
        summary.live_after_excuse,
        summary.stalls,
        summary.failed(),
        summary.states,
        summary.letters_played,
        took.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "   merges audited: {} ({})",
        summary.audited,
        if summary.unsound.is_some() {
            "ONE BEHAVED DIFFERENTLY: the counts are not to be trusted"
        } else {
            "each behaved alike under the same continuations"
        }
    );
    if let Some(report) = &summary.unsound {
        let _ = writeln!(out, "{report}");
    }
    let mut by_problem: BTreeMap<&Problem, (u128, usize)> = BTreeMap::new();
    for c in &summary.failures {
        let e = by_problem.entry(&c.problem).or_default();
        e.0 += c.histories;
        e.1 += 1;
    }
    for (problem, (histories, classes)) in &by_problem {
        let _ = writeln!(
            out,
            "   FAILED {problem}: {histories} histories in {classes} combinations of fault kinds"
        );
    }
    for class in summary.minimal_classes() {
        let kinds: Vec<&str> = class.kinds.iter().copied().collect();
        let _ = writeln!(
            out,
            "\n-- {}: {} histories with faults [{}]; a shortest one ({} letters):",
            class.problem,
            class.histories,
            kinds.join(", "),
            class.example.len()
        );
        out.push_str(&class.trace);
    }
    out
}
