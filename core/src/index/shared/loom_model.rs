//! The model test of the read/write protocol: every interleaving (up to a preemption bound)
//! and every reordering the memory model allows, explored by loom. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p hicache-index --release --lib loom`.

use loom::sync::Arc;

use crate::index::hashing::page_table_hash;

use super::claims::CLAIMS;
use super::*;

const SEED: u64 = 3;

fn hash(i: u8) -> PageHash {
    PageHash([i; 32])
}

/// A mask with `k` in every word: a read that mixed two writes shows two values.
fn mask(k: u32) -> u128 {
    let k = u128::from(k);
    k | k << 32 | k << 64 | k << 96
}

fn h(i: u8) -> u64 {
    page_table_hash(SEED, 0, &hash(i))
}

/// A table holding page 1 in slot 0 with memory mask `mask(1)`.
fn table() -> Arc<PageTable> {
    table_of(4)
}

/// [`table`] with room for `capacity` pages: 4, a clear of its one page sweeps every bucket;
/// 16, it empties the one run the page is in (see [`PageTable::clear`]).
fn table_of(capacity: usize) -> Arc<PageTable> {
    let t = PageTable::new(capacity, SEED);
    t.put(0, &page(0, hash(1), mask(1), 0));
    t.link(h(1), 0);
    Arc::new(t)
}

// A reader racing a slot's whole rewrite for another page (20 stores, each load free to
// read either write) ran loom for over 20 minutes even with one preemption; that case is
// left to the unit tests and the concurrent differential quickcheck.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(f);
}

#[test]
fn loom_a_reader_sees_one_version_of_a_page_or_a_miss() {
    model(|| {
        let t = table();
        let w = Arc::clone(&t);
        let writer = loom::thread::spawn(move || {
            w.set_masks(0, mask(2), mask(3));
        });
        let (present, cpu) = t.probe(0, &hash(1));
        let seen = [(mask(1), mask(1)), (mask(2) | mask(3), mask(2)), (0, 0)];
        assert!(seen.contains(&(present, cpu)), "torn: {present:x} {cpu:x}");
        writer.join().unwrap();
    });
}

#[test]
fn loom_a_query_that_keeps_its_state_never_mixes_two_generations() {
    for capacity in [4, 16] {
        never_mixes_two_generations(capacity);
    }
}

fn never_mixes_two_generations(capacity: usize) {
    model(move || {
        let t = table_of(capacity);
        let initial = t.state();
        let w = Arc::clone(&t);
        let writer = loom::thread::spawn(move || {
            w.clear(1);
            // The same page again after the clear, in another slot, with other masks.
            w.put(1, &page(0, hash(1), mask(5), 0));
            w.link(h(1), 1);
        });
        let before = t.state();
        let got = t.probe(0, &hash(1));
        if t.still(before) == Still::Yes {
            let want = if before == initial { mask(1) } else { mask(5) };
            assert!(
                got == (want, want) || got == (0, 0),
                "{got:x?} in state {before:?}"
            );
        }
        writer.join().unwrap();
    });
}

#[test]
fn loom_a_flag_set_before_a_change_is_seen_by_a_query_that_sees_the_change() {
    model(|| {
        let t = table();
        let w = Arc::clone(&t);
        let writer = loom::thread::spawn(move || {
            w.set_flags(8);
            w.set_masks(0, mask(1), mask(9));
        });
        let before = t.state();
        let (present, _) = t.probe(0, &hash(1));
        if t.still(before) == Still::Yes && present == mask(1) | mask(9) {
            assert_eq!(
                PageTable::flags_of(before),
                8,
                "the change without its flag"
            );
        }
        writer.join().unwrap();
    });
}

#[test]
fn loom_a_query_that_keeps_its_state_never_claims_two_pages_a_change_swapped() {
    // Review: the change bracket under loom. Page 1 in slot 0; one change takes it and
    // links page 2 (written in slot 1 beforehand); a query of page 1 then page 2 that keeps
    // its state claims at most one of them. The writer runs on the model's own thread and
    // the query on the spawned one: with the writer spawned, loom explores one execution
    // only (its DPOR records the writer's own load of a bucket, in `link` and `unlink`, as
    // the last access and never reorders the query's loads after the store that follows:
    // tokio-rs/loom#166, #392), so the model passed even with the bracket taken out. As it
    // stands it explores 188 executions, and fails at once without the bracket.
    model(|| {
        let t = table();
        t.put(1, &page(0, hash(2), mask(2), 0));
        let r = Arc::clone(&t);
        let query = loom::thread::spawn(move || {
            let before = r.state();
            let one = r.probe(0, &hash(1)).0 != 0;
            let two = r.probe(0, &hash(2)).0 != 0;
            (one, two, r.still(before))
        });
        t.begin_change();
        t.unlink(h(1), 0);
        t.link(h(2), 1);
        t.end_change();
        let (one, two, still) = query.join().unwrap();
        if still == Still::Yes {
            assert!(!(one && two), "pages 1 and 2 claimed together");
        }
    });
}

