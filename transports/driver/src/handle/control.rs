//! The control handle ([`Control`]) and the requests it sends the driver loop ([`Inbox`]).

use hicache_index::{LeaderStatus, LeaderView, WorkerInfo};

use crate::http::HttpOutcome;

/// A request to the driver loop.
#[derive(Debug)]
pub enum Inbox {
    /// Report what a worker advertises (`None`: it is gone); may change the endpoint.
    Worker {
        /// The worker's name.
        worker: String,
        /// What it advertises.
        info: Option<WorkerInfo>,
    },
    /// Forget every page now.
    Clear,
    /// An HTTP job finished.
    Http(HttpOutcome),
    /// What HA discovery read of the master view key.
    LeaderView(LeaderView),
    /// The answer to an `Command::CheckLeader`.
    LeaderStatus {
        /// The core's request number.
        request: u64,
        /// What the candidate said.
        status: LeaderStatus,
    },
    /// Stop the loop.
    Stop,
}

/// A cloneable handle to steer a running subscriber (worker metadata, clears, stop).
#[derive(Clone, Debug)]
pub struct Control {
    tx: async_channel::Sender<Inbox>,
}

impl Control {
    pub(crate) fn new(tx: async_channel::Sender<Inbox>) -> Control {
        Control { tx }
    }

    /// Reports what `worker` advertises (`None`: the worker is gone). Without a configured
    /// endpoint, the endpoint follows the workers. Returns false if the subscriber stopped.
    pub fn report_worker(&self, worker: &str, info: Option<WorkerInfo>) -> bool {
        self.send(Inbox::Worker {
            worker: worker.to_owned(),
            info,
        })
    }

    /// Asks the subscriber to forget every page. Returns false if it stopped.
    pub fn clear(&self) -> bool {
        self.send(Inbox::Clear)
    }

    /// Asks the subscriber to stop (it finishes within milliseconds); returns false if it
    /// already stopped.
    pub fn stop(&self) -> bool {
        self.send(Inbox::Stop)
    }

    /// Hands an HTTP job's outcome back to the loop (used by the runtimes).
    pub fn deliver(&self, outcome: HttpOutcome) -> bool {
        self.send(Inbox::Http(outcome))
    }

    /// Hands what HA discovery read to the loop; false once the loop is gone.
    pub fn report_leader_view(&self, view: LeaderView) -> bool {
        self.send(Inbox::LeaderView(view))
    }

    /// Hands a leader check's answer to the loop; false once the loop is gone.
    pub fn deliver_leader_status(&self, request: u64, status: LeaderStatus) -> bool {
        self.send(Inbox::LeaderStatus { request, status })
    }

    /// Reports whether the loop is gone (nothing sent is read any more).
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    fn send(&self, msg: Inbox) -> bool {
        self.tx.try_send(msg).is_ok()
    }
}
