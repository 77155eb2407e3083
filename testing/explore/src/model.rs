//! The world the checker plays around the session: the Mooncake master (its runs, what it holds,
//! its sequence and event-id counters), the network between it and the subscriber, and the
//! driver's HTTP answer in progress. All of it is plain data, cloned, hashed and compared.
//!
//! The master follows spec sections 3, 4 and 6:
//! - a run numbers its batches from sequence 1 and its events from id 1;
//! - each change is one batch: the page's event, then the run's *filler* (0 or 1 `stored`
//!   event of another application's key, so a run's batches hold 1 or 2 events);
//! - a batch its queue drops skips one sequence per event and no event id;
//! - a restart starts again at 1 with nothing held (no removal events for what it lost);
//! - `/kv_events/status` says `published_batches + dropped_events` (the last sequence given)
//!   and `published_events` (the last event id given); `/get_all_keys` lists what it holds.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use hicache_index::{
    EventKind, Layout, Namespace, PageHash, Seq, SglangParams, SnapshotRequest, Timestamp,
    Watermark,
};
use hicache_index_wire::{encode_message, MasterFlavor, OwnedBatch, OwnedEvent};

/// How many HiCache pages the master can hold (A, B and C).
pub const PAGES: usize = 3;

/// The Unix time, in milliseconds, of virtual time zero: the publisher stamps from it.
pub const EPOCH_MS: u64 = 1_767_225_600_000;

/// The pages' hashes and object keys under the checker's layout (MLA, page size 4: one object
/// `{H}__k` a page, so a page is present exactly when its one object is).
#[derive(Debug)]
pub struct Catalog {
    /// The layout the session is configured with.
    pub layout: Layout,
    /// Each page's hash.
    pub hashes: [PageHash; PAGES],
    /// Each page's one object key.
    pub keys: [String; PAGES],
}

impl Catalog {
    /// Returns the catalog (built once).
    pub fn get() -> &'static Catalog {
        static CATALOG: OnceLock<Catalog> = OnceLock::new();
        CATALOG.get_or_init(|| {
            let layout = Layout::from_sglang(&SglangParams {
                mla: true,
                ..SglangParams::new(4, 1)
            })
            .expect("an MLA layout is valid");
            let hashes = std::array::from_fn(|i| {
                let tokens: Vec<u32> = (0..4).map(|t| 1_000 * (i as u32 + 1) + t).collect();
                layout
                    .page_hashes(&tokens, Namespace::NONE)
                    .next()
                    .expect("four tokens are one page")
            });
            let keys = std::array::from_fn(|i: usize| {
                let mut keys = layout.object_keys(&hashes[i]);
                let key = keys.next().expect("an MLA page has one object");
                assert!(keys.next().is_none(), "an MLA page has one object");
                key
            });
            Catalog {
                layout,
                hashes,
                keys,
            }
        })
    }

    /// Returns the name of `key` as the master writes it.
    pub fn name(&self, key: Key) -> String {
        match key {
            Key::Page(p) => self.keys[usize::from(p)].clone(),
            Key::Foreign { run } => format!("app-{run}"),
        }
    }

    /// Returns the key named `name`, if the master can hold it.
    pub fn key_named(&self, name: &str) -> Option<Key> {
        if let Some(p) = self.keys.iter().position(|k| k == name) {
            return Some(Key::Page(p as u8));
        }
        let run = name.strip_prefix("app-")?;
        Some(Key::Foreign {
            run: run.parse().ok()?,
        })
    }
}

/// Returns the one-letter name of page `page` (A, B, C).
pub fn page_name(page: usize) -> char {
    (b'A' + page as u8) as char
}

/// One object the master can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// A HiCache page's object.
    Page(u8),
    /// The key another application stores (again and again) during run `run` (`app-{run}`:
    /// no object key, so a key-list line of it is not one either).
    Foreign {
        /// The run that stored it.
        run: u8,
    },
}

/// One run of the master process.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Master {
    /// Which run this is (1 for the first).
    pub run: u8,
    /// The `stored` events of other applications' keys in each of this run's batches (0 or 1).
    pub filler: u8,
    /// The sequence its next batch gets.
    pub next_seq: u64,
    /// The event id its next published event gets.
    pub next_id: u64,
    /// What it holds.
    pub held: BTreeSet<Key>,
}

impl Master {
    /// A run that has published nothing and holds nothing.
    pub fn new(run: u8, filler: u8) -> Master {
        Master {
            run,
            filler,
            next_seq: 1,
            next_id: 1,
            held: BTreeSet::new(),
        }
    }

