//! `demo`'s flags: [`DemoArgs`].

use std::time::Duration;

use clap::Args;
use hicache_index_options::parse_duration;

/// `demo [--duration 30s]`
#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    /// How long the workload runs.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30s")]
    pub(super) duration: Duration,
    /// Router threads asking the index.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub(super) routers: usize,
    /// Requests per second, all routers together.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub(super) rate: u32,
    /// The most pages the emulated store holds; beyond it the oldest are removed (with events).
    #[arg(long, value_name = "N", default_value_t = 30_000)]
    pub(super) store_pages: usize,
    /// Seeds the workload.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(super) seed: u64,
}
