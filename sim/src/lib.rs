//! Deterministic simulator for hicache-index: a Mooncake master model, a faulty network, a
//! reference oracle, and a world that drives a session in virtual time and checks it.
//!
//! Everything is a pure function of one `u64` seed (style rule 11): the seed expands to
//! [`Options`] (a named fault mix, a [`Preset`], plus knobs drawn from the seed), and the run to
//! a [`Report`] whose transcript hash proves determinism.
//!
//! ```text
//! Master --Published--> Network --frames--> System (Session) --Effects--> World
//!    |  records                                  ^  queries              | HTTP: all_keys, batch_query
//!    v                                           |                       v
//! Oracle (event history E, true state T) ---- checks: safety, staleness, liveness, bounds
//! ```
//!
//! # Modules
//! - [`rng`]: the seeded generator; [`options`]: presets and knobs, expanded from a seed;
//!   [`models`]: the models (layouts), tenants and namespaces a run's cluster serves.
//! - [`master`]: the Mooncake master model (puts, replicas, evictions, silent removals, a
//!   bounded queue, restarts, the HTTP side), emitting real frames through [`encode`].
//! - [`network`]: the per-message netem between PUB and SUB.
//! - [`oracle`]: the event history and the true state, and the safety rule (documented there);
//!   [`flight`]: what is still pending for the session, the rule's one excuse.
//! - [`system`]: the session's API as a trait, with a deliberately broken implementation;
//!   [`planted`]: one more broken session per class of false hit the sweep must find.
//! - [`world`]: the driver in virtual time and the checks; [`sweep`]: many seeds, one summary.
//!
//! # Running it
//! - Sweep: `cargo run -p hicache-index-sim --release -- --seeds 0..10000 [--preset NAME]
//!   [--events N] [--jobs N]`; every failing seed is printed with its options and the command
//!   that replays it, and the exit status is 1.
//! - Replay one seed in the tests: `SIM_SEED=n [SIM_PRESET=..] [SIM_EVENTS=..] [SIM_TRACE=1]
//!   cargo test -p hicache-index-sim --test replay -- --nocapture`, or on the command line with
//!   `--trace`.
//! - The CI sweep: `cargo test -p hicache-index-sim --release --test sweep -- --ignored`
//!   (seeds 0..1500, each with the named worlds it draws, [`options::WorldKind`]; it also checks
//!   that every fault kind ran, every world was drawn, and that every planted bug is caught by
//!   those seeds). Longer sweeps use seeds from 100,000 on; `--worlds NAME` runs one world
//!   alone (`SIM_WORLDS=NAME` for the replay test).
//! - Which fault class a failure needs: `--without stalls,heavy-http,...`
//!   ([`Options::CLASSES`]); a sweep against a planted bug: `--planted NAME` ([`Bug`]).
//! - Nothing is avoided: every fault kind runs in the sweep; each false hit the simulator found
//!   has a regression test in `sim/tests/regressions.rs`.

pub use hicache_index_wire as encode;
pub mod flight;
pub mod master;
pub mod models;
pub mod network;
pub mod options;
pub mod oracle;
pub mod planted;
pub mod rng;
pub mod sweep;
pub mod system;
pub mod util;
pub mod world;

pub use options::{Options, Preset};
pub use planted::{Bug, PlantedBug};
pub use system::{GapBlindSession, System};
pub use world::{run, run_catching, run_with, Failure, FailureKind, Report, RunStats, World};
