//! A tap on the driver: what a program that shows the stream (`hicache-index watch`) sees of
//! each call into the session, without deciding anything about it.
//!
//! The driver calls its [`Observer`] after each call into the session and before it executes
//! what the session returned: a message with its effects, a change of the link, the effects of
//! every other call. An observer sees inputs and effects; the only thing it may ask is that the
//! loop stop ([`ControlFlow::Break`]). Sequences, gaps, restarts and reconnections stay the
//! core's decisions. The default observer, `()`, sees nothing: its calls inline to nothing, so
//! an unobserved driver (the index's hot path) pays neither a branch nor an allocation for it.

use std::ops::ControlFlow;

use hicache_index::{Effects, Instant};

/// A change of the driver's link, as an [`Observer`] sees it (before the session hears of it).
#[derive(Clone, Copy, Debug)]
pub enum LinkChange<'a> {
    /// The monitor saw the handshake with the publisher succeed (`Input::Connected` follows).
    Connected,
    /// The monitor saw the connection lost, refused or its handshake fail
    /// (`Input::Disconnected` follows).
    Disconnected,
    /// Opening the sockets for a `Command::Connect`, or registering them with the runtime,
    /// failed (`Input::Disconnected` follows).
    Failed(&'a (dyn std::error::Error + 'a)),
}

/// What an [`Observer`] sees of one call the driver makes into the session.
#[derive(Clone, Copy, Debug)]
pub enum Observed<'a> {
    /// A message fed (`Input::Message`: its first [`crate::socket::MAX_FRAMES`] frames) and the
    /// effects it returned.
    Message {
        /// The message's frames.
        frames: &'a [&'a [u8]],
        /// What the session returned.
        effects: &'a Effects,
    },
    /// A change of the link, before the session hears of it.
    Link(LinkChange<'a>),
    /// The effects of every other call into the session (a timer, a connection change, an
    /// answer of the master, a request through the control handle).
    Effects(&'a Effects),
}

/// Sees every call the driver makes into the session, with what the session returned, before
/// the driver executes it.
///
/// It returns whether the loop goes on. On [`ControlFlow::Break`] the driver executes nothing
/// more (not even the effects just shown), makes no further call into the session (except the
/// final `Input::Stopped` when it is dropped, which is not observed), closes the link and ends
/// the loop at the end of its turn, as on a stop request. The snapshot's chunks
/// (`Input::SnapshotLines`, which return no effects) are not shown.
///
/// It runs on the driver's loop: it SHOULD be quick (every message waits for it).
pub trait Observer {
    /// Sees one call at `now`.
    fn observe(&mut self, now: Instant, seen: Observed<'_>) -> ControlFlow<()>;
}

/// Observes nothing: the driver's default.
impl Observer for () {
    fn observe(&mut self, _: Instant, _: Observed<'_>) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
}

/// Observes through a borrowed observer (one that outlives the loop, to be read afterwards).
impl<O: Observer + ?Sized> Observer for &mut O {
    fn observe(&mut self, now: Instant, seen: Observed<'_>) -> ControlFlow<()> {
        (**self).observe(now, seen)
    }
}