    /// Reports whether it holds page `page`.
    pub fn holds(&self, page: usize) -> bool {
        self.held.contains(&Key::Page(page as u8))
    }

    /// What `/kv_events/status` says now.
    pub fn watermark(&self) -> Watermark {
        Watermark {
            seq: Seq(self.next_seq - 1),
            events: Some(self.next_id - 1),
        }
    }

    /// Makes the change that stores page `page` if it is absent or removes it if present,
    /// with the run's filler: the events of its batch, in order (`true`: stored).
    pub fn toggle(&mut self, page: usize) -> Vec<(bool, Key)> {
        let key = Key::Page(page as u8);
        let stored = !self.held.remove(&key);
        if stored {
            self.held.insert(key);
        }
        let mut events = vec![(stored, key)];
        for _ in 0..self.filler {
            let foreign = Key::Foreign { run: self.run };
            self.held.insert(foreign);
            events.push((true, foreign));
        }
        events
    }
}

/// One message of the stream: a batch as published (or damaged on the way).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Message {
    /// The run that published it.
    pub run: u8,
    /// Its sequence.
    pub seq: u64,
    /// Its first event's id.
    pub first_id: u64,
    /// Its events (`true`: stored).
    pub events: Vec<(bool, Key)>,
    /// The publisher's stamp, in milliseconds.
    pub stamp_ms: u64,
    /// Whether its payload can be decoded (an undecodable batch keeps its sequence frame).
    pub readable: bool,
    /// The history position of the change it carries (see [`crate::oracle`]).
    pub pos: u64,
}

impl Message {
    /// Returns its last event's id.
    pub fn last_id(&self) -> u64 {
        self.first_id + self.events.len() as u64 - 1
    }

    /// Encodes it as the master's three frames (an undecodable one with a payload that is no
    /// msgpack array of three).
    pub fn frames(&self) -> [Vec<u8>; 3] {
        if !self.readable {
            return [
                Vec::new(),
                self.seq.to_be_bytes().to_vec(),
                vec![0x93, 0xc1],
            ];
        }
        let catalog = Catalog::get();
        let events = self
            .events
            .iter()
            .enumerate()
            .map(|(i, &(stored, key))| {
                let kind = if stored {
                    EventKind::Stored
                } else {
                    EventKind::Removed
                };
                let mut event = OwnedEvent::new(kind, catalog.name(key));
                event.event_id = Some(self.first_id + i as u64);
                event.timestamp_ms = self.stamp_ms;
                event.dp_rank = Some(0);
                event
            })
            .collect();
        let batch = OwnedBatch {
            seq: Seq(self.seq),
            timestamp: Timestamp::Millis(self.stamp_ms),
            dp_rank: Some(0),
            events,
        };
        encode_message(b"", &batch, MasterFlavor::Release0314)
    }
}

/// The driver's answer to a [`hicache_index::Command::FetchSnapshot`], as far as it got.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fetch {
    /// The fetch answered.
    pub request: SnapshotRequest,
    /// `/kv_events/status` once read, with the run that answered (`Some((run, None))`: the
    /// master gave no counters).
    pub status: Option<(u8, Option<Watermark>)>,
    /// `/get_all_keys` once read: the run that answered, and what it held then, in the list's
    /// order.
    pub keys: Option<(u8, Vec<Key>)>,
    /// The handover was begun ([`hicache_index::Input::SnapshotBegin`] and the first half of
    /// the lines).
    pub begun: bool,
}

/// The master, the network and the driver's HTTP side.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Model {
    /// The run now serving.
    pub master: Master,
    /// Batches stamped so far (the publisher's clock moves one millisecond per batch beyond
    /// virtual time, so its stamps strictly increase).
    pub stamped: u64,
    /// A batch the network holds back (delivered by [`crate::Letter::Release`]).
    pub delayed: Option<Message>,
    /// The message handed to the session last (a copy repeats it).
    pub last_handed: Option<Message>,
    /// The snapshot answer in progress.
    pub fetch: Option<Fetch>,
}

impl Model {
    /// The master's first run, before anything happened.
    pub fn new() -> Model {
        Model {
            master: Master::new(1, 0),
            stamped: 0,
            delayed: None,
            last_handed: None,
            fetch: None,
        }
    }
}

impl Default for Model {
    fn default() -> Self {
        Model::new()
    }
}
