//! What follows the master's stream and answers the router in the replay: ours (a real
//! [`Session`] fed through [`Session::handle`], asked through its lock-free [`Reader`]), the
//! reference (the seed's approach: rmp-serde into owned strings, a locked set of `String` keys,
//! a `format!` per expected key) and a plain `HashSet` of exact keys fed by our decoder.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::Arc;

use hicache_index::{
    decode, Command, Config, Effect, EventKind, Health, IndexConfig, Input, Instant, Layout,
    Lookup, ModelLayout, Namespace, PageHash, PageHashes, Reader, Session,
};
use hicache_index_bench::reference::ReferenceIndex;

/// One follower of the stream (see the module docs).
pub trait Follower {
    /// Returns the name figures are printed under.
    fn name(&self) -> &'static str;
    /// Applies one message `[topic, seq, payload]` received at trace time `now`.
    fn apply(&mut self, now: Instant, frames: &[&[u8]]);
    /// Answers how many leading pages of `hashes` are present.
    fn by_hashes(&self, hashes: &[PageHash]) -> usize;
    /// Answers how many leading full pages of `tokens` are present.
    fn by_tokens(&self, tokens: &[u32]) -> usize;
}

/// Ours: a session of one layout, connected, asked through its reader.
#[derive(Debug)]
pub struct Ours {
    session: Session,
    reader: Arc<Reader>,
    /// Answers given while the session was not live (each one a miss by design).
    not_live: RefCell<u64>,
    /// Commands the session asked for after it connected (none are expected).
    unexpected_commands: u64,
}

impl Ours {
    /// Makes a session of `layout` holding up to `max_pages` pages, connected at time 0.
    ///
    /// # Panics
    /// If the configuration is refused or the session asks for anything but its connection.
    pub fn new(layout: &Layout, max_pages: usize) -> Ours {
        let mut session = Session::new(Config {
            endpoint: Some("tcp://trace-master:5557".into()),
            layouts: vec![ModelLayout {
                model: None,
                layout: layout.clone(),
            }],
            index: IndexConfig {
                max_pages,
                ..IndexConfig::default()
            },
            ..Config::default()
        })
        .expect("a valid configuration");
        let connect = session.handle(Instant::ZERO, Input::Timeout);
        assert!(
            connect
                .iter()
                .any(|e| matches!(e, Effect::Command(Command::Connect { .. }))),
            "{connect:?}"
        );
        let fx = session.handle(Instant::ZERO, Input::Connected);
        assert!(fx.iter().all(|e| e.as_command().is_none()), "{fx:?}");
        let reader = session.reader();
        Ours {
            session,
            reader,
            not_live: RefCell::new(0),
            unexpected_commands: 0,
        }
    }

    /// Returns the session (its counters, its health).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Returns the session's reader, to ask from another thread.
    pub fn reader(&self) -> Arc<Reader> {
        Arc::clone(&self.reader)
    }

    /// Returns how many answers were given while the session was not live.
    pub fn not_live(&self) -> u64 {
        *self.not_live.borrow()
    }

    /// Returns how many commands the session asked for after it connected.
    pub fn unexpected_commands(&self) -> u64 {
        self.unexpected_commands
    }

    /// Answers for every page of `hashes` whether it is present, into `map` (its length).
    pub fn page_map(&self, hashes: &[PageHash], map: &mut [bool]) -> usize {
        let hits = self
            .reader
            .query_map(&Lookup::page_hashes(hashes), map)
            .or_else(|_| self.session.query(&Lookup::page_hashes(hashes)))
            .expect("one layout answers");
        self.count_trust(hits.trust);
        hits.prefix_pages
    }

    fn count_trust(&self, trust: Health) {
        if trust != Health::Live {
            *self.not_live.borrow_mut() += 1;
        }
    }

    fn ask(&self, lookup: &Lookup<'_>) -> usize {
        // Busy only when a writer keeps changing what the query reads: never here (one thread),
        // and the session's own query answers then anyway.
        let hits = self
            .reader
            .query(lookup)
            .or_else(|_| self.session.query(lookup))
            .expect("one layout answers");
        self.count_trust(hits.trust);
        hits.prefix_pages
    }
}

