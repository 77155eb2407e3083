//! What the HTTP side has on its way ([`HttpItem`]: requests at the master, answers for the
//! driver), and a snapshot handed to the session ([`Handed`]).

use hicache_index::{
    SignalsRequest, SnapshotRequest, StatusRequest, StoreSignals, VerifyRequest, Watermark,
};

use crate::flight::Point;
use crate::master::Status;

/// A snapshot handed to the session: the history position its key list was read at, and its
/// status point with the run that served it.
#[derive(Copy, Clone, Debug)]
pub(super) struct Handed {
    pub(super) pos: u64,
    pub(super) point: Option<(u32, Point)>,
}

/// A request or an answer on its way. The `Snapshot*` and `Verify*` items named `Server`/`Keys`
/// happen at the master; the others are answers the driver hands to the session (and wait while
/// the driver is stalled).
#[derive(Clone, Debug)]
pub(super) enum HttpItem {
    /// The snapshot request reaches the master: `GET /kv_events/status` is read.
    SnapshotServer {
        request: SnapshotRequest,
    },
    /// `GET /get_all_keys` is read, some time after the status (heavy load).
    SnapshotKeys {
        request: SnapshotRequest,
        /// The status read, and the run that served it.
        status: Option<(u32, Status)>,
        /// Batches the master had sent when the status was read.
        batches: u64,
        /// The master's position when the status was read.
        status_pos: u64,
        /// The run that read the status.
        began: u32,
    },
    /// The key list's answer, on its way to the session.
    SnapshotAnswer(KeyListAnswer),
    SnapshotFailed {
        request: SnapshotRequest,
    },
    /// A status check reaches the master: `GET /kv_events/status` is read.
    StatusServer {
        request: StatusRequest,
    },
    /// A read of the master's signals reaches the master: `GET /metrics` is read.
    SignalsServer {
        request: SignalsRequest,
    },
    /// The signals read's answer (`None`: failed).
    SignalsAnswer {
        request: SignalsRequest,
        signals: Option<StoreSignals>,
    },
    /// A status check's answer (`None`: failed, or no counters).
    StatusAnswer {
        request: StatusRequest,
        watermark: Option<Watermark>,
    },
    VerifyServer {
        request: VerifyRequest,
        keys: Vec<String>,
    },
    VerifyFailed {
        request: VerifyRequest,
    },
    VerifyAnswer {
        request: VerifyRequest,
        keys: Vec<String>,
        found: Vec<bool>,
    },
}

/// A key list's answer as the driver receives it.
#[derive(Clone, Debug)]
pub(super) struct KeyListAnswer {
    /// The request it answers.
    pub(super) request: SnapshotRequest,
    /// The status read, and the run that served it.
    pub(super) status: Option<(u32, Status)>,
    /// The master's position when the status was read.
    pub(super) status_pos: u64,
    /// The key list.
    pub(super) body: Vec<u8>,
    /// The master's position the key list was served at.
    pub(super) pos: u64,
    /// The key list holds foreign keys.
    pub(super) odd: bool,
    /// The answer already waited for a stall (it waits for one at most).
    pub(super) stalled: bool,
}

impl HttpItem {
    /// Reports whether the item is an answer for the driver (it waits while the driver stalls).
    pub(super) fn is_answer(&self) -> bool {
        !matches!(
            self,
            HttpItem::SnapshotServer { .. }
                | HttpItem::SnapshotKeys { .. }
                | HttpItem::VerifyServer { .. }
                | HttpItem::StatusServer { .. }
                | HttpItem::SignalsServer { .. }
        )
    }
}
