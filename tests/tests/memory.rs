//! Memory per page at TP 8 (16 objects a page), counted by a global allocator: the index must
//! hold a page in at most 128 bytes (8 per object).
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use hicache_index::{Index, IndexConfig, Layout, Medium, PageHash, SglangParams};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator and only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: AllocLayout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: AllocLayout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: AllocLayout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn a_full_index_at_tp8_holds_a_page_in_at_most_128_bytes() {
    const PAGES: usize = 1 << 15;
    let layout = Layout::from_sglang(&SglangParams::new(64, 8)).unwrap();
    let keys_per_page = layout.object_count();
    assert_eq!(keys_per_page, 16);
    let suffixes: Vec<String> = layout.suffixes().map(|(s, _)| s.to_owned()).collect();
    let mut key = String::new();

    let before = LIVE.load(Ordering::Relaxed);
    let mut index = Index::new(IndexConfig {
        max_pages: PAGES,
        ..IndexConfig::default()
    });
    for i in 0..PAGES {
        let mut h = [0u8; 32];
        h[..8].copy_from_slice(&(i as u64).to_le_bytes());
        h[8..16].copy_from_slice(&(i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
        let page = PageHash(h);
        for suffix in &suffixes {
            layout.write_object_key(&page, suffix, &mut key);
            let _ = index.store("default", &key, None, Some(Medium::Cpu));
        }
    }
    let bytes = LIVE.load(Ordering::Relaxed) - before;
    assert_eq!(index.page_count(), PAGES);
    assert_eq!(index.object_count(), PAGES * 16);
    assert_eq!(index.counters().evictions, 0);
    let per_page = bytes as f64 / PAGES as f64;
    println!(
        "{PAGES} pages, {} objects: {bytes} bytes allocated, {per_page:.1} bytes/page, {:.2} bytes/object \
         (index's own account: {} bytes)",
        PAGES * 16,
        per_page / 16.0,
        index.allocated_bytes()
    );
    assert!(per_page <= 128.0, "{per_page:.1} bytes per page");
    drop(key);
}
