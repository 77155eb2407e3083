//! The master's HTTP answers: `GET /kv_events/status`, `GET /get_all_keys` and
//! `GET /batch_query_keys`, from the run that serves them ([`Served`]).

use hicache_index::Instant;

use crate::util::IdSet;

use super::messages::Status;
use super::pages::{key_hash, ObjId};
use super::state::Master;

/// Which run of the master answers HTTP.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Served {
    /// The current run.
    Current,
    /// The run before the last restart: a request it had begun before it died completes with
    /// what it held then (a key list read from it while the stream is already the new run's).
    Lagging,
}

impl Master {
    /// Returns which run answers a request that begins at `now`: the current one, or `None`
    /// while the master is down (a run that died begins nothing).
    pub fn serving_new(&self, now: Instant) -> Option<Served> {
        (!self.is_down(now)).then_some(Served::Current)
    }

    /// Returns which run completes, at `now`, a request that began on run `began`: the run
    /// before the last restart while it lags (if it is that run), else as
    /// [`Master::serving_new`].
    pub fn serving_begun(&self, now: Instant, began: u32) -> Option<Served> {
        match self.serving(now) {
            Some(Served::Lagging) if self.served_epoch(Served::Lagging) == began => {
                Some(Served::Lagging)
            }
            _ => self.serving_new(now),
        }
    }

    /// Returns which run answers HTTP at `now`, or `None` while the master is down and no old
    /// run answers for it.
    pub fn serving(&self, now: Instant) -> Option<Served> {
        let lagging = self
            .old_view
            .as_ref()
            .is_some_and(|v| v.until.is_none_or(|t| now < t));
        if lagging {
            Some(Served::Lagging)
        } else if self.is_down(now) {
            None
        } else {
            Some(Served::Current)
        }
    }

    /// Returns the time as of which the run `served` answers: `now` for the current run, the
    /// moment it died for a lagging one.
    pub fn served_as_of(&self, served: Served, now: Instant) -> Instant {
        match (served, &self.old_view) {
            (Served::Lagging, Some(v)) => v.died_at,
            _ => now,
        }
    }

    /// Returns the history position as of which the run `served` answers: the current one, or
    /// the last before a lagging run died.
    pub fn served_position(&self, served: Served) -> u64 {
        match (served, &self.old_view) {
            (Served::Lagging, Some(v)) => v.died_after,
            _ => self.position(),
        }
    }

    /// Returns the run (its restart count) that `served` names.
    pub fn served_epoch(&self, served: Served) -> u32 {
        match (served, &self.old_view) {
            (Served::Lagging, Some(v)) => v.epoch,
            _ => self.epoch,
        }
    }

    /// `GET /kv_events/status` of the current run of the master (every counter 0 before the
    /// first batch).
    pub fn status(&self) -> Status {
        Status {
            published_batches: self.next_seq - 1 - self.run_dropped,
            published_events: self.next_event_id - 1,
            dropped_events: self.run_dropped,
        }
    }

    /// `GET /kv_events/status` as the run `served` answers it.
    pub fn status_as(&self, served: Served) -> Status {
        match (served, &self.old_view) {
            (Served::Lagging, Some(v)) => v.status,
            _ => self.status(),
        }
    }

    /// The default tenant's SGLang objects and foreign keys as the run `served` holds them.
    fn held_as(&self, served: Served) -> (&IdSet, &IdSet) {
        match (served, &self.old_view) {
            (Served::Lagging, Some(v)) => (&v.keys, &v.foreign),
            _ => (&self.present[0], &self.foreign_present),
        }
    }

    /// `GET /get_all_keys` of the current run (see [`Master::all_keys_as`]).
    pub fn all_keys_body(&self, body: &mut Vec<u8>) {
        self.all_keys_as(Served::Current, body);
    }

    /// `GET /get_all_keys` as the run `served` writes it: every key of the default tenant, one
    /// a line, each ended by `\n` and nothing trimmed (a key with a `\n` makes two lines). The
    /// foreign keys come after the SGLang ones, or, with
    /// [`MasterOptions::hashed_key_list`](crate::options::MasterOptions::hashed_key_list),
    /// every key in the order of its hash, as an unordered map lists them.
    pub fn all_keys_as(&self, served: Served, body: &mut Vec<u8>) {
        body.clear();
        let (sglang, foreign) = self.held_as(served);
        let sglang = sglang
            .as_slice()
            .iter()
            .map(|&o| &*self.objects[o as usize].key);
        let foreign = foreign
            .as_slice()
            .iter()
            .map(|&id| &*self.foreign_keys[id as usize]);
        if self.opts.hashed_key_list {
            let mut keys: Vec<(u64, &str)> =
                sglang.chain(foreign).map(|k| (key_hash(k), k)).collect();
            keys.sort_unstable();
            for (_, key) in keys {
                body.extend_from_slice(key.as_bytes());
                body.push(b'\n');
            }
        } else {
            for key in sglang.chain(foreign) {
                body.extend_from_slice(key.as_bytes());
                body.push(b'\n');
            }
        }
    }

    /// Returns how many foreign keys the default tenant of the run `served` holds.
    pub fn foreign_count_as(&self, served: Served) -> usize {
        self.held_as(served).1.len()
    }

    /// Returns how many SGLang objects the default tenant of the current run holds.
    pub fn default_objects(&self) -> usize {
        self.present[0].len()
    }

    /// `GET /batch_query_keys` of the current run (see [`Master::batch_query_as`]).
    pub fn batch_query(&self, keys: &[String]) -> Vec<bool> {
        self.batch_query_as(Served::Current, keys)
    }

    /// `GET /batch_query_keys` as the run `served` answers it: whether each key exists in its
    /// default tenant (a foreign client's key is as present as any other).
    pub fn batch_query_as(&self, served: Served, keys: &[String]) -> Vec<bool> {
        let (sglang, foreign) = self.held_as(served);
        keys.iter()
            .map(|k| {
                let obj: Option<ObjId> = self
                    .default_keys
                    .get(&key_hash(k))
                    .copied()
                    .filter(|&o| &*self.objects[o as usize].key == k);
                obj.is_some_and(|o| sglang.contains(o))
                    || self
                        .foreign_index
                        .get(k.as_str())
                        .is_some_and(|ids| ids.iter().any(|&id| foreign.contains(id)))
            })
            .collect()
    }
}
