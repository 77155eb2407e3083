//! What the benchmarks of every crate share, and the core's own benchmarks (`benches/`).
//!
//! - [`perf`]: a bench's command line (quick mode, filters) and where it leaves its figures.
//! - [`reference`](mod@reference): the first implementation's index, the benchmarks' yardstick.
//! - [`workload`]: the TP 8 layout, token chains and Mooncake batches of its pages.
//!
//! It sits on the core (and the wire encoder) alone, so that the benches of every crate above,
//! the simulator's included, can use it.

pub mod perf;
pub mod reference;
pub mod workload;
