//! The run before a restart as a lagging HTTP side still serves it ([`OldView`]).

use std::time::Duration;

use hicache_index::Instant;

use crate::util::IdSet;

use super::messages::Status;

/// The run before a restart as a lagging HTTP side still serves it: what its default tenant
/// held and its counters when it died.
#[derive(Clone, Debug)]
pub(super) struct OldView {
    /// The run (the master's restart count while it ran).
    pub(super) epoch: u32,
    /// Its `/kv_events/status` when it died.
    pub(super) status: Status,
    /// The default tenant's SGLang objects it held.
    pub(super) keys: IdSet,
    /// The foreign keys it held.
    pub(super) foreign: IdSet,
    /// When it died: what it serves is as of then.
    pub(super) died_at: Instant,
    /// The history position it died after: what it serves is as of it.
    pub(super) died_after: u64,
    /// It is served until then (`None`: while the master is down, and then `lag` longer).
    pub(super) until: Option<Instant>,
    pub(super) lag: Duration,
}
