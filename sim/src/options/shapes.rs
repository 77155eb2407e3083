//! Options narrowed for a hunt: the world a seed made before a later part of the simulator
//! joined (a planted bug's test looks where it was found).

use crate::models::catalogue;

use super::Options;

impl Options {
    /// Returns these options without the [`hybrid_catalogue`](crate::models::hybrid_catalogue)'s
    /// models: the world the seed made before they joined (they are drawn from a stream of their
    /// own). The replay command does not say it.
    #[must_use]
    pub fn without_hybrid_models(mut self) -> Options {
        let n = catalogue().len();
        self.master.models.retain(|&m| m < n);
        self
    }

    /// The same options with the watch of the master's signals off: its reconciles after every
    /// silent removal change what a planted bug's hunt sees (see `tests/planted_bug.rs`).
    #[must_use]
    pub fn without_store_watch(mut self) -> Options {
        self.session.store_watch = false;
        self
    }
}
