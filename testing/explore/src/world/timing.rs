//! The world's times: the reorder window, the network's delay and the liveness bound.

use std::time::Duration;

/// The reorder window's `max_delay` when the window is on (and its `max_held`: 4 batches).
pub const WINDOW: Duration = Duration::from_millis(50);

/// How long the network holds a delayed batch: past the reorder window.
pub const DELAY: Duration = Duration::from_millis(60);

/// How long after the master goes idle the index must be live and exact.
pub const LIVE_BOUND: Duration = Duration::from_secs(30);
