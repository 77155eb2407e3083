//! The ZeroMQ side: a SUB socket for the events and an inproc PAIR monitor for its connection
//! state, opened afresh for every [`hicache_index::Command::Connect`].
//!
//! # Readiness
//! A runtime waits on each socket's `ZMQ_FD` (`zmq::Socket` implements `AsRawFd`). That FD is
//! edge-triggered and only says "look at `ZMQ_EVENTS`": after every wake-up the driver MUST
//! receive with `DONTWAIT` until `EAGAIN` and then see `get_events()` without `POLLIN` before it
//! waits again, or it hangs. [`recv_message`] and [`has_input`] do exactly that.
//!
//! # Reconnection
//! libzmq's own reconnection is off in effect: the core owns the backoff, and every `Connect`
//! makes new sockets, so nothing queued for an old endpoint leaks into the new stream. The
//! interval is the largest (`i32::MAX` ms) rather than `-1`: with `-1`, a lost connection makes
//! libzmq 4.3.4 terminate the SUB socket's pipe from inside `recv`, and a multipart message being
//! received at that moment aborts the process (`Assertion failed: !_more (src/fq.cpp:112)`,
//! libzmq issue 2163); a master restart under load did exactly that.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::SocketConfig;

/// The most frames of one message kept for feeding; further frames are received and dropped
/// (such a message is a stray anyway: the core wants exactly three).
pub const MAX_FRAMES: usize = 8;

/// A freshly opened subscription: the SUB socket, already connecting, and its monitor.
pub struct Link {
    /// The SUB socket (connect, subscribed to the configured topic).
    pub sub: zmq::Socket,
    /// The PAIR socket receiving the SUB socket's monitor events.
    pub monitor: zmq::Socket,
    /// The endpoint connected to.
    pub endpoint: String,
}

/// A connection state change read from the monitor.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LinkEvent {
    /// The ZMTP handshake with the publisher succeeded: the subscription is on its way.
    Connected,
    /// The connection was lost, refused, or its handshake failed.
    Disconnected,
    /// Anything else (connect delayed, TCP connected, monitor stopped): logged only.
    Other(u16),
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

static MONITOR_IDS: AtomicU64 = AtomicU64::new(0);

/// Opens a SUB socket to `endpoint` subscribed to `topic`, with the limits of `config`, and its
/// monitor.
///
/// The topic filter of ZeroMQ is a prefix match: the empty Mooncake topic matches everything,
/// which is why the core checks every message's topic again.
pub fn open(
    ctx: &zmq::Context,
    endpoint: &str,
    topic: &[u8],
    config: &SocketConfig,
) -> Result<Link, zmq::Error> {
    let sub = ctx.socket(zmq::SUB)?;
    sub.set_linger(0)?;
    sub.set_maxmsgsize(config.max_message_bytes)?;
    sub.set_rcvhwm(config.receive_hwm)?;
    sub.set_reconnect_ivl(i32::MAX)?;
    let millis = |d: std::time::Duration| i32::try_from(d.as_millis()).unwrap_or(i32::MAX);
    if !config.heartbeat_interval.is_zero() {
        sub.set_heartbeat_ivl(millis(config.heartbeat_interval))?;
        sub.set_heartbeat_timeout(millis(config.heartbeat_timeout))?;
    }
    sub.set_subscribe(topic)?;
    let id = MONITOR_IDS.fetch_add(1, Ordering::Relaxed);
    let address = format!("inproc://hicache-index-monitor-{}-{id}", std::process::id());
    let events = zmq::SocketEvent::HANDSHAKE_SUCCEEDED as i32
        | zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL as i32
        | zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL as i32
        | zmq::SocketEvent::HANDSHAKE_FAILED_AUTH as i32
        | zmq::SocketEvent::CONNECTED as i32
        | zmq::SocketEvent::DISCONNECTED as i32
        | zmq::SocketEvent::CLOSED as i32;
    sub.monitor(&address, events)?;
    let monitor = ctx.socket(zmq::PAIR)?;
    monitor.set_linger(0)?;
    monitor.connect(&address)?;
    sub.connect(endpoint)?;
    Ok(Link {
        sub,
        monitor,
        endpoint: endpoint.to_owned(),
    })
}

/// Receives one whole message without waiting: its frame count, with up to [`MAX_FRAMES`]
/// frames in `parts` (grown as needed). `Err(zmq::Error::EAGAIN)` means nothing is queued.
pub fn recv_message(
    socket: &zmq::Socket,
    parts: &mut Vec<zmq::Message>,
) -> Result<usize, zmq::Error> {
    let mut count = 0;
    let mut spill = zmq::Message::new();
    loop {
        if count == parts.len() && parts.len() < MAX_FRAMES {
            parts.push(zmq::Message::new());
        }
        let slot = parts.get_mut(count).unwrap_or(&mut spill);
        socket.recv(slot, zmq::DONTWAIT)?;
        count += 1;
        if !slot.get_more() {
            return Ok(count);
        }
    }
}

/// Reports whether `ZMQ_EVENTS` shows a queued message (the check that re-arms the edge).
pub fn has_input(socket: &zmq::Socket) -> bool {
    socket
        .get_events()
        .map(|e| e.contains(zmq::POLLIN))
        .unwrap_or(false)
}

/// Reads one monitor message (`[event u16 + value u32, endpoint]`) as a [`LinkEvent`].
pub fn parse_monitor_event(first_frame: &[u8]) -> Option<LinkEvent> {
    let raw = u16::from_ne_bytes(first_frame.get(..2)?.try_into().ok()?);
    let event = zmq::SocketEvent::from_raw(raw);
    Some(match event {
        zmq::SocketEvent::HANDSHAKE_SUCCEEDED => LinkEvent::Connected,
        zmq::SocketEvent::DISCONNECTED
        | zmq::SocketEvent::CLOSED
        | zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL
        | zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL
        | zmq::SocketEvent::HANDSHAKE_FAILED_AUTH => LinkEvent::Disconnected,
        _ => LinkEvent::Other(raw),
    })
}
