//! The session's parts: each holds one part of its state (the connection, the resync and its
//! fetch, a reconcile, verification, the watch, the health, the ledger, the workers) with the
//! methods that need only that part, plus the plain data a session hands out (its status, its
//! models). A part never reaches the session or another part's owner; what coordinates parts
//! is the session's own (`impl Session` in the files beside `mod.rs`, which import the session
//! and its parts, and which the session does not import).

pub(super) mod fetch;
pub(super) mod health;
pub(super) mod ledger;
pub(super) mod link;
pub(super) mod reconcile;
pub(super) mod resync;
pub(super) mod status;
pub(super) mod stream;
pub(super) mod verify;
pub(super) mod watch;
pub(super) mod workers;
