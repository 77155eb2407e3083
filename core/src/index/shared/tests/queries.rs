//! Unit tests of the read side's double collect: a query's pages come from one state of the
//! index, across clears, removals and whole turns of the generation.

use super::*;

/// Page `i` of a query longer than `hash`'s 256 pages: `i + 1` in its first eight bytes.
fn numbered(i: usize) -> PageHash {
    let mut h = [0u8; 32];
    h[..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
    PageHash(h)
}

/// Runs a query the way [`crate::reader::Reader`] does (state, probes, `still`, the claims
/// checked again after a removal), with `between`
/// run by the writer after the first page was probed and before the second is: returns
/// the prefix the reader would answer, `None` when it would read again.
pub(super) fn query_with_writer_between(
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
        Still::IfUnchanged => claims.unchanged(|at| shared.pages.unchanged(at)),
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
    let pages: Vec<PageHash> = (0..FEW_CLAIMS + 8).map(numbered).collect();
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
    let pages: Vec<PageHash> = (0..=CLAIMS).map(numbered).collect();
    let other = numbered(CLAIMS + 1);
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
fn a_query_that_outlasts_a_whole_turn_of_the_generation_reads_again() {
    // Review: the generation has 32 - 5 = 27 bits. A reader descheduled between its first
    // and its last probe while the writer applies 2^26 batches that remove (two moves
    // each) finds the state word as it left it: page 1 read before a change that took it
    // and brought page 2, page 2 read after, and both claimed. At 1M batches a second that
    // is about a minute of a preempted query thread: rare, but a false hit, and nothing
    // bounds it (a query has no deadline of its own).
    let t = PageTable::new(4, 7);
    let before = read_page_1_then_begin_swapping_it_for_page_2(&t);
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
