//! Unit tests of the shared page table and its namespace directory.

use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use crate::index::hashing::page_table_hash;

use super::buckets::SWEEP_ABOVE;
use super::claims::CLAIMS;
use super::slots::CHUNK_SLOTS;
use super::state::GENERATION_SHIFT;
use super::*;

mod namespaces;
mod queries;

fn hash(i: u8) -> PageHash {
    PageHash([i; 32])
}

#[test]
fn a_linked_page_is_found_and_an_unlinked_one_misses() {
    let t = PageTable::new(64, 7);
    let mut linked = Vec::new();
    for i in 0..40u8 {
        let idx = i as usize;
        t.put(idx, &page(1, hash(i), 1 << i, 0));
        t.link(page_table_hash(7, 1, &hash(i)), idx);
        linked.push(i);
    }
    for &i in &linked {
        assert_eq!(t.probe(1, &hash(i)), (1 << i, 1 << i));
        assert_eq!(t.probe(2, &hash(i)), (0, 0), "another namespace");
    }
    for i in (0..40u8).step_by(3) {
        t.unlink(page_table_hash(7, 1, &hash(i)), i as usize);
    }
    for i in 0..40u8 {
        let want = if i % 3 == 0 { (0, 0) } else { (1 << i, 1 << i) };
        assert_eq!(t.probe(1, &hash(i)), want, "page {i} after the shifts");
        assert_eq!(
            t.find(page_table_hash(7, 1, &hash(i)), 1, &hash(i))
                .is_some(),
            i % 3 != 0
        );
    }
}

/// Holds page 1 in slot 0 and page 2 (not yet linked) in slot 1 of `t` (seed 7), reads page 1,
/// then begins a change that unlinks page 1 and links page 2, and leaves it open; returns the
/// state word read before.
fn read_page_1_then_begin_swapping_it_for_page_2(t: &PageTable) -> State {
    t.put(0, &page(0, hash(1), 1, 0));
    t.link(page_table_hash(7, 0, &hash(1)), 0);
    t.put(1, &page(0, hash(2), 2, 0));
    let before = t.state();
    assert_eq!(t.probe(0, &hash(1)).0, 1);
    t.begin_change();
    t.unlink(page_table_hash(7, 0, &hash(1)), 0);
    t.link(page_table_hash(7, 0, &hash(2)), 1);
    before
}

#[test]
fn a_query_that_overlaps_a_change_that_removes_reads_again() {
    // The loom model's schedule, in one thread: page 1 read, then page 1 goes and page 2
    // comes in one change, then page 2 read.
    let t = PageTable::new(4, 7);
    let before = read_page_1_then_begin_swapping_it_for_page_2(&t);
    let during = t.state();
    assert!(PageTable::is_changing(during));
    assert_eq!(t.probe(0, &hash(2)).0, 2);
    assert_eq!(
        t.still(before),
        Still::No,
        "both pages read across the removal"
    );
    assert_eq!(
        t.still(during),
        Still::No,
        "a query that began during the change"
    );
    t.end_change();
    let after = t.state();
    assert!(!PageTable::is_changing(after) && t.still(after) == Still::Yes);
    t.end_change();
    assert_eq!(
        t.still(after),
        Still::Yes,
        "end_change without a change moves nothing"
    );
}

#[test]
fn a_clear_moves_the_generation_and_empties_every_bucket() {
    let t = PageTable::new(8, 7);
    t.put(0, &page(0, hash(1), 0, 1));
    t.link(page_table_hash(7, 0, &hash(1)), 0);
    let before = t.state();
    assert_eq!(t.still(before), Still::Yes);
    t.clear(1);
    assert_eq!(t.still(before), Still::No);
    assert_eq!(t.probe(0, &hash(1)), (0, 0));
    assert_eq!(PageTable::flags_of(t.state()), 0);
    let s = t.state();
    t.set_flags(5);
    assert_eq!(t.still(s), Still::No);
    assert_eq!(PageTable::flags_of(t.state()), 5);
}

/// Reports whether every bucket of `t` is empty.
fn every_bucket_empty(t: &PageTable) -> bool {
    t.buckets
        .words
        .iter()
        .all(|b| b.load(Ordering::Relaxed) == 0)
}

