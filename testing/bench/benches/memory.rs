//! Row 3: bytes per page and per object at 1M pages, TP 8 (16 objects a page), counted by a
//! global allocator: ours against the reference (a set of `String` keys). Writes
//! `<target>/perf/memory.json` for the table of docs/performance.md. `cargo bench -- --test`
//! runs it small.
//!
//! Row 6: the same pages dealt round robin over four models side by side (each its own key
//! prefix): one index for all of them, so the bytes per page should stay those of one model.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use hicache_index::{Index, IndexConfig, Medium};
use hicache_index_bench::perf::{self, BenchArgs};
use hicache_index_bench::reference::ReferenceIndex;
use hicache_index_bench::workload;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged and only counts bytes.
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

fn main() {
    let args = BenchArgs::from_env();
    if !args.is_selected("memory") {
        return;
    }
    let quick = args.quick;
    let pages: usize = if quick { 1 << 12 } else { 1 << 20 };
    let layout = workload::tp8();
    let suffixes: Vec<String> = layout.suffixes().map(|(s, _)| s.to_owned()).collect();
    let objects = pages * suffixes.len();
    let mut key = String::new();

    let before = LIVE.load(Ordering::Relaxed);
    let mut index = Index::standalone(IndexConfig {
        max_pages: pages,
        ..IndexConfig::default()
    });
    for i in 0..pages {
        let page = workload::synthetic_page(i as u64);
        for suffix in &suffixes {
            layout.write_object_key(&page, suffix, &mut key);
            index.store_object("default", &key, Some(Medium::Cpu));
        }
    }
    let ours = LIVE.load(Ordering::Relaxed) - before;
    assert_eq!(index.object_count(), objects);
    drop(index);

    let before = LIVE.load(Ordering::Relaxed);
    let reference = ReferenceIndex::new();
    for i in 0..pages {
        for key in layout.object_keys(&workload::synthetic_page(i as u64)) {
            reference.store(key);
        }
    }
    let theirs = LIVE.load(Ordering::Relaxed) - before;
    assert_eq!(reference.len(), objects);

    // Four models side by side: page i is model i % 4's (its own key prefix); one model alone
    // with the same kind of prefix for the comparison.
    let models: Vec<_> = (0..4).map(workload::tp8_of_model).collect();
    let mut side_by_side = |layouts: &[hicache_index::Layout]| {
        let before = LIVE.load(Ordering::Relaxed);
        let mut index = Index::standalone(IndexConfig {
            max_pages: pages,
            ..IndexConfig::default()
        });
        for i in 0..pages {
            let layout = &layouts[i % layouts.len()];
            let page = workload::synthetic_page(i as u64);
            for (suffix, _) in layout.suffixes() {
                layout.write_object_key(&page, suffix, &mut key);
                index.store_object("default", &key, Some(Medium::Cpu));
            }
        }
        let bytes = LIVE.load(Ordering::Relaxed) - before;
        assert_eq!(index.object_count(), objects);
        bytes
    };
    let one_model = side_by_side(&models[..1]);
    let four_models = side_by_side(&models);

    let per = |bytes: usize| (bytes as f64 / pages as f64, bytes as f64 / objects as f64);
    let (ours_page, ours_object) = per(ours);
    let (ref_page, ref_object) = per(theirs);
    println!("memory at {pages} pages, TP 8 ({objects} objects):");
    println!("  ours       {ours_page:10.1} bytes/page {ours_object:8.2} bytes/object");
    println!("  reference  {ref_page:10.1} bytes/page {ref_object:8.2} bytes/object");
    println!("  ratio      {:10.1}x less", theirs as f64 / ours as f64);
    println!(
        "  one model (prefixed) {:8.1} bytes/page; four models side by side {:8.1} bytes/page",
        one_model as f64 / pages as f64,
        four_models as f64 / pages as f64
    );
    if !quick {
        perf::write_result(
            "memory.json",
            &format!(
                "{{\"pages\":{pages},\"objects\":{objects},\"ours_bytes\":{ours},\"reference_bytes\":{theirs},\"one_model_bytes\":{one_model},\"four_models_bytes\":{four_models}}}\n"
            ),
        );
    }
}
