//! The exhaustive checker of issue 26: every history up to a depth over an alphabet of master
//! and network steps, played through the real [`hicache_index::Session`] and judged after every
//! input against the master's true state.
//!
//! # What it plays
//! - [`model`]: the master (runs, what it holds, sequences and event ids as spec section 3
//!   says), the network and the driver's HTTP answers, as plain data;
//! - [`world`]: one history: the real session, handed real frames (encoded by
//!   `hicache-index-wire`), real `Snapshot`/`SnapshotBegin..End`, `VerifyResult`s and
//!   `Timeout`s as time passes, its commands executed, its claims read through its
//!   [`hicache_index::Reader`];
//! - [`oracle`]: which claims are allowed (the simulator's safety rule, with its one excuse);
//! - [`mod@explore`]: the enumeration, breadth first, merging histories that reach the same state.
//!
//! # The alphabet ([`Letter`])
//! A change of the master (store or remove page A, B or C) whose batch is delivered, dropped
//! by the master's queue, undecodable, or delayed past the reorder window; a restart the
//! transport does not see (the new run's batches of the old run's sizes or not, ids from 1);
//! a reconnect (a restart the transport sees is a restart, then a reconnect); a copy of the
//! last message; the delayed batch's arrival; the driver reading `/kv_events/status` and
//! `/get_all_keys` at any point (of whichever run serves then) and handing them over whole or
//! in two chunks; time passing to the next deadline; the master going idle. Two runs, three
//! pages. Pages no change has touched yet are interchangeable, so only the first of them is
//! offered: every history is played up to renaming those.
//!
//! # How many
//! Depth `d` plays every history of `d` letters and, after each of its prefixes, the master
//! going idle. Histories that reach the same state are merged ([`World::fingerprint`]; an
//! audit replays merged pairs under the same continuations and fails the run if they differ).
//! Each level has about 15 times the histories of the one before, and about three in four of
//! them reach a state not seen before. Depth 6 (CI) expands 210,000 to 250,000 distinct states
//! and plays 10.2 to 10.5 million histories a world: 19 to 65 s on both cores of this
//! project's machine. Depth 7 is 14 to 16 times that (the shipped world, window off and status
//! on: 168.6 million histories over 3.55 million states, 18 minutes on both cores), and depth
//! 8 about 230 times (hours of both cores a world). [`Setup::max_faults`] bounds the faults a
//! history may hold (a batch dropped, undecodable or delayed, a restart, a reconnect, a copy:
//! [`Letter::is_fault`]). Depth 8 with at most one fault (CI, all four worlds) expands
//! 300,000 to 420,000 states a world, about a minute at most on both cores. With at most two
//! (about 7 times more states a level), the two shipped worlds (window off) expand 3.2 and
//! 2.6 million states and play 63.6 and 72.1 million histories, in 8.3 minutes (status on)
//! and 3.8 (status off) on both cores: too long for CI's budget. With a window and status
//! counters, 62.0 million histories over 3.14 million states in 7.6 minutes, 0 failed (it
//! found a false hit there, a late batch of a run left: `tests/histories.rs`, closed by R7).
//!
//! # What it checks
//! - after every input: no page claimed that the master's true state lacks, except while a
//!   change is pending for the session, and except the one class no stream can tell (an
//!   unseen restart whose first message continues the old run exactly), which must end within
//!   [`oracle::STALE_BOUND`] (verification bounds it);
//! - once the master is idle (and reachable): the index is live and exact within
//!   [`world::LIVE_BOUND`]; a master without status counters may instead leave it visibly
//!   recovering, which is counted as a stall (neither pass nor failure). A page the master
//!   holds may stay a miss only where no rule can know it ([`oracle::Oracle::missing_unknowable`]:
//!   the other side of rule R10, and, without counters, a dropped tail or a masquerade).
//!
//! It uses only the core's public API.

pub mod explore;
pub mod fingerprint;
pub mod model;
pub mod oracle;
pub mod world;

pub use explore::{explore, Class, Options, Summary};
pub use world::{Fate, Letter, Problem, Setup, World};
