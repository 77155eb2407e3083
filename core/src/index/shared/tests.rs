//! Unit tests of the shared page table and its namespace directory.

use super::buckets::SWEEP_ABOVE;
use super::claims::CLAIMS;
use super::slots::CHUNK_SLOTS;
use super::state::GENERATION_SHIFT;
use super::*;
use crate::index::table::page_table_hash;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

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

#[test]
fn a_query_that_overlaps_a_change_that_removes_reads_again() {
    // The loom model's schedule, in one thread: page 1 read, then page 1 goes and page 2
    // comes in one change, then page 2 read.
    let t = PageTable::new(4, 7);
    t.put(0, &page(0, hash(1), 1, 0));
    t.link(page_table_hash(7, 0, &hash(1)), 0);
    t.put(1, &page(0, hash(2), 2, 0));
    let before = t.state();
    assert_eq!(t.probe(0, &hash(1)).0, 1);
    t.begin_change();
    t.unlink(page_table_hash(7, 0, &hash(1)), 0);
    t.link(page_table_hash(7, 0, &hash(2)), 1);
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

/// Runs a query the way [`crate::reader::Reader`] does (state, probes, `still`, the claims
/// checked again after a removal), with `between`
/// run by the writer after the first page was probed and before the second is: returns
/// the prefix the reader would answer, `None` when it would read again.
fn query_with_writer_between(
    index: &mut Index,
    layout: &Layout,
    pages: [PageHash; 2],
    between: impl FnOnce(&mut Index),
) -> Option<usize> {
    query_many_with_writer_between(index, layout, &pages, between)
}

/// [`query_with_writer_between`] for any number of pages.
fn query_many_with_writer_between(
    index: &mut Index,
    layout: &Layout,
    pages: &[PageHash],
    between: impl FnOnce(&mut Index),
) -> Option<usize> {
    query_many_with_writer_after(index, layout, pages, 1, between)
}

/// [`query_many_with_writer_between`] with `between` run after the first `read` pages were
/// probed.
fn query_many_with_writer_after(
    index: &mut Index,
    layout: &Layout,
    pages: &[PageHash],
    read: usize,
    between: impl FnOnce(&mut Index),
) -> Option<usize> {
    let shared = index.shared();
    let before = shared.pages.state();
    let mut between = Some(between);
    let mut i = 0;
    let iter = core::iter::from_fn(|| {
        if i == read {
            (between.take().expect("once"))(index);
        }
        i += 1;
        pages.get(i - 1).copied()
    });
    // The reader's buffers: a short one, then the spill.
    let mut few = [SlotAt::default(); FEW_CLAIMS];
    let mut spill: Spill = None;
    let mut claims = Claims::spilling(&mut few, &mut spill);
    let hits = shared.query(
        "default",
        layout,
        iter,
        None,
        Some(&mut claims),
        crate::query::MapCover::Every,
    );
    let stands = match shared.pages.still(before) {
        Still::Yes => true,
        Still::IfUnchanged => claims.unchanged(&shared.pages),
        Still::No => false,
    };
    stands.then_some(hits.prefix_pages)
}

#[test]
fn a_query_never_mixes_pages_from_before_and_after_a_tenant_clear() {
    // A publisher's `cleared` names its tenant (the master always sends `tenant_id`):
    // the session applies it with `Index::clear_tenant`, which must be as atomic for
    // readers as `Index::clear`.
    let layout = review_layout();
    let (p0, p1) = (PageHash([1; 32]), PageHash([2; 32]));
    let mut index = Index::new(IndexConfig::default());
    store_page(&mut index, &layout, &p0);
    let answer = query_with_writer_between(&mut index, &layout, [p0, p1], |index| {
        let _ = index.clear_tenant("default");
        store_page(index, &layout, &p1);
    });
    assert_ne!(
        answer,
        Some(2),
        "page 0 read before the tenant clear, page 1 stored after it: both claimed"
    );
    // The same with a whole clear is thrown away (the generation moved): the control.
    let mut index = Index::new(IndexConfig::default());
    store_page(&mut index, &layout, &p0);
    let answer = query_with_writer_between(&mut index, &layout, [p0, p1], |index| {
        let _ = index.clear();
        store_page(index, &layout, &p1);
    });
    assert_ne!(answer, Some(2));
}

#[test]
fn a_query_never_claims_two_pages_that_were_never_present_together() {
    // Page 0 loses an object (one input), then page 1 is stored (the next input): between
    // no two inputs are both pages full, so no answer of `Session::query` between two
    // calls is 2 (what the reader's docs promise it answers).
    let layout = review_layout();
    let (p0, p1) = (PageHash([1; 32]), PageHash([2; 32]));
    let mut index = Index::new(IndexConfig::default());
    store_page(&mut index, &layout, &p0);
    let answer = query_with_writer_between(&mut index, &layout, [p0, p1], |index| {
        remove_one_object(index, &layout, &p0);
        store_page(index, &layout, &p1);
    });
    assert_ne!(
        answer,
        Some(2),
        "page 0 was removed before page 1 was stored, yet both were claimed"
    );
}

#[test]
fn a_query_that_overlaps_a_removal_of_other_pages_keeps_its_answer() {
    // Removals are not bracketed: a query that overlaps one checks the slots of the pages it
    // claims again, and keeps its answer when none of them was written.
    let layout = review_layout();
    let (p0, p1, p2) = (PageHash([1; 32]), PageHash([2; 32]), PageHash([3; 32]));
    let mut index = Index::new(IndexConfig::default());
    for p in [&p0, &p1, &p2] {
        store_page(&mut index, &layout, p);
    }
    let answer = query_with_writer_between(&mut index, &layout, [p0, p1], |index| {
        remove_one_object(index, &layout, &p2);
        // A store of an object already present writes nothing.
        store_page(index, &layout, &p1);
    });
    assert_eq!(
        answer,
        Some(2),
        "no page the query claims was written under it"
    );
    // A removal that writes a claimed page's slot makes the query read again.
    store_page(&mut index, &layout, &p2);
    let answer = query_with_writer_between(&mut index, &layout, [p0, p1], |index| {
        remove_one_object(index, &layout, &p0);
        store_page(index, &layout, &p0);
    });
    assert_eq!(
        answer, None,
        "page 0 was taken and stored again under the query"
    );
}

#[test]
fn a_removal_of_a_page_claimed_past_the_first_buffer_makes_the_query_read_again() {
    // The reader records its first FEW_CLAIMS claims in a short buffer and the rest in a spill
    // buffer: a removal of a page it claimed there, after the page was read, is found too.
    let layout = review_layout();
    let page = |i: usize| {
        let mut h = [0u8; 32];
        h[..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
        PageHash(h)
    };
    let pages: Vec<PageHash> = (0..FEW_CLAIMS + 8).map(page).collect();
    let mut index = Index::new(IndexConfig::default());
    for p in &pages {
        store_page(&mut index, &layout, p);
    }
    let late = FEW_CLAIMS + 2;
    let answer = query_many_with_writer_after(&mut index, &layout, &pages, late + 1, |index| {
        remove_one_object(index, &layout, &pages[late]);
    });
    assert_eq!(answer, None, "page {late} was claimed, then lost an object");
    let answer = query_many_with_writer_after(&mut index, &layout, &pages, late + 1, |_| {});
    assert_eq!(
        answer,
        Some(late),
        "the prefix ends at the page that lost an object"
    );
}

#[test]
fn a_query_claiming_more_pages_than_it_can_check_reads_again_after_a_removal() {
    // The claims buffer holds CLAIMS slots; a query that claims more cannot check them all
    // again, so across a removal it reads again (and may end Busy), never keeps its answer.
    let layout = review_layout();
    let page = |i: usize| {
        let mut h = [0u8; 32];
        h[..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
        PageHash(h)
    };
    let pages: Vec<PageHash> = (0..=CLAIMS).map(page).collect();
    let other = page(CLAIMS + 1);
    let mut index = Index::new(IndexConfig::default());
    for p in pages.iter().chain([&other]) {
        store_page(&mut index, &layout, p);
    }
    let answer = query_many_with_writer_between(&mut index, &layout, &pages[..CLAIMS], |index| {
        remove_one_object(index, &layout, &other);
    });
    assert_eq!(
        answer,
        Some(CLAIMS),
        "every claim fits and none was written"
    );
    store_page(&mut index, &layout, &other);
    let answer = query_many_with_writer_between(&mut index, &layout, &pages, |index| {
        remove_one_object(index, &layout, &other);
    });
    assert_eq!(answer, None, "one claim could not be recorded");
}

#[test]
fn a_removal_bumps_the_removal_count_and_a_wrap_of_it_turns() {
    let t = PageTable::new(4, 7);
    let before = t.state();
    t.begin_removal();
    assert_eq!(t.still(before), Still::IfUnchanged, "under way");
    let during = t.state();
    t.end_change();
    assert_eq!(t.still(before), Still::IfUnchanged);
    assert_eq!(t.still(during), Still::IfUnchanged, "began during it");
    let after = t.state();
    assert_eq!(t.still(after), Still::Yes);
    // A whole turn of the removal count (2^31 removals) is seen through the turns.
    t.state.removals.store(u32::MAX - 1, Ordering::Relaxed);
    let near = t.state();
    t.begin_removal();
    t.end_change();
    t.state.removals.store(u32::MAX - 1, Ordering::Relaxed);
    assert_eq!(
        t.still(near),
        Still::No,
        "the count came round to where it was"
    );
}

#[test]
fn namespaces_past_the_first_segments_are_found() {
    let dir = SharedNamespaces::new(1 << 20, 7);
    let names: Vec<String> = (0..300).map(|i| alloc::format!("t{i}")).collect();
    for (ns, t) in names.iter().enumerate() {
        dir.add(ns as u32, t, Some("p"));
        dir.add_suffix(ns as u32, 0, "_k");
    }
    let read = dir.read().expect("no clear under way");
    for (ns, t) in names.iter().enumerate() {
        let (found, entry) = read.find(t, Some("p")).expect("added");
        assert_eq!(found, ns as u32);
        assert_eq!(entry.slot_of("_k"), Some(0));
        assert!(read.find(t, None).is_none());
    }
    assert_eq!(ns_segment(0), (0, 0));
    assert_eq!(ns_segment(NS_BASE), (1, 0));
    assert_eq!(ns_segment(3 * NS_BASE), (2, 0));
}

#[test]
fn a_suffix_is_found_from_any_starting_slot_and_an_absent_one_is_not() {
    let dir = SharedNamespaces::new(1 << 20, 7);
    dir.add(0, "t", None);
    let suffixes: Vec<String> = (0..40).map(|i| alloc::format!("_{i}_k")).collect();
    for (slot, suffix) in suffixes.iter().enumerate() {
        dir.add_suffix(0, slot as u32, suffix);
    }
    let read = dir.read().expect("no clear under way");
    let (_, entry) = read.find("t", None).expect("added");
    for (slot, suffix) in suffixes.iter().enumerate() {
        for from in [0, 1, 7, 8, 39, 40, 41, 127, 128, 1000] {
            assert_eq!(
                entry.slot_of_from(suffix, from),
                Some(slot as u32),
                "{suffix} from {from}"
            );
        }
        assert_eq!(entry.slot_of(suffix), Some(slot as u32));
    }
    for from in [0, 5, 40, 200] {
        assert_eq!(entry.slot_of_from("_40_k", from), None);
        assert_eq!(entry.slot_of_from("_1_v", from), None);
    }
}

#[test]
fn the_namespace_cap_costs_nothing_until_namespaces_come() {
    // Before the shared directory, namespaces grew on demand: a high cap (or `usize::MAX`
    // for "no cap", which now asks for 2^31 entries and 2^32 buckets, 32 GiB, at
    // `Session::new`) cost nothing up front. The slab's chunks are allocated on first use
    // for the same reason.
    let config = |max_namespaces| IndexConfig {
        max_pages: 1024,
        max_namespaces,
        ..IndexConfig::default()
    };
    let small = Index::new(config(1)).allocated_bytes();
    let high = Index::new(config(1 << 20)).allocated_bytes();
    assert!(
        high - small < 64 * 1024,
        "an empty index with room for 2^20 namespaces allocates {high} bytes, {small} with 1"
    );
}

#[test]
fn a_query_that_outlasts_a_whole_turn_of_the_generation_reads_again() {
    // Review: the generation has 32 - 5 = 27 bits. A reader descheduled between its first
    // and its last probe while the writer applies 2^26 batches that remove (two moves
    // each) finds the state word as it left it: page 1 read before a change that took it
    // and brought page 2, page 2 read after, and both claimed. At 1M batches a second that
    // is about a minute of a preempted query thread: rare, but a false hit, and nothing
    // bounds it (a query has no deadline of its own).
    let t = PageTable::new(4, 7);
    t.put(0, &page(0, hash(1), 1, 0));
    t.link(page_table_hash(7, 0, &hash(1)), 0);
    t.put(1, &page(0, hash(2), 2, 0));
    let before = t.state();
    assert_eq!(t.probe(0, &hash(1)).0, 1);
    t.begin_change();
    t.unlink(page_table_hash(7, 0, &hash(1)), 0);
    t.link(page_table_hash(7, 0, &hash(2)), 1);
    t.end_change();
    for _ in 1..(1u32 << (32 - GENERATION_SHIFT - 1)) {
        t.begin_change();
        t.end_change();
    }
    assert_eq!(t.probe(0, &hash(2)).0, 2);
    assert_eq!(t.probe(0, &hash(1)).0, 0, "page 1 is gone");
    assert_eq!(
        t.still(before),
        Still::No,
        "pages 1 and 2, never in the table together, read as one state"
    );
}

#[test]
fn a_namespace_costs_about_what_its_suffixes_cost() {
    // Review: the index's own namespace (tenant, prefix, a Vec of the suffixes seen) costs
    // about 100 bytes and its strings; its mirror for readers reserves MAX_SUFFIXES set-once
    // cells up front (128 x 8 bytes): a namespace of 4 suffixes and one page measured 1,573
    // bytes, about 1.6 GB for the 2^20 namespaces a multi-tenant master may need (the
    // previous review's figure), where the index's own copy is about a quarter of that. Now
    // the mirror allocates its suffix cells in segments as the suffixes come (4, 4, 8, ...).
    let config = IndexConfig {
        max_pages: 1024,
        max_namespaces: 1 << 12,
        ..IndexConfig::default()
    };
    let layout = review_layout();
    let namespaces = 1000;
    let mut index = Index::new(config.clone());
    let store_in = |index: &mut Index, tenant: &str| {
        for pool in &layout.pools {
            for suffix in &pool.suffixes {
                let mut key = String::new();
                layout.write_object_key(&PageHash([1; 32]), suffix, &mut key);
                let _ = index.store(tenant, &key, None, None);
            }
        }
    };
    // The first page allocates the slab's first chunk: counted before, not per namespace.
    store_in(&mut index, "first");
    let before = index.allocated_bytes();
    let mirror_before = index.shared.namespaces.allocated_bytes();
    for t in 0..namespaces {
        store_in(&mut index, &alloc::format!("tenant{t}"));
    }
    let per_namespace = (index.allocated_bytes() - before) / namespaces;
    let mirror = (index.shared.namespaces.allocated_bytes() - mirror_before) / namespaces;
    let suffixes = layout.pools.iter().map(|p| p.suffixes.len()).sum::<usize>();
    // The mirror holds what the index's own copy holds (tenant, prefix, suffixes) in set-once
    // cells: it may cost a little more (296 bytes against 237 when measured), never a multiple
    // (it was 1,336 against 237).
    let own = per_namespace - mirror;
    assert!(
        mirror * 2 <= own * 3,
        "{mirror} bytes per namespace of {suffixes} suffixes for readers, {own} for the index"
    );
    assert!(
        per_namespace < 640,
        "{per_namespace} bytes per namespace of {suffixes} suffixes"
    );
}

// ---- Namespaces are reclaimed when the index is cleared.

/// The TP 2 layout of model `name` (its own key prefix).
fn layout_of_model(name: &str) -> Layout {
    let mut params = SglangParams::new(4, 2);
    params.model = Some(name.into());
    Layout::from_sglang(&params).expect("a valid layout")
}

/// Reports whether every object of `page` under `layout` is tracked and present.
fn holds(index: &Index, layout: &Layout, page: &PageHash) -> bool {
    index
        .query("default", layout, [*page].into_iter(), None)
        .prefix_pages
        == 1
}

#[test]
fn a_clear_frees_the_namespace_table_for_prefixes_never_seen() {
    // Two models fill a table of two namespaces; a third is untracked until a clear, and
    // after one it is tracked: a store that once held many prefixes does not fill the table
    // for good.
    let mut index = Index::new(IndexConfig {
        max_namespaces: 2,
        ..IndexConfig::default()
    });
    let [a, b, c] = ["a", "b", "c"].map(layout_of_model);
    let page = PageHash([7; 32]);
    store_page(&mut index, &a, &page);
    store_page(&mut index, &b, &page);
    store_page(&mut index, &c, &page);
    assert!(holds(&index, &a, &page) && holds(&index, &b, &page));
    assert!(!holds(&index, &c, &page), "the table is full");
    assert!(index.counters().untracked_objects > 0);
    for _ in 0..3 {
        let _ = index.clear();
        store_page(&mut index, &c, &page);
        assert!(holds(&index, &c, &page), "a clear gave the numbers back");
        assert!(!holds(&index, &a, &page) && !holds(&index, &b, &page));
        assert_eq!(index.namespace(0), Some(("default", Some("c"))));
        assert_eq!(index.namespace(1), None, "one namespace since the clear");
    }
    store_page(&mut index, &a, &page);
    assert!(holds(&index, &a, &page) && holds(&index, &c, &page));
}

#[test]
fn a_namespace_number_reused_after_a_clear_is_never_read_as_the_old_one() {
    // Model a's page 0 is read under number 0; then a clear, and model b's pages (the same
    // hashes, the same suffix slots) stored under number 0 again, before the query reads
    // page 1 under number 0: it must not claim b's page 1 as a's.
    let (a, b) = (layout_of_model("a"), layout_of_model("b"));
    let (p0, p1) = (PageHash([1; 32]), PageHash([2; 32]));
    let mut index = Index::new(IndexConfig {
        max_namespaces: 1,
        ..IndexConfig::default()
    });
    store_page(&mut index, &a, &p0);
    let answer = query_with_writer_between(&mut index, &a, [p0, p1], |index| {
        let _ = index.clear();
        store_page(index, &b, &p0);
        store_page(index, &b, &p1);
        index.settle();
    });
    assert_eq!(index.namespace(0), Some(("default", Some("b"))));
    assert!(holds(&index, &b, &p1), "b's page 1 is under the old number");
    assert_eq!(answer, None, "read across the clear: it reads again");
    // After the clear, a's pages are a miss; b's are hits.
    let answer = query_with_writer_between(&mut index, &a, [p0, p1], |_| {});
    assert_eq!(answer, Some(0));
    let answer = query_with_writer_between(&mut index, &b, [p0, p1], |_| {});
    assert_eq!(answer, Some(2));
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
