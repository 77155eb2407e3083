//! Queries (`&self`, at any time between inputs), through the session's own [`Reader`]: the
//! one code path every query takes, from this thread or any other.

use super::*;

impl Session {
    /// Answers how many leading pages of the lookup are fully present. Hashing stops at the first
    /// page that misses.
    pub fn query(&self, lookup: &Lookup<'_>) -> Result<Hits, QueryError> {
        self.reader.query(lookup)
    }

    /// Answers like [`Session::query`] and also fills `map[i]` with whether page `i` has every
    /// object of every pool; pages past the map's length are not examined.
    pub fn query_map(&self, lookup: &Lookup<'_>, map: &mut [bool]) -> Result<Hits, QueryError> {
        self.reader.query_map(lookup, map)
    }
}
