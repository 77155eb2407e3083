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

/// Sees every call the driver makes into the session, with what the session returned, before
/// the driver executes it.
///
/// Every method returns whether the loop goes on. On [`ControlFlow::Break`] the driver executes
/// nothing more (not even the effects just shown), makes no further call into the session
/// (except the final `Input::Stopped` when it is dropped, which is not observed), closes the
/// link and ends the loop at the end of its turn, as on a stop request. The snapshot's chunks
/// (`Input::SnapshotLines`, which return no effects) are not shown.
///
/// The methods run on the driver's loop: they SHOULD be quick (every message waits for them).
pub trait Observer {
    /// Sees one message fed (`Input::Message`: its first [`crate::socket::MAX_FRAMES`]
    /// frames) and the effects it returned.
    fn observe_message(
        &mut self,
        now: Instant,
        frames: &[&[u8]],
        effects: &Effects,
    ) -> ControlFlow<()> {
        let _ = (now, frames, effects);
        ControlFlow::Continue(())
    }

    /// Sees a change of the link, before the session hears of it.
    fn observe_link(&mut self, now: Instant, change: LinkChange<'_>) -> ControlFlow<()> {
        let _ = (now, change);
        ControlFlow::Continue(())
    }

    /// Sees the effects of every other call into the session (a timer, a connection change, an
    /// answer of the master, a request through the control handle).
    fn observe_effects(&mut self, now: Instant, effects: &Effects) -> ControlFlow<()> {
        let _ = (now, effects);
        ControlFlow::Continue(())
    }
}

/// Observes nothing: the driver's default.
impl Observer for () {}

/// Observes through a borrowed observer (one that outlives the loop, to be read afterwards).
impl<O: Observer + ?Sized> Observer for &mut O {
    fn observe_message(
        &mut self,
        now: Instant,
        frames: &[&[u8]],
        effects: &Effects,
    ) -> ControlFlow<()> {
        (**self).observe_message(now, frames, effects)
    }

    fn observe_link(&mut self, now: Instant, change: LinkChange<'_>) -> ControlFlow<()> {
        (**self).observe_link(now, change)
    }

    fn observe_effects(&mut self, now: Instant, effects: &Effects) -> ControlFlow<()> {
        (**self).observe_effects(now, effects)
    }
}
