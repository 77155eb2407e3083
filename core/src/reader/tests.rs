//! The one query path against a plain reference: page hashes by a SHA-256 chain written here,
//! the prefix by a set of stored pages; and a layout put in force in the middle of a query.

use core::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::string::String;
use std::vec;
use std::vec::Vec;

use quickcheck_macros::quickcheck;
use sha2::{Digest, Sha256};

use super::*;
use crate::hash::Token;
use crate::index::{Index, IndexConfig};
use crate::layout::{Advertised, SglangParams};

/// The reference chain: page `i` is SHA-256 of the digest of page `i - 1` and the page's
/// tokens as u32 LE (EAGLE: each bigram of its `page_size + 1` tokens), as SGLang hashes.
fn reference_pages(tokens: &[u32], page_size: usize, eagle: bool) -> Vec<PageHash> {
    let units = if eagle {
        tokens.len().saturating_sub(1)
    } else {
        tokens.len()
    };
    let mut prior: Option<[u8; 32]> = None;
    (0..units / page_size)
        .map(|i| {
            let mut d = Sha256::new();
            if let Some(p) = prior {
                d.update(p);
            }
            let raw = &tokens[i * page_size..i * page_size + page_size + usize::from(eagle)];
            if eagle {
                for pair in raw.windows(2) {
                    d.update(pair[0].to_le_bytes());
                    d.update(pair[1].to_le_bytes());
                }
            } else {
                for t in raw {
                    d.update(t.to_le_bytes());
                }
            }
            let page: [u8; 32] = d.finalize().into();
            prior = Some(page);
            PageHash(page)
        })
        .collect()
}

fn layout(page_size: u32, eagle: bool) -> Layout {
    Layout::from_sglang(&SglangParams::new(page_size, 2))
        .expect("a valid layout")
        .with_eagle(eagle)
}

fn store(index: &mut Index, layout: &Layout, page: &PageHash) {
    for pool in &layout.pools {
        for suffix in &pool.suffixes {
            let mut key = String::new();
            layout.write_object_key(page, suffix, &mut key);
            let _ = index.store("default", &key, None, None);
        }
    }
}

/// A memo's key (the prior, EAGLE, the page's tokens) and the digest remembered for it.
type Remembered = (Option<[u8; 32]>, bool, Vec<u64>, PageHash);

/// A memo that remembers every digest and counts how many pages were hashed through it.
#[derive(Default)]
struct Counting {
    seen: RefCell<Vec<Remembered>>,
    asked: Cell<usize>,
}

impl DigestMemo for Counting {
    fn get<T: Token>(
        &self,
        prior: Option<&[u8; 32]>,
        eagle: bool,
        tokens: &[T],
    ) -> Option<PageHash> {
        self.asked.set(self.asked.get() + 1);
        let tokens: Vec<u64> = tokens.iter().map(|t| t.to_u64()).collect();
        self.seen
            .borrow()
            .iter()
            .find(|(p, e, t, _)| p.as_ref() == prior && *e == eagle && *t == tokens)
            .map(|(.., h)| *h)
    }

    fn put<T: Token>(&self, prior: Option<&[u8; 32]>, eagle: bool, tokens: &[T], digest: PageHash) {
        let tokens = tokens.iter().map(|t| t.to_u64()).collect();
        self.seen
            .borrow_mut()
            .push((prior.copied(), eagle, tokens, digest));
    }
}

