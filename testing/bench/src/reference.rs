//! The reference index: an exact-key index built the way the first implementation of this idea
//! built it, kept as the yardstick for benchmarks and as a plain oracle for tests.
//!
//! - A concurrent set of `String` object keys (one `RwLock<HashSet<String>>`).
//! - Events decoded with rmp-serde into owned strings.
//! - A query formats each page hash as hex and `format!`s every expected key of the page.
//!
//! It is correct for gap-free streams (it is an exact-key set) and slow on purpose: it is what the
//! index is measured against.

use std::collections::HashSet;
use std::sync::RwLock;

use hicache_index::{HitPolicy, Layout, Namespace, PageHashes};
use serde::Deserialize;

/// One event as the first implementation decoded it: every string owned.
#[derive(Debug, Deserialize)]
pub struct WireEvent {
    /// `"stored"` or `"removed"`.
    #[serde(default)]
    pub event_type: Option<String>,
    /// The legacy type.
    #[serde(default, rename = "type")]
    pub legacy_type: Option<String>,
    /// The object key.
    #[serde(default)]
    pub object_key: Option<String>,
    /// The tenant.
    #[serde(default)]
    pub tenant_id: Option<String>,
    /// The group id.
    #[serde(default)]
    pub group_id: Option<String>,
    /// The medium.
    #[serde(default)]
    pub medium: Option<String>,
    /// The backend id.
    #[serde(default)]
    pub backend_id: Option<String>,
    /// The event id.
    #[serde(default)]
    pub event_id: Option<u64>,
}

/// The payload `[timestamp, events, dp_rank]`, owned.
#[derive(Debug, Deserialize)]
pub struct WirePayload(pub u64, pub Vec<WireEvent>, pub Option<u64>);

/// The exact-key reference index (see the module docs).
#[derive(Debug, Default)]
pub struct ReferenceIndex {
    keys: RwLock<HashSet<String>>,
}

impl ReferenceIndex {
    /// Makes an empty index.
    pub fn new() -> ReferenceIndex {
        ReferenceIndex::default()
    }

    /// Decodes a payload with rmp-serde and applies its events; returns how many it applied.
    pub fn apply_payload(&self, payload: &[u8]) -> Result<usize, rmp_serde::decode::Error> {
        let WirePayload(_, events, _) = rmp_serde::from_slice(payload)?;
        let mut keys = self
            .keys
            .write()
            .expect("the reference lock is never poisoned");
        let mut applied = 0;
        for e in events {
            let kind = e.event_type.as_deref().or(e.legacy_type.as_deref());
            match (kind, e.object_key) {
                (Some("stored" | "BlockStored"), Some(key)) => {
                    keys.insert(key);
                }
                (Some("removed" | "BlockRemoved"), Some(key)) => {
                    keys.remove(&key);
                }
                _ => continue,
            }
            applied += 1;
        }
        Ok(applied)
    }

    /// Marks `key` present.
    pub fn store(&self, key: String) {
        self.keys
            .write()
            .expect("the reference lock is never poisoned")
            .insert(key);
    }

    /// Marks `key` absent.
    pub fn remove(&self, key: &str) {
        self.keys
            .write()
            .expect("the reference lock is never poisoned")
            .remove(key);
    }

    /// Reports whether `key` is present.
    pub fn contains(&self, key: &str) -> bool {
        self.keys
            .read()
            .expect("the reference lock is never poisoned")
            .contains(key)
    }

    /// Returns the number of keys present.
    pub fn len(&self) -> usize {
        self.keys
            .read()
            .expect("the reference lock is never poisoned")
            .len()
    }

    /// Reports whether no key is present.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Leading pages of `tokens` whose every all-pages object is present (trailing pools are
    /// ignored, as the first implementation did), stopping at the first miss.
    pub fn query(&self, layout: &Layout, tokens: &[u32]) -> usize {
        let keys = self
            .keys
            .read()
            .expect("the reference lock is never poisoned");
        let suffixes: Vec<&str> = layout
            .pools
            .iter()
            .filter(|p| p.hit_policy == HitPolicy::AllPages)
            .flat_map(|p| p.suffixes.iter().map(String::as_str))
            .collect();
        let mut found = 0;
        for page in PageHashes::new(tokens, layout.page_size, layout.eagle, Namespace::NONE) {
            let hex = page.to_string();
            let whole = suffixes.iter().all(|suffix| {
                let key = match &layout.key_prefix {
                    Some(prefix) => format!("{prefix}_{hex}{suffix}"),
                    None => format!("{hex}{suffix}"),
                };
                keys.contains(&key)
            });
            if !whole {
                break;
            }
            found += 1;
        }
        found
    }
}
