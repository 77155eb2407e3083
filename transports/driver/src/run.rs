//! The driving loop, once for every runtime: a runtime only registers the sockets' FDs, yields,
//! and waits for the first of a request, a readable FD or the deadline ([`Runtime`]).
//!
//! One turn: take the queued requests, drain the link (messages, then monitor events), hand the
//! next snapshot chunk over, fire the timers, execute the actions; wait only when nothing is
//! pending (a turn that did something yields and comes back at once). The loop ends on a stop
//! request, at the end of the inbox, or at the end of a turn in which the driver's
//! [`crate::Observer`] asked it to stop.

use std::future::Future;

use async_channel::{Receiver, RecvError};
use tracing::Instrument;

use crate::driver::{Action, Driver};
use crate::handle::Inbox;
use crate::observe::Observer;
use crate::socket::Link;
use crate::{prepare, Control, Error, Parts, QueryHandle, SubscriberConfig};

/// What the loop needs from an async runtime.
pub trait Runtime {
    /// Both FDs of a link (`ZMQ_FD` of its SUB and monitor sockets), registered for readability
    /// with the runtime's reactor. The loop keeps it next to its [`Link`] and always drops it
    /// first, so the FDs deregister before the sockets close.
    type Fds: Send + Sync;

    /// Registers both FDs of `link`.
    fn register(link: &Link) -> std::io::Result<Self::Fds>;

    /// Lets the runtime's other tasks run.
    fn yield_now() -> impl Future<Output = ()> + Send;

    /// Waits until a request arrives on `inbox` (`Some`, with what `recv` returned), either FD
    /// signals (`None`; the readiness is cleared: the loop then drains and re-checks
    /// `ZMQ_EVENTS`, so no edge is lost) or `deadline` passes (`None`). Without FDs, only the
    /// other two.
    fn wait<'a>(
        inbox: &'a Receiver<Inbox>,
        fds: Option<&'a Self::Fds>,
        deadline: std::time::Instant,
    ) -> impl Future<Output = Option<Result<Inbox, RecvError>>> + Send + 'a;
}

/// A link with its FDs registered. Field order matters: the FDs deregister before the sockets
/// close.
struct Registered<F> {
    fds: F,
    link: Link,
}

/// Runs `driver` until a stop request, the end of `inbox`, or its observer's request to stop.
pub async fn run<R: Runtime>(mut driver: Driver<impl Observer>, inbox: Receiver<Inbox>) {
    let mut link: Option<Registered<R::Fds>> = None;
    'run: loop {
        while let Ok(msg) = inbox.try_recv() {
            if !driver.handle_inbox(msg) {
                break 'run;
            }
        }
        let mut again = false;
        if let Some(l) = &link {
            again = driver.drain(&l.link);
        }
        again |= driver.advance_snapshot();
        driver.handle_timeout();
        while let Some(action) = driver.poll_action() {
            again = true;
            match action {
                Action::Open(new) => {
                    link = None;
                    match R::register(&new) {
                        Ok(fds) => link = Some(Registered { fds, link: new }),
                        Err(e) => driver.link_failed(&e),
                    }
                }
                Action::Close => link = None,
            }
        }
        if driver.is_stopped() {
            break 'run;
        }
        if again {
            R::yield_now().await;
            continue;
        }
        let deadline = driver.deadline();
        let fds = link.as_ref().map(|l| &l.fds);
        if let Some(msg) = R::wait(&inbox, fds, deadline).await {
            if !msg.is_ok_and(|msg| driver.handle_inbox(msg)) {
                break 'run;
            }
        }
    }
}

/// Prepares a subscriber from `config` (as [`crate::prepare`] does) and returns its query and
/// control handles with its loop on `R`, in a `hicache_index_subscriber` span naming `runtime`:
/// what a runtime's `spawn` hands to its executor.
pub fn prepare_run<R: Runtime + 'static>(
    config: SubscriberConfig,
    runtime: &'static str,
) -> Result<
    (
        QueryHandle,
        Control,
        impl Future<Output = ()> + Send + 'static,
    ),
    Error,
> {
    let Parts {
        driver,
        query,
        control,
        inbox,
    } = prepare(config)?;
    let span = tracing::info_span!("hicache_index_subscriber", runtime);
    Ok((query, control, run::<R>(driver, inbox).instrument(span)))
}