/// Every way a driver or a router asks, against the reference: the prefix of pages stored.
#[quickcheck]
fn every_way_of_asking_answers_the_reference_prefix(
    tokens: Vec<u32>,
    page_size: u8,
    eagle: bool,
    stored: Vec<u8>,
) -> bool {
    let page_size = u32::from(page_size % 4 + 1);
    let layout = layout(page_size, eagle);
    let want_pages = reference_pages(&tokens, page_size as usize, eagle);
    let stored: BTreeSet<usize> = stored
        .iter()
        .map(|s| usize::from(*s) % (want_pages.len() + 1))
        .collect();
    let mut index = Index::new(IndexConfig::default());
    for i in &stored {
        if let Some(page) = want_pages.get(*i) {
            store(&mut index, &layout, page);
        }
    }
    let reader = Reader::new(
        index.shared(),
        vec![ModelLayout {
            model: None,
            layout: layout.clone(),
        }],
    );
    let prefix = (0..want_pages.len())
        .take_while(|i| stored.contains(i))
        .count();
    let full: Vec<bool> = (0..want_pages.len()).map(|i| stored.contains(&i)).collect();
    let lookup = Lookup::tokens(&tokens);
    let ok = Cell::new(true);
    let and = |holds: bool| ok.set(ok.get() & holds);
    let check = |hits: Hits| {
        and(hits.prefix_pages == prefix && hits.total_pages == want_pages.len());
        hits
    };
    // The plain calls (no memo, nothing kept).
    let hits = check(reader.query(&lookup).expect("answers"));
    let plain_checked = hits.pages_checked;
    let mut map = vec![true; want_pages.len()];
    check(reader.query_map(&lookup, &mut map).expect("answers"));
    and(map == full);
    check(reader.query_prefix_map(&lookup, &mut map).expect("answers"));
    let until_miss: Vec<bool> = (0..want_pages.len())
        .map(|i| i < plain_checked && full[i])
        .collect();
    and(map == until_miss);
    // As the driver asks: through a memo, the hashes kept; twice, the second from the memo.
    for _ in 0..2 {
        let memo = Counting::default();
        let mut kept = Vec::new();
        let hits = check(
            reader
                .ask(&lookup, &memo, Some(&mut kept), None, MapCover::UntilMiss)
                .answer()
                .expect("answers"),
        );
        // Lazy: no page after the first miss was hashed, and what was is the reference.
        and(memo.asked.get() == hits.pages_checked && hits.pages_checked == plain_checked);
        and(kept[..] == want_pages[..kept.len()]);
    }
    // And the same through page hashes computed by the reference.
    check(
        reader
            .query(&Lookup::page_hashes(&want_pages))
            .expect("answers"),
    );
    ok.get() && reader.counted().0 == 6
}

/// A memo that puts `next` in force (a worker's new layout, published by the writer) at the
/// first page a query hashes: the reading under way is thrown away.
struct SwapsLayout<'r> {
    reader: &'r Reader,
    next: RefCell<Option<LayoutVotes>>,
    asked: Cell<usize>,
}

impl DigestMemo for SwapsLayout<'_> {
    fn get<T: Token>(&self, _: Option<&[u8; 32]>, _: bool, _: &[T]) -> Option<PageHash> {
        self.asked.set(self.asked.get() + 1);
        if let Some(votes) = self.next.borrow_mut().take() {
            self.reader.publish_layouts(&[], &votes);
        }
        None
    }

    fn put<T: Token>(&self, _: Option<&[u8; 32]>, _: bool, _: &[T], _: PageHash) {}
}

/// The workers' votes after `w1` advertised `layout` for model `m` (one evolving record, as
/// the session keeps: its generation moves with every change).
fn vote(votes: &mut LayoutVotes, layout: &Layout) -> LayoutVotes {
    assert!(votes.set("w1", Some(("m", Advertised::Layout(layout.clone())))));
    votes.clone()
}

#[test]
fn a_layout_put_in_force_during_a_query_answers_under_the_new_one() {
    // Page size 2 stored under the old layout, page size 4 under the new: the tokens make
    // other pages under each, and only the new layout's pages may be claimed.
    let tokens: Vec<u32> = (1..=16).collect();
    let (old, new) = (layout(2, false), layout(4, false));
    let mut index = Index::new(IndexConfig::default());
    for page in reference_pages(&tokens, 2, false) {
        store(&mut index, &old, &page);
    }
    let new_pages = reference_pages(&tokens, 4, false);
    store(&mut index, &new, &new_pages[0]);
    let reader = Reader::new(index.shared(), Vec::new());
    let mut votes = LayoutVotes::new();
    reader.publish_layouts(&[], &vote(&mut votes, &old));
    let lookup = Lookup::tokens(&tokens).with_model("m");
    assert_eq!(reader.query(&lookup).expect("answers").prefix_pages, 8);

    let memo = SwapsLayout {
        reader: &reader,
        next: RefCell::new(Some(vote(&mut votes, &new))),
        asked: Cell::new(0),
    };
    let mut kept = Vec::new();
    let mut map = [true; 8];
    let hits = reader
        .ask(
            &lookup,
            &memo,
            Some(&mut kept),
            Some(&mut map),
            MapCover::Every,
        )
        .answer()
        .expect("answers");
    assert_eq!((hits.prefix_pages, hits.total_pages), (1, 4), "{hits:?}");
    assert_eq!(map, [true, false, false, false, false, false, false, false]);
    assert_eq!(kept, new_pages, "hashed again under the new page size");
    // The first reading hashed all 8 pages of size 2 (the swap came at its first page) and
    // was thrown away; the second hashed the 4 of size 4.
    assert_eq!(
        memo.asked.get(),
        8 + 4,
        "every page of the old reading, then the new"
    );
}

