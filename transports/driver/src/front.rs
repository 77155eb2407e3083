//! The query handle as the query services' [`Front`]: what `serve` (HTTP) and the nng service
//! answer through.

use hicache_index::{Hits, Lookup, MapCover, QueryError};
use hicache_index_api::{known_models, Front};

use crate::QueryHandle;

impl Front for QueryHandle {
    fn page_shape(&self, model: Option<&str>) -> Result<(u32, bool), QueryError> {
        // `None`: the subscriber died while changing the index; the handle then answers a
        // miss for no page, which this shape matches.
        self.read(|s| s.page_shape(model))
            .unwrap_or(Ok((u32::MAX, false)))
    }

    fn ask(&self, q: &Lookup<'_>, map: &mut [bool], cover: MapCover) -> Result<Hits, QueryError> {
        self.answer(q, Some(map), cover)
    }

    fn known_models(&self) -> Vec<String> {
        self.read(known_models).unwrap_or_default()
    }
}
