//! Unit tests of the namespace directory: segments, suffix slots, what a namespace costs,
//! and namespaces reclaimed when the index is cleared.

use super::queries::query_with_writer_between;
use super::*;

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