#[test]
fn a_clear_of_few_pages_unlinks_every_one_even_across_the_end_of_the_buckets() {
    // Ten pages whose home is the last bucket (their run wraps round to the first buckets),
    // two more whose homes are inside that run, one elsewhere; some unlinked again (their
    // runs shifted back). A clear of so few slots empties the buckets from their homes on,
    // not every bucket: it must still leave none linked.
    let t = PageTable::new(2048, 7);
    let last = t.buckets.len() - 1;
    let with_home = |home: usize, from: u32| {
        (from..)
            .map(|i| {
                let mut h = [0u8; 32];
                h[..4].copy_from_slice(&i.to_le_bytes());
                PageHash(h)
            })
            .find(|p| t.buckets.home(page_table_hash(7, 1, p)) == home)
            .expect("some hash has that home")
    };
    let mut pages = Vec::new();
    let mut from = 0;
    for home in [last; 10].into_iter().chain([2, 3, 40]) {
        let p = with_home(home, from);
        from = u32::from_le_bytes(p.0[..4].try_into().expect("4 bytes")) + 1;
        pages.push(p);
    }
    // Slot 0 holds a page whose home is inside the run, not at its start.
    let slot_of = |k: usize| (k + 2) % pages.len();
    for (k, p) in pages.iter().enumerate() {
        t.put(slot_of(k), &page(1, *p, 1, 0));
        t.link(page_table_hash(7, 1, p), slot_of(k));
    }
    for k in [1, 10] {
        t.unlink(page_table_hash(7, 1, &pages[k]), slot_of(k));
        t.set_masks(slot_of(k), 0, 0);
    }
    assert!(
        pages.len() * SWEEP_ABOVE < t.buckets.len(),
        "from their homes, not a sweep"
    );
    assert!(
        t.buckets.words[0].load(Ordering::Relaxed) != 0,
        "the run wraps"
    );
    let before = t.state();
    t.clear(pages.len());
    assert!(every_bucket_empty(&t));
    assert_eq!(t.still(before), Still::No);
    for p in &pages {
        assert_eq!(t.probe(1, p), (0, 0));
    }
}

#[test]
fn a_clear_leaves_no_page_linked_after_stores_removals_evictions_and_tenant_clears() {
    // Both ways of clearing (from the homes of a few pages, the sweep of many), after a
    // workload that moves pages in and out of their slots.
    let layout = review_layout();
    for pages in [40u32, 10_000] {
        let mut index = Index::new(IndexConfig {
            max_pages: 8192,
            ..IndexConfig::default()
        });
        let page = |i: u32| {
            let mut h = [0u8; 32];
            h[..4].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_le_bytes());
            PageHash(h)
        };
        for round in 0..3u32 {
            for i in 0..pages {
                let p = page(i + round * 7);
                store_page(&mut index, &layout, &p);
                if i % 3 == 0 {
                    remove_one_object(&mut index, &layout, &p);
                }
                if i == pages / 2 {
                    let _ = index.clear_tenant("default");
                }
            }
            let _ = index.store("other", &layout_key(&layout, &page(1)), None, None);
            let used = index.len;
            assert!(index.page_count() > 0);
            let _ = index.clear();
            index.settle();
            let t = &index.shared.pages;
            assert_eq!(
                used * SWEEP_ABOVE < t.buckets.len(),
                pages == 40,
                "{used} slots used"
            );
            assert!(every_bucket_empty(t), "{pages} pages, round {round}");
            assert_eq!(index.page_count(), 0);
        }
    }
}

/// The key of the first object of `page` under `layout`.
fn layout_key(layout: &Layout, page: &PageHash) -> String {
    let mut key = String::new();
    layout.write_object_key(page, &layout.pools[0].suffixes[0], &mut key);
    key
}

// ---- Review: a query's pages must come from one state of the index.

use crate::index::{Index, IndexConfig};
use crate::layout::{Layout, SglangParams};

/// A two-object page layout (TP 2: `_0_k`, `_0_v`, ... whatever the layout names).
fn review_layout() -> Layout {
    Layout::from_sglang(&SglangParams::new(4, 2)).expect("a valid layout")
}

fn store_page(index: &mut Index, layout: &Layout, page: &PageHash) {
    for pool in &layout.pools {
        for suffix in &pool.suffixes {
            let mut key = String::new();
            layout.write_object_key(page, suffix, &mut key);
            let _ = index.store("default", &key, None, None);
        }
    }
}

fn remove_one_object(index: &mut Index, layout: &Layout, page: &PageHash) {
    let mut key = String::new();
    layout.write_object_key(page, &layout.pools[0].suffixes[0], &mut key);
    let _ = index.remove("default", &key);
}

