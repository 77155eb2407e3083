//! Queries: plan, probe and answer (`&self`, at any time between inputs).

use super::*;

impl Session {
    /// Answers how many leading pages of the lookup are fully present. Hashing stops at the first
    /// page that misses.
    pub fn query(&self, lookup: &Lookup<'_>) -> Result<Hits, QueryError> {
        self.answer(lookup, None)
    }

    /// Plans a lookup: how its tokens are hashed under the layout it resolves to. With the plan,
    /// a caller hashes outside any lock ([`QueryPlan::hashes`]) and then calls
    /// [`Session::probe`].
    pub fn plan(&self, lookup: &Lookup<'_>) -> Result<QueryPlan, QueryError> {
        let layout = self.layout_for(lookup.model)?;
        Ok(QueryPlan {
            page_size: layout.page_size,
            eagle: layout.eagle,
            layouts: self.layout_votes.generation(),
        })
    }

    /// Answers for page hashes computed under `plan` (`lookup.pages` names them; tokens are
    /// hashed here, as by [`Session::query_map`]), after checking that `plan` is still the
    /// lookup's: [`QueryError::PlanChanged`] if its layout changed since.
    ///
    /// A probe is not counted (a query may probe in several rounds): the caller reports the
    /// final answer once with [`Session::count_answer`].
    pub fn probe(
        &self,
        plan: QueryPlan,
        lookup: &Lookup<'_>,
        map: Option<&mut [bool]>,
    ) -> Result<Hits, QueryError> {
        if self.plan(lookup)? != plan {
            return Err(QueryError::PlanChanged);
        }
        self.answer_uncounted(lookup, map)
    }

    /// Counts one query answered by probes (see [`Session::probe`]) in
    /// [`Counters::queries`] and [`Counters::hit_pages`].
    pub fn count_answer(&self, hits: &Hits) {
        self.queries.fetch_add(1, Ordering::Relaxed);
        self.hit_pages
            .fetch_add(hits.prefix_pages, Ordering::Relaxed);
    }

    /// Answers like [`Session::query`] and also fills `map[i]` with whether page `i` has every
    /// object of every pool; pages past the map's length are not examined.
    pub fn query_map(&self, lookup: &Lookup<'_>, map: &mut [bool]) -> Result<Hits, QueryError> {
        self.answer(lookup, Some(map))
    }

    pub(super) fn answer(
        &self,
        lookup: &Lookup<'_>,
        map: Option<&mut [bool]>,
    ) -> Result<Hits, QueryError> {
        let hits = self.answer_uncounted(lookup, map)?;
        self.count_answer(&hits);
        Ok(hits)
    }

    pub(super) fn answer_uncounted(
        &self,
        lookup: &Lookup<'_>,
        map: Option<&mut [bool]>,
    ) -> Result<Hits, QueryError> {
        let layout = self.layout_for(lookup.model)?;
        if self.is_unproven() {
            // The snapshot may be of another run of the master than the stream: claim nothing.
            if let Some(map) = map {
                map.fill(false);
            }
            let total = match lookup.pages {
                Pages::Hashes(hashes) => hashes.len(),
                Pages::Tokens {
                    tokens: Tokens::U32(t),
                    ..
                } => crate::hash::page_count(t.len(), layout.page_size, layout.eagle),
                Pages::Tokens {
                    tokens: Tokens::U64(t),
                    ..
                } => crate::hash::page_count(t.len(), layout.page_size, layout.eagle),
            };
            return Ok(Hits {
                prefix_pages: 0,
                total_pages: total,
                pages_checked: 0,
                memory_pages: 0,
                disk_only_pages: 0,
                trust: self.health,
            });
        }
        let (total, found) = match lookup.pages {
            Pages::Hashes(hashes) => (
                hashes.len(),
                self.index
                    .query(lookup.tenant, layout, hashes.iter().copied(), map),
            ),
            Pages::Tokens {
                tokens: Tokens::U32(t),
                namespace,
            } => {
                let pages = PageHashes::new(t, layout.page_size, layout.eagle, namespace);
                (
                    pages.page_count(),
                    self.index.query(lookup.tenant, layout, pages, map),
                )
            }
            Pages::Tokens {
                tokens: Tokens::U64(t),
                namespace,
            } => {
                let pages = PageHashes::new(t, layout.page_size, layout.eagle, namespace);
                (
                    pages.page_count(),
                    self.index.query(lookup.tenant, layout, pages, map),
                )
            }
        };
        Ok(Hits {
            prefix_pages: found.prefix_pages,
            total_pages: total,
            pages_checked: found.pages_checked,
            memory_pages: found.memory_pages,
            disk_only_pages: found.disk_only_pages,
            trust: self.health,
        })
    }
}
