//! The review of the prefix memo (issue 15): the heap it really holds against its byte budget,
//! measured with a counting allocator (this file's one test, so no other test allocates while
//! it measures).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use hicache_index::{Namespace, PageHashes};
use hicache_index_driver::PrefixMemo;

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; only a counter is updated beside it.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract for `dealloc` is passed on as is.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: the caller's contract for `realloc` is passed on as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[test]
fn a_full_memo_holds_no_more_heap_than_its_byte_budget() {
    const BUDGET: usize = 4 << 20;
    const PAGE: u32 = 64;
    const PAGES: usize = 40_000;
    // Distinct pages of 64 tokens (one long prompt: every page has its own prior), far more
    // than the budget holds; allocated before the measurement starts.
    let tokens: Vec<u32> = (0..PAGES as u32 * PAGE).collect();
    let memo = PrefixMemo::new(BUDGET);
    let before = LIVE.load(Ordering::Relaxed);
    let mut pages = PageHashes::new(&tokens, PAGE, false, Namespace::NONE);
    let mut hashed = 0;
    while pages.next_with(&memo).is_some() {
        hashed += 1;
    }
    let held = LIVE.load(Ordering::Relaxed) - before;
    let stats = memo.stats();
    assert_eq!(hashed, PAGES);
    assert!(
        stats.bytes <= BUDGET,
        "the memo's own accounting: {stats:?}"
    );
    assert!(
        held <= BUDGET as isize,
        "the memo holds {held} bytes of heap for a budget of {BUDGET} ({} entries, {} bytes \
         charged)",
        stats.entries,
        stats.bytes
    );
    drop(memo);
}