#[test]
fn loom_a_query_that_checks_its_slots_again_never_claims_two_pages_a_removal_swapped() {
    // Removals are not bracketed: the writer takes page 1 out of its slot (the masks, then
    // the bucket) and stores page 2 (written in slot 1, then linked) under one removal. A query
    // of page 1 then page 2 keeps an answer claiming both only if it saw no removal at all,
    // or if both slots still hold the versions it read; neither can happen. Writer on the
    // model's thread, as above.
    model(|| {
        let t = table();
        t.put(1, &page(0, hash(2), mask(2), 0));
        let r = Arc::clone(&t);
        let query = loom::thread::spawn(move || {
            let before = r.state();
            let mut slots = [SlotAt::default(); CLAIMS];
            let mut claims = Claims::new(&mut slots);
            let mut claim = |p: u8| {
                let (present, _, at) = r.probe_at(0, &hash(p));
                if let Some(at) = at.filter(|_| present != 0) {
                    claims.push(at);
                }
                present != 0
            };
            let (one, two) = (claim(1), claim(2));
            let stands = match r.still(before) {
                Still::Yes => true,
                Still::IfUnchanged => claims.unchanged(|at| r.unchanged(at)),
                Still::No => false,
            };
            (one, two, stands)
        });
        t.begin_removal();
        t.set_masks(0, 0, 0);
        t.unlink(h(1), 0);
        t.link(h(2), 1);
        t.end_change();
        let (one, two, stands) = query.join().unwrap();
        if stands {
            assert!(!(one && two), "pages 1 and 2 claimed together");
        }
    });
}

#[test]
fn loom_a_namespace_number_reused_after_a_clear_is_never_read_as_the_old_one() {
    // Namespace 0 is ("t", "a"), its page 1 in slot 0 with mask(1). The writer clears the
    // index, reclaims the directory and gives number 0 to ("t", "b"), whose page 1 goes in
    // slot 1 with mask(2) (in another slot: a reader racing a slot's whole rewrite is left
    // to the unit tests, see `model`). A query of "a"'s page 1 resolves the number, then
    // probes: an answer it keeps is "a"'s page (mask(1)) or a miss, never "b"'s under the
    // reused number. Writer on the model's thread, as above.
    for capacity in [4, 16] {
        reused_number_never_read_as_the_old_one(capacity);
    }
}

fn reused_number_never_read_as_the_old_one(capacity: usize) {
    model(move || {
        let shared = Arc::new(Shared {
            pages: PageTable::new(capacity, SEED),
            namespaces: SharedNamespaces::new(4, SEED),
        });
        shared.namespaces.add(0, "t", Some("a"));
        shared.pages.put(0, &page(0, hash(1), mask(1), 0));
        shared.pages.link(h(1), 0);
        let r = Arc::clone(&shared);
        let query = loom::thread::spawn(move || {
            let before = r.pages.state();
            let ns = r
                .namespaces
                .read()
                .and_then(|dir| dir.find("t", Some("a")).map(|(ns, _)| ns));
            let Some(ns) = ns else {
                return None;
            };
            let (present, _, at) = r.pages.probe_at(ns, &hash(1));
            let stands = match r.pages.still(before) {
                Still::Yes => true,
                Still::IfUnchanged => at.is_some_and(|at| r.pages.unchanged(at)),
                Still::No => false,
            };
            stands.then_some(present)
        });
        shared.pages.begin_change();
        shared.namespaces.reclaim();
        shared.pages.clear(1);
        shared.namespaces.add(0, "t", Some("b"));
        shared.pages.put(1, &page(0, hash(1), mask(2), 0));
        shared.pages.link(h(1), 1);
        shared.pages.end_change();
        if let Some(present) = query.join().unwrap() {
            assert!(
                present == mask(1) || present == 0,
                "b's page read as a's under the reused number: {present:x}"
            );
        }
    });
}
