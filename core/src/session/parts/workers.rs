//! The state of the SGLang workers: what each advertised last, and the models and layouts a
//! session knows ([`Models`]) (what the session does with them: `session/workers.rs`).

use alloc::collections::BTreeMap;
use alloc::string::String;

use crate::error::QueryError;
use crate::layout::{Layout, LayoutVotes, ModelLayout, WorkerInfo};

/// The SGLang workers: what each advertised last, and what they advertise for each model.
#[derive(Debug)]
pub(in crate::session) struct Workers {
    /// Every worker that answered its last report, by name.
    pub(in crate::session) directory: BTreeMap<String, WorkerInfo>,
    /// What the workers advertise for their models, and the layout in force for each.
    pub(in crate::session) votes: LayoutVotes,
}

impl Workers {
    pub(in crate::session) fn new() -> Workers {
        Workers {
            directory: BTreeMap::new(),
            votes: LayoutVotes::new(),
        }
    }
}

/// The models a session knows and the layout each uses
/// ([`Session::models`](crate::session::Session::models)): the layouts configured, and what its
/// SGLang workers advertise.
#[derive(Clone, Copy, Debug)]
pub struct Models<'a> {
    pub(in crate::session) configured: &'a [ModelLayout],
    pub(in crate::session) workers: &'a Workers,
}

impl<'a> Models<'a> {
    /// Returns the layout a lookup for `model` uses (`None`: the default): a configured one,
    /// else the one its workers agree on.
    pub fn layout_for(&self, model: Option<&str>) -> Result<&'a Layout, QueryError> {
        crate::reader::resolve(self.configured, &self.workers.votes, model)
    }

    /// Returns the layouts configured, one per model (the default one has no model).
    pub fn configured(&self) -> &'a [ModelLayout] {
        self.configured
    }

    /// Returns what the workers advertise for their models and the verdict on each.
    pub fn votes(&self) -> &'a LayoutVotes {
        &self.workers.votes
    }

    /// Returns every worker that answered its last report, with what it advertised, in name
    /// order.
    pub fn workers(&self) -> impl Iterator<Item = (&'a str, &'a WorkerInfo)> + 'a {
        self.workers
            .directory
            .iter()
            .map(|(w, info)| (w.as_str(), info))
    }
}