impl Follower for Ours {
    fn name(&self) -> &'static str {
        "ours"
    }

    fn apply(&mut self, now: Instant, frames: &[&[u8]]) {
        if self.session.poll_timeout().is_some_and(|due| due <= now) {
            let fx = self.session.handle(now, Input::Timeout);
            self.unexpected_commands +=
                fx.iter().filter(|e| e.as_command().is_some()).count() as u64;
        }
        let fx = self.session.handle(now, Input::Message(frames));
        self.unexpected_commands += fx.iter().filter(|e| e.as_command().is_some()).count() as u64;
    }

    fn by_hashes(&self, hashes: &[PageHash]) -> usize {
        self.ask(&Lookup::page_hashes(hashes))
    }

    fn by_tokens(&self, tokens: &[u32]) -> usize {
        self.ask(&Lookup::tokens(tokens))
    }
}

/// The reference (`hicache_index_bench::reference`), with the layout it formats keys of.
#[derive(Debug)]
pub struct Reference {
    index: ReferenceIndex,
    layout: Layout,
    suffixes: Vec<String>,
}

impl Reference {
    /// Makes an empty reference for `layout`.
    pub fn new(layout: &Layout) -> Reference {
        Reference {
            index: ReferenceIndex::new(),
            layout: layout.clone(),
            suffixes: layout.suffixes().map(|(s, _)| s.to_owned()).collect(),
        }
    }
}

impl Follower for Reference {
    fn name(&self) -> &'static str {
        "reference"
    }

    fn apply(&mut self, _now: Instant, frames: &[&[u8]]) {
        self.index
            .apply_payload(frames[2])
            .expect("the master's payloads decode");
    }

    /// As the reference's own query, from the page hashes on: hex, a `format!` per key, one
    /// look-up (and one read lock) per key.
    fn by_hashes(&self, hashes: &[PageHash]) -> usize {
        let prefix = self.layout.key_prefix.as_deref();
        hashes
            .iter()
            .take_while(|page| {
                let hex = page.to_string();
                self.suffixes.iter().all(|suffix| {
                    let key = match prefix {
                        Some(prefix) => format!("{prefix}_{hex}{suffix}"),
                        None => format!("{hex}{suffix}"),
                    };
                    self.index.contains(&key)
                })
            })
            .count()
    }

    fn by_tokens(&self, tokens: &[u32]) -> usize {
        self.index.query(&self.layout, tokens)
    }
}

/// A plain `std` `HashSet<String>` of exact object keys, fed by our decoder; a query writes
/// each expected key into one reused buffer.
#[derive(Debug)]
pub struct ExactSet {
    keys: HashSet<String>,
    layout: Layout,
    suffixes: Vec<String>,
    key: RefCell<String>,
}

impl ExactSet {
    /// Makes an empty set for `layout`.
    pub fn new(layout: &Layout) -> ExactSet {
        ExactSet {
            keys: HashSet::new(),
            layout: layout.clone(),
            suffixes: layout.suffixes().map(|(s, _)| s.to_owned()).collect(),
            key: RefCell::new(String::new()),
        }
    }

    fn has_page(&self, page: &PageHash) -> bool {
        let mut key = self.key.borrow_mut();
        self.suffixes.iter().all(|suffix| {
            self.layout.write_object_key(page, suffix, &mut key);
            self.keys.contains(key.as_str())
        })
    }
}

impl Follower for ExactSet {
    fn name(&self) -> &'static str {
        "exact-key set"
    }

    fn apply(&mut self, _now: Instant, frames: &[&[u8]]) {
        let batch = decode(frames).expect("the master's messages decode");
        for event in &batch.events {
            let Some(key) = event.object_key else {
                continue;
            };
            match event.kind {
                EventKind::Stored if !self.keys.contains(key) => {
                    self.keys.insert(key.to_owned());
                }
                EventKind::Removed => {
                    self.keys.remove(key);
                }
                _ => {}
            }
        }
    }

    fn by_hashes(&self, hashes: &[PageHash]) -> usize {
        hashes.iter().take_while(|page| self.has_page(page)).count()
    }

    fn by_tokens(&self, tokens: &[u32]) -> usize {
        PageHashes::new(
            tokens,
            self.layout.page_size,
            self.layout.eagle,
            Namespace::NONE,
        )
        .take_while(|page| self.has_page(page))
        .count()
    }
}
