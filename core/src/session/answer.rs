//! Queries: plan, probe and answer (`&self`, at any time between inputs), through the session's
//! own [`Reader`]: the one code path every query takes, from this thread or any other.

use super::*;

impl Session {
    /// Answers how many leading pages of the lookup are fully present. Hashing stops at the first
    /// page that misses.
    pub fn query(&self, lookup: &Lookup<'_>) -> Result<Hits, QueryError> {
        self.reader.query(lookup)
    }

    /// Plans a lookup: how its tokens are hashed under the layout it resolves to. With the plan,
    /// a caller hashes outside any lock ([`QueryPlan::hashes`]) and then calls
    /// [`Session::probe`] (or the same on the session's [`Reader`], which takes no lock).
    pub fn plan(&self, lookup: &Lookup<'_>) -> Result<QueryPlan, QueryError> {
        self.reader.plan(lookup)
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
        self.reader.probe(plan, lookup, map)
    }

    /// Counts one query answered by probes (see [`Session::probe`]) in
    /// [`Counters::queries`] and [`Counters::hit_pages`].
    pub fn count_answer(&self, hits: &Hits) {
        self.reader.count_answer(hits);
    }

    /// Answers like [`Session::query`] and also fills `map[i]` with whether page `i` has every
    /// object of every pool; pages past the map's length are not examined.
    pub fn query_map(&self, lookup: &Lookup<'_>, map: &mut [bool]) -> Result<Hits, QueryError> {
        self.reader.query_map(lookup, map)
    }
}
