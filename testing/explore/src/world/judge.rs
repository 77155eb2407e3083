//! What the session claims, read through its reader, judged by the oracle after every input;
//! and the fingerprint that merges histories reaching the same state.

use crate::fingerprint;
use crate::model::{page_name, Catalog, Message, PAGES};
use crate::oracle::{Judgement, STALE_BOUND};

use super::letters::Problem;
use super::World;

impl World {
    /// Which pages the session claims: one query through its reader for pages A, B, C, with
    /// each page's answer in the map (an MLA page has one pool: a page in the map is a page a
    /// router asking about it alone is told is there).
    pub(super) fn claimed(&self) -> [bool; PAGES] {
        let catalog = Catalog::get();
        let lookup = hicache_index::Lookup::page_hashes(&catalog.hashes);
        let mut map = [false; PAGES];
        let hits = match self.reader.query_map(&lookup, &mut map) {
            Ok(hits) => hits,
            // Only a writer on another thread makes a lock-free query give up; there is none.
            Err(e) => panic!("the reader did not answer: {e:?}"),
        };
        let leading = map.iter().take_while(|&&c| c).count();
        assert_eq!(
            hits.prefix_pages, leading,
            "the prefix is the map's leading run"
        );
        map
    }

    pub(super) fn claims_line(&self) -> String {
        let claims = self.claimed();
        let claimed: String = (0..PAGES).filter(|&p| claims[p]).map(page_name).collect();
        let held: String = (0..PAGES)
            .filter(|&p| self.model.master.holds(p))
            .map(page_name)
            .collect();
        format!(
            "index claims {{{claimed}}}, master (run {}) holds {{{held}}}",
            self.model.master.run
        )
    }

    /// Notes which pages are claimed now and judges every claim (unless replaying).
    pub(super) fn judge(&mut self) {
        let claimed = self.claimed();
        for (since, &c) in self.claimed_since.iter_mut().zip(&claimed) {
            *since = if c { since.or(Some(self.now)) } else { None };
        }
        if !self.judging {
            return;
        }
        let health = self.reader.health();
        for (page, _) in claimed.iter().enumerate().filter(|(_, c)| **c) {
            let since = self.claimed_since[page].expect("claimed");
            match self.oracle.judge(self.now, page, since) {
                Judgement::Fine => {}
                Judgement::FalseHit => {
                    self.note(format!(
                        "page {} claimed: {}",
                        page_name(page),
                        self.claims_line()
                    ));
                    self.fail(Problem::FalseHit {
                        health: health.as_str().into(),
                    });
                }
                Judgement::Stale { age } if age > STALE_BOUND => {
                    self.note(format!(
                        "page {} claimed {age:?} after an invisible restart: {}",
                        page_name(page),
                        self.claims_line()
                    ));
                    self.fail(Problem::StaleTooLong);
                }
                Judgement::Stale { .. } => self.excused = true,
            }
        }
    }

    /// A hash of everything that decides what any continuation of this history does: the
    /// model, the oracle's canonical form, the time, and the session's state (its `Debug`
    /// form without counters and configuration, and what its index holds).
    pub fn fingerprint(&self) -> u128 {
        use std::hash::Hash;
        let mut h = fingerprint::Fast::default();
        // The model, with its messages' history positions counted from the oracle's horizon.
        let m = &self.model;
        let message = |msg: &Option<Message>| {
            msg.as_ref().map(|msg| {
                let mut msg = msg.clone();
                msg.pos = self.oracle.relative(self.now, msg.pos);
                msg
            })
        };
        (
            &m.master,
            m.stamped,
            message(&m.delayed),
            message(&m.last_handed),
            &m.fetch,
        )
            .hash(&mut h);
        self.oracle.canonical(self.now).hash(&mut h);
        // Which letters are offered depends on it (see `World::enabled`).
        self.touched_pages().hash(&mut h);
        // When a claim began matters only against a restart's excuse, which begins no earlier
        // than the restart: before one, only whether there is a claim.
        if self.oracle.has_restart() {
            self.claimed_since.hash(&mut h);
        }
        self.now.hash(&mut h);
        self.idle.hash(&mut h);
        fingerprint::hash_debug(&self.session, &mut h);
        let catalog = Catalog::get();
        for key in &catalog.keys {
            self.reader
                .holds_object(hicache_index::DEFAULT_TENANT, key)
                .hash(&mut h);
        }
        self.claimed().hash(&mut h);
        self.excused.hash(&mut h);
        // Which letters are offered depends on the faults left.
        if self.setup.max_faults.is_some() {
            self.faults.hash(&mut h);
        }
        h.finish128()
    }
}
