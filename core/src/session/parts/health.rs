//! The state of the health: the health every answer carries and why the index was last reported
//! recovering (what the session does with it: `session/health.rs`).

use crate::effect::{Health, Recovering};

/// The session's health, and what it last reported of it.
#[derive(Debug)]
pub(in crate::session) struct HealthState {
    pub(in crate::session) health: Health,
    /// Why the index was recovering when it was last reported
    /// ([`Report::Recovering`](crate::effect::Report::Recovering)).
    pub(in crate::session) recovering: Option<Recovering>,
    /// The last status read said the publisher is off.
    pub(in crate::session) events_disabled: bool,
}

impl HealthState {
    pub(in crate::session) fn new() -> HealthState {
        HealthState {
            health: Health::Disconnected,
            recovering: None,
            events_disabled: false,
        }
    }
}
