//! Memory per page at TP 8 (16 objects a page), counted by a global allocator: the index must
//! hold a page in at most 64 bytes (4 per object; issue 31), and in at most 67 with its suspect
//! table full (which costs under 3 bytes a page by design).

use hicache_index::{Index, IndexConfig, Layout, Medium, PageHash, SglangParams};
use hicache_index_tests::fuzz::meter::{self, Meter};

#[global_allocator]
static ALLOCATOR: Meter = Meter;

/// The meter counts every thread: one measurement at a time.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_full_index_at_tp8_holds_a_page_in_at_most_64_bytes() {
    const PAGES: usize = 1 << 15;
    let layout = Layout::from_sglang(&SglangParams::new(64, 8)).unwrap();
    let keys_per_page = layout.object_count();
    assert_eq!(keys_per_page, 16);
    let suffixes: Vec<String> = layout.suffixes().map(|(s, _)| s.to_owned()).collect();
    let mut key = String::new();
    let _one_at_a_time = MEASURING.lock().unwrap_or_else(|e| e.into_inner());

    let before = meter::live_bytes();
    let mut index = Index::standalone(IndexConfig {
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
            index.store_object("default", &key, Some(Medium::Cpu));
        }
    }
    let bytes = meter::live_bytes() - before;
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
    assert!(per_page <= 64.0, "{per_page:.1} bytes per page");
    drop(key);
}

#[test]
fn a_full_index_at_tp8_with_a_full_suspect_table_holds_a_page_in_at_most_67_bytes() {
    const PAGES: usize = 1 << 15;
    let layout = Layout::from_sglang(&SglangParams::new(64, 8)).unwrap();
    let suffixes: Vec<String> = layout.suffixes().map(|(s, _)| s.to_owned()).collect();
    let mut key = String::new();
    let page = |i: usize| {
        let mut h = [0u8; 32];
        h[..8].copy_from_slice(&(i as u64).to_le_bytes());
        h[8..16].copy_from_slice(&(i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
        PageHash(h)
    };
    let _one_at_a_time = MEASURING.lock().unwrap_or_else(|e| e.into_inner());

    let before = meter::live_bytes();
    let mut index = Index::standalone(IndexConfig {
        max_pages: PAGES,
        ..IndexConfig::default()
    });
    for i in 0..PAGES {
        for suffix in &suffixes {
            layout.write_object_key(&page(i), suffix, &mut key);
            index.store_object("default", &key, Some(Medium::Cpu));
            index.store_object("default", &key, Some(Medium::Disk));
        }
    }
    // Memory copies go from a sixteenth of the pages: more suspects than the table keeps.
    for i in 0..PAGES / 16 {
        for suffix in &suffixes {
            layout.write_object_key(&page(i), suffix, &mut key);
            index.remove_object("default", &key, Some(Medium::Cpu));
        }
    }
    // The freed slots are filled again.
    for i in PAGES..PAGES + PAGES / 16 {
        for suffix in &suffixes {
            layout.write_object_key(&page(i), suffix, &mut key);
            index.store_object("default", &key, Some(Medium::Cpu));
        }
    }
    let bytes = meter::live_bytes() - before;
    assert_eq!(index.page_count(), PAGES);
    assert!(
        index.counters().suspects_dropped > 0,
        "the suspect table is full"
    );
    let per_page = bytes as f64 / PAGES as f64;
    println!(
        "{PAGES} pages, {} suspects: {bytes} bytes allocated, {per_page:.1} bytes/page",
        index.suspect_count()
    );
    assert!(per_page <= 67.0, "{per_page:.1} bytes per page");
    drop(key);
}