/// Reports whether every object of `page` under `layout` is tracked and present.
fn holds(index: &Index, layout: &Layout, page: &PageHash) -> bool {
    index
        .query("default", layout, [*page].into_iter(), None)
        .prefix_pages
        == 1
}

// ---- A slot holds its first 32 objects' masks; the others are in its chunk's wide words.

#[test]
fn a_page_with_objects_past_the_32nd_keeps_every_mask_bit() {
    let t = PageTable::new(2048, 7);
    let (cpu, disk) = (1 | 1 << 31 | 1 << 40 | 1 << 127, 1 << 5 | 1 << 32 | 1 << 96);
    // Slot 1500: the second chunk, whose first page is wide.
    t.put(1500, &page(1, hash(1), cpu, disk));
    t.link(page_table_hash(7, 1, &hash(1)), 1500);
    assert_eq!(t.probe(1, &hash(1)), (cpu | disk, cpu));
    assert_eq!(t.get(1500), page(1, hash(1), cpu, disk));
    assert_eq!(t.present(1500), cpu | disk);
    // Back to narrow masks: the wide words are cleared with them.
    t.set_masks(1500, 1 << 3, 0);
    assert_eq!(t.probe(1, &hash(1)), (1 << 3, 1 << 3));
    assert_eq!(t.get(1500).cpu, 1 << 3);
    // A narrow page in the same chunk reads no stale wide bits.
    t.put(1501, &page(1, hash(2), 1 << 4, 1 << 6));
    t.link(page_table_hash(7, 1, &hash(2)), 1501);
    assert_eq!(t.probe(1, &hash(2)), (1 << 4 | 1 << 6, 1 << 4));
}

#[test]
fn a_chunk_of_pages_of_32_objects_or_fewer_allocates_no_wide_words() {
    // 48 bytes a slot while every page's objects fit its own words (MHA up to TP 16); a chunk
    // one of whose pages has a 33rd object pays 24 bytes more a slot.
    let narrow = PageTable::new(CHUNK_SLOTS, 7);
    let wide = PageTable::new(CHUNK_SLOTS, 7);
    for idx in 0..CHUNK_SLOTS {
        narrow.put(idx, &page(1, hash(1), u128::from(u32::MAX), 0));
        wide.put(idx, &page(1, hash(1), u128::from(u32::MAX), 0));
    }
    wide.set_masks(7, 1 << 32, 0);
    let per_slot = |t: &PageTable| t.slots.allocated_bytes() / CHUNK_SLOTS;
    assert_eq!(
        per_slot(&narrow),
        48,
        "{} bytes",
        narrow.slots.allocated_bytes()
    );
    assert_eq!(
        per_slot(&wide),
        48 + 24,
        "{} bytes",
        wide.slots.allocated_bytes()
    );
}

#[test]
fn objects_stored_in_any_order_of_their_suffixes_keep_one_slot_each() {
    // The suffix search tries the slot after the last one found first: objects that come out
    // of the layout's order still find their own slots, and a removal takes only its object.
    let layout = review_layout();
    let suffixes: Vec<&String> = layout.pools.iter().flat_map(|p| &p.suffixes).collect();
    let key = |page: &PageHash, s: &str| {
        let mut key = String::new();
        layout.write_object_key(page, s, &mut key);
        key
    };
    let mut index = Index::new(IndexConfig::default());
    let pages = [PageHash([1; 32]), PageHash([2; 32]), PageHash([3; 32])];
    let orders: [&[usize]; 3] = [&[0, 1, 2, 3], &[3, 0, 2, 1], &[1, 1, 3, 2, 0, 0]];
    for (page, order) in pages.iter().zip(orders) {
        for &i in order {
            let _ = index.store(
                "default",
                &key(page, suffixes[i % suffixes.len()]),
                None,
                None,
            );
        }
    }
    assert_eq!(index.namespaces[0].suffixes.len(), suffixes.len().min(4));
    for page in &pages {
        assert!(holds(&index, &layout, page));
    }
    let _ = index.remove("default", &key(&pages[1], suffixes[2 % suffixes.len()]));
    for (i, s) in suffixes.iter().enumerate() {
        assert_eq!(
            index.contains_key("default", &key(&pages[1], s)),
            i != 2 % suffixes.len(),
            "suffix {s}"
        );
        assert!(index.contains_key("default", &key(&pages[0], s)));
    }
}
