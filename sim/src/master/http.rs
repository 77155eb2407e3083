//! The master's HTTP answers: `GET /kv_events/status`, `GET /get_all_keys` and
//! `GET /batch_query_keys`.

use super::store::key_hash;
use super::{Master, ObjId, Status};

impl Master {
    /// `GET /kv_events/status` of the current run of the master (every counter 0 before the
    /// first batch).
    pub fn status(&self) -> Status {
        Status {
            published_batches: self.next_seq - 1 - self.run_dropped,
            published_events: self.next_event_id - 1,
            dropped_events: self.run_dropped,
        }
    }

    // ---- HTTP side ----

    /// `GET /get_all_keys` as the master writes it: every key of the default tenant, one a line,
    /// each ended by `\n` and nothing trimmed. The foreign keys come after the SGLang ones (a key
    /// with a `\n` makes two lines). Returns the object whose line is right before the first
    /// foreign line, if any: a session that skips the lines next to a line that is not a key
    /// skips it.
    pub fn all_keys_body(&self, body: &mut Vec<u8>) -> Option<ObjId> {
        body.clear();
        for &obj in self.present[0].as_slice() {
            body.extend_from_slice(self.objects[obj as usize].key.as_bytes());
            body.push(b'\n');
        }
        for &id in self.foreign_present.as_slice() {
            body.extend_from_slice(self.foreign_keys[id as usize].as_bytes());
            body.push(b'\n');
        }
        let foreign = !self.foreign_present.is_empty();
        foreign
            .then(|| self.present[0].as_slice().last().copied())
            .flatten()
    }

    /// Returns how many foreign keys the default tenant holds now.
    pub fn foreign_count(&self) -> usize {
        self.foreign_present.len()
    }

    /// `GET /batch_query_keys`: whether each key exists in the default tenant now.
    pub fn batch_query(&self, keys: &[String]) -> Vec<bool> {
        keys.iter()
            .map(|k| {
                let sglang = self.default_keys.get(&key_hash(k)).is_some_and(|&o| {
                    &*self.objects[o as usize].key == k && self.flags[o as usize] != 0
                });
                // A foreign client's key is as present as any other.
                sglang
                    || self
                        .foreign_present
                        .as_slice()
                        .iter()
                        .any(|&id| &*self.foreign_keys[id as usize] == k)
            })
            .collect()
    }
}
