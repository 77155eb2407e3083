//! What travels over the network and what it reports: messages, their origin, the events the
//! driver hears and the counts of what the network did.

pub use crate::master::MasterMeta;

/// What the receiver knows about where a message came from (never shown to the session).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The master's publisher.
    Master(MasterMeta),
    /// Another publisher on the same socket, with another topic.
    Stray,
    /// Messages with a wrong number of frames.
    Junk,
}

/// One multipart message in flight.
#[derive(Clone, Debug)]
pub struct Message {
    /// The frames.
    pub frames: Vec<Vec<u8>>,
    /// Where it came from.
    pub origin: Origin,
}

/// What the network reports to the driver.
#[derive(Clone, Debug)]
pub enum NetEvent {
    /// A message arrives.
    Deliver(Message),
    /// The connect asked for succeeded.
    Connected,
    /// The connect asked for failed.
    ConnectFailed,
    /// The connection broke.
    Disconnected,
}

/// Counts of what the network did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Master messages handed to the network.
    pub sent: u64,
    /// Messages delivered (all origins, copies included).
    pub delivered: u64,
    /// Master messages dropped by the drop rule.
    pub dropped: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Payloads truncated.
    pub truncated: u64,
    /// Messages corrupted.
    pub corrupted: u64,
    /// Corruptions that decoded to the same batch (harmless).
    pub harmless_corruptions: u64,
    /// Topics damaged.
    pub bad_topic: u64,
    /// Frame counts damaged.
    pub bad_frame_count: u64,
    /// Connections broken.
    pub disconnects: u64,
    /// Partitions.
    pub partitions: u64,
    /// Master messages lost with the connection, or sent while not connected or in a
    /// slow-joiner or reconnect window.
    pub lost_unconnected: u64,
    /// Messages from the stray publisher and junk.
    pub stray: u64,
    /// Connects that failed.
    pub connect_fails: u64,
    /// Connects that never answered.
    pub connect_hangs: u64,
    /// Payloads replaced by undecodable ones (topic and sequence intact).
    pub garbled: u64,
    /// Late copies delivered.
    pub late_copies: u64,
    /// Late copies delivered on a later connection than the one their message was sent on.
    pub late_after_reconnect: u64,
    /// Master restarts the transport saw (the connection broke at them).
    pub seen_restarts: u64,
    /// Master messages lost at the tail of a burst
    /// ([`Network::lose_published`](crate::network::Network::lose_published)).
    pub lost_at_tail: u64,
}