/// The reader's object question answers what the writer's does, through stores, removals, a
/// tenant's clear and a whole clear, for keys held and keys never seen.
#[test]
fn holds_object_agrees_with_the_writer() {
    let mut index = Index::new(IndexConfig::default());
    let reader = Reader::new(index.shared(), Vec::new());
    let layout = layout(4, false);
    let keys = |page: &PageHash| -> Vec<String> { layout.object_keys(page).collect() };
    let pages: Vec<PageHash> = (0u8..6).map(|i| PageHash([i; 32])).collect();
    let agree = |index: &Index, tenants: &[&str]| {
        for page in &pages {
            for key in keys(page).iter().map(String::as_str).chain(["not a key"]) {
                for tenant in tenants {
                    assert_eq!(
                        reader.holds_object(tenant, key),
                        index.contains_key(tenant, key),
                        "{tenant} {key}"
                    );
                }
            }
        }
    };
    let tenants = ["default", "other"];
    agree(&index, &tenants);
    for page in &pages[..4] {
        store(&mut index, &layout, page);
        let _ = index.store("other", &keys(page)[0], None, None);
    }
    agree(&index, &tenants);
    let _ = index.remove("default", &keys(&pages[1])[1]);
    let _ = index.remove("other", &keys(&pages[2])[0]);
    agree(&index, &tenants);
    assert!(reader.holds_object("default", &keys(&pages[0])[0]));
    assert!(!reader.holds_object("default", &keys(&pages[1])[1]));
    let _ = index.clear_tenant("other");
    index.settle();
    agree(&index, &tenants);
    let _ = index.clear();
    index.settle();
    agree(&index, &tenants);
    assert!(!reader.holds_object("default", &keys(&pages[0])[0]));
}

/// Asking whether an object is held leaves the eviction order alone: the CLOCK hand passes a
/// page the judge looked at as if nobody had, while a page a query read is spared.
#[test]
fn holds_object_leaves_the_eviction_order_alone() {
    let layout = layout(4, false);
    let pages: Vec<PageHash> = (1u8..=3).map(|i| PageHash([i; 32])).collect();
    // A full index of two pages: the third evicts one. `look` runs on the first in between.
    let evicted_first = |look: &dyn Fn(&Reader, &PageHash)| -> bool {
        let mut index = Index::new(IndexConfig {
            max_pages: 2,
            ..IndexConfig::default()
        });
        let reader = Reader::new(
            index.shared(),
            vec![ModelLayout {
                model: None,
                layout: layout.clone(),
            }],
        );
        store(&mut index, &layout, &pages[0]);
        store(&mut index, &layout, &pages[1]);
        index.settle();
        look(&reader, &pages[0]);
        store(&mut index, &layout, &pages[2]);
        index.settle();
        let key: String = layout.object_keys(&pages[0]).next().expect("a key");
        !index.contains_key("default", &key)
    };
    let nobody = evicted_first(&|_, _| {});
    let queried = evicted_first(&|reader, page| {
        let hits = reader
            .query(&Lookup::page_hashes(core::slice::from_ref(page)))
            .expect("answers");
        assert_eq!(hits.prefix_pages, 1);
    });
    let judged = evicted_first(&|reader, page| {
        let key: String = layout.object_keys(page).next().expect("a key");
        assert!(reader.holds_object("default", &key));
    });
    assert!(nobody, "the hand takes the first page when nobody read it");
    assert!(!queried, "a query's read spares it");
    assert!(judged, "the judge's look does not");
}
