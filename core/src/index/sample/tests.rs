//! Verification sweeps over the index (moved from `core/tests/sweeps.rs` when the index's
//! mutators became crate-private): where `Index::sample_keys` says sweeps begin and end, and
//! that the rounds of one sweep sample every object present throughout it.

use alloc::collections::BTreeSet;
use alloc::string::String;
use alloc::vec::Vec;

use quickcheck_macros::quickcheck;

use super::Sampled;
use crate::{Index, IndexConfig, Layout, Namespace, PageHash, SglangParams, DEFAULT_TENANT};

/// The object keys of `pages` pages (TP 1: a key and a value object each).
fn keys(pages: u32) -> Vec<String> {
    let layout = Layout::from_sglang(&SglangParams::new(4, 1)).expect("a valid layout");
    let tokens: Vec<u32> = (0..pages * 4).collect();
    let hashes: Vec<PageHash> = layout.page_hashes(&tokens, Namespace::NONE).collect();
    hashes.iter().flat_map(|p| layout.object_keys(p)).collect()
}

fn sample(index: &mut Index, max: usize) -> (Sampled, Vec<String>) {
    let mut out = Vec::new();
    let sampled = index.sample_keys(DEFAULT_TENANT, max, &mut out);
    (sampled, out)
}

#[test]
fn sweeps_begin_at_the_first_slot_and_end_past_the_last_page() {
    let mut index = Index::new(IndexConfig::default());
    for key in keys(3) {
        let _ = index.store(DEFAULT_TENANT, &key, None, None);
    }
    // Three pages of two objects, four keys a round.
    let (first, out) = sample(&mut index, 4);
    assert_eq!(out.len(), 4);
    assert!(first.began_sweep && !first.ended_sweep && !first.began_next);
    let (second, out) = sample(&mut index, 4);
    assert_eq!(out.len(), 4, "page 2, then page 0 of the next sweep");
    assert!(!second.began_sweep && second.ended_sweep && second.began_next);
    // A round that takes the whole index from its first slot begins and ends one sweep.
    let mut index = Index::new(IndexConfig::default());
    for key in keys(3) {
        let _ = index.store(DEFAULT_TENANT, &key, None, None);
    }
    let (whole, out) = sample(&mut index, 100);
    assert_eq!(out.len(), 6);
    assert!(whole.began_sweep && whole.ended_sweep && !whole.began_next);
}

/// Runs rounds of `1 + max % 4` keys, with stores and removals in between (`op % 3`: store,
/// remove, store for another tenant), and checks what the session relies on: the rounds from
/// the one a sweep began in to the one it ended in sampled every object of the default tenant
/// that was present from the first of them to the last, and reported passing another tenant's
/// objects when there were any from the start (this model never removes them).
#[quickcheck]
fn a_sweep_samples_every_object_present_throughout_it(initial: u8, steps: Vec<(u8, u8, u8)>) {
    let universe = keys(8);
    let mut index = Index::new(IndexConfig::default());
    let mut present = BTreeSet::new();
    let mut other_present = false;
    for key in universe.iter().take(usize::from(initial) % universe.len()) {
        let _ = index.store(DEFAULT_TENANT, key, None, None);
        present.insert(key.clone());
    }
    // The sweep in progress: the objects it must sample, those it sampled, whether another
    // tenant's objects were there from its start, and whether a round reported passing them.
    let mut sweep: Option<(BTreeSet<String>, BTreeSet<String>, bool, bool)> = None;
    for (op, which, max) in steps {
        let key = &universe[usize::from(which) % universe.len()];
        match op % 3 {
            0 => {
                let _ = index.store(DEFAULT_TENANT, key, None, None);
                present.insert(key.clone());
            }
            1 => {
                let _ = index.remove(DEFAULT_TENANT, key);
                present.remove(key);
                if let Some((required, ..)) = &mut sweep {
                    required.remove(key);
                }
            }
            _ => {
                let _ = index.store("other", key, None, None);
                other_present = true;
            }
        }
        let (s, out) = sample(&mut index, 1 + usize::from(max) % 4);
        if out.is_empty() {
            sweep = None;
            continue;
        }
        if s.began_sweep && sweep.is_none() {
            sweep = Some((present.clone(), BTreeSet::new(), other_present, false));
        }
        if let Some((_, sampled, _, seen_other)) = &mut sweep {
            sampled.extend(out.iter().cloned());
            *seen_other |= s.other_tenants;
        }
        if s.ended_sweep {
            if let Some((required, sampled, required_other, seen_other)) = &sweep {
                let missed: Vec<_> = required.difference(sampled).collect();
                assert!(missed.is_empty(), "missed {missed:?}");
                assert!(
                    !required_other || *seen_other,
                    "another tenant's objects were not reported"
                );
            }
            sweep = s.began_next.then(|| {
                let sampled = out.iter().cloned().collect();
                (present.clone(), sampled, other_present, s.other_tenants)
            });
        }
    }
}
