//! The session's parts: each file holds the state of one part (the connection, the resync and
//! where it stands, a reconcile, verification, the watch, the health, the ledger, the workers, a
//! batch kept for later) with the methods that need only that part, or plain data the session
//! hands out (its status, its models) or uses (a key's checksum term). A part imports other
//! parts and the configuration, never the session: what coordinates parts is the session's own
//! (`impl Session` in the files beside `mod.rs`, named like the parts they work on).

pub(super) mod checksum;
pub(super) mod health;
pub(super) mod ledger;
pub(super) mod link;
pub(super) mod reconcile;
pub(super) mod resync;
pub(super) mod resync_state;
pub(super) mod status;
pub(super) mod stream;
pub(super) mod verify;
pub(super) mod watch;
pub(super) mod workers;
