//! The workers side of the demo: pages stored as requests are served, the oldest removed
//! beyond the cap, and the injected faults with their recovery.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use hicache_index::{Health, Lookup, PageHash, Seq};
use hicache_index_emulator::Position;
use hicache_index_tokio::QueryHandle;

use super::world::{lock, page_hashes, prefix, World, PAGE};

/// When the workers thread injects what.
pub(super) struct Plan {
    pub(super) start: Instant,
    pub(super) gap_at: Duration,
    pub(super) restart_at: Duration,
    pub(super) cap: usize,
}

/// The workers thread: stores the new pages of served requests (SGLang never puts a key that
/// exists), removes the oldest pages beyond the cap, and injects the faults.
pub(super) fn workers(world: &World, rx: &Receiver<Vec<PageHash>>, plan: &Plan) {
    let mut stored: HashSet<PageHash> = HashSet::new();
    let mut order: VecDeque<PageHash> = VecDeque::new();
    let (mut gap_done, mut restart_done) = (false, false);
    let mut gap_pages: Vec<PageHash> = Vec::new();
    let mut after_restart: Vec<PageHash> = Vec::new();
    let mut stopping_since: Option<Instant> = None;
    loop {
        if world.stop.load(Ordering::Acquire) {
            // Give a pending recovery a few more seconds to be seen, then stop.
            let pending =
                (gap_done && !gap_pages.is_empty() && lock(world).gap_recovered.is_none())
                    || (restart_done && lock(world).restart_recovered.is_none());
            let since = *stopping_since.get_or_insert_with(Instant::now);
            if !pending || since.elapsed() > Duration::from_secs(5) {
                return;
            }
        }
        let t = plan.start.elapsed();
        let mut fresh = Vec::new();
        if let Ok(pages) = rx.recv_timeout(Duration::from_millis(5)) {
            for page in std::iter::once(pages).chain(rx.try_iter()).flatten() {
                if stored.insert(page) {
                    order.push_back(page);
                    fresh.push(page);
                }
            }
        }
        if !gap_done && t >= plan.gap_at && !fresh.is_empty() {
            // The master's queue overflows: these pages are stored, their events lost.
            gap_done = true;
            gap_pages = fresh.split_off(fresh.len().saturating_sub(32));
            let keys: Vec<String> = gap_pages
                .iter()
                .flat_map(|p| world.layout.object_keys(p))
                .collect();
            world.emulator.store_unpublished(keys);
            let mut f = lock(world);
            f.gap_at = Some(t);
            f.gap_pages = gap_pages.len();
        }
        if !fresh.is_empty() && !world.stop.load(Ordering::Acquire) {
            world.emulator.store_pages(&world.layout, &fresh);
            if restart_done && after_restart.is_empty() {
                after_restart = fresh.clone();
            }
        }
        // One fault at a time: the restart waits until the gap is recovered from.
        let gap_settled = !gap_done || lock(world).gap_recovered.is_some();
        if !restart_done
            && t >= plan.restart_at
            && gap_settled
            && !world.stop.load(Ordering::Acquire)
        {
            restart_done = true;
            restart(world, &mut stored, &mut order, plan.start);
        }
        if order.len() > plan.cap {
            // Down to the cap, at least 1 % of it at a time; the pages whose recovery is being
            // watched stay.
            let excess = (order.len() - plan.cap)
                .max(plan.cap / 100)
                .min(order.len());
            let (victims, watched): (Vec<PageHash>, Vec<PageHash>) = order
                .drain(..excess)
                .partition(|p| !gap_pages.contains(p) && !after_restart.contains(p));
            order.extend(watched);
            for v in &victims {
                stored.remove(v);
            }
            remove(world, &victims);
        }
        check_recovery(world, &gap_pages, &after_restart, plan.start);
    }
}

/// Pages removed with one batch: 4 pages of 16 objects are the master's 64 events.
const PAGES_A_BATCH: usize = 4;

/// Removes pages from the master (with events), one batch at a time, and waits until the index
/// has applied every batch that carried the removals; then none of the pages may be claimed.
/// The removal lag is measured per batch.
fn remove(world: &World, victims: &[PageHash]) {
    // Until the master says which batch carries them, no batch of this run covers them.
    let pending = Position {
        run: world.emulator.run(),
        seq: Seq(u64::MAX),
    };
    world.removing(victims, pending);
    let mut waiting: Vec<(&[PageHash], Position, Instant)> = Vec::new();
    for pages in victims.chunks(PAGES_A_BATCH) {
        let keys: Vec<String> = pages
            .iter()
            .flat_map(|p| world.layout.object_keys(p))
            .collect();
        let removed = Instant::now();
        if let Some(at) = world.emulator.remove(keys) {
            world.removing(pages, at);
            waiting.push((pages, at, removed));
        }
    }
    let start = Instant::now();
    let mut applied_pages = Vec::new();
    while !waiting.is_empty() && start.elapsed() < Duration::from_secs(10) {
        let applied = world.applied();
        applied_pages.clear();
        waiting.retain(|(pages, at, removed)| {
            if !applied.covers(*at) {
                return true;
            }
            world.removal_lag.record(removed.elapsed());
            applied_pages.extend_from_slice(pages);
            false
        });
        if !applied_pages.is_empty() {
            world.applied_removals(&applied_pages);
        }
        if !waiting.is_empty() {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let timed_out = !waiting.is_empty();
    if !timed_out {
        check_forgotten(world, victims, "its removal was applied");
    }
    let mut f = lock(world);
    f.removals += victims.len() as u64;
    if timed_out {
        f.removal_waits_timed_out += 1;
    }
}

/// Restarts the master (every object lost, no event) and waits until the index follows the new
/// run: it claims a page stored only after the restart. Then none of the lost pages may be
/// claimed.
fn restart(
    world: &World,
    stored: &mut HashSet<PageHash>,
    order: &mut VecDeque<PageHash>,
    start: Instant,
) {
    let lost: Vec<PageHash> = order.drain(..).collect();
    stored.clear();
    let run = world.emulator.run() + 1;
    world.removing(&lost, Position { run, seq: Seq(0) });
    let at = start.elapsed();
    if world.emulator.restart().is_err() {
        return;
    }
    let follows = wait_new_run(world, Duration::from_secs(10));
    if follows {
        world.index_run.store(run, Ordering::SeqCst);
        world.applied_removals(&lost);
        check_forgotten(world, &lost, "the index follows the master's new run");
    }
    let mut f = lock(world);
    f.restart_at = Some(at);
    if follows {
        f.restart_forgotten = Some(start.elapsed());
    }
}

/// Stores probe pages in the master's new run until the index claims one; false after
/// `timeout`. (A probe stored before the subscription reached the new socket is lost with its
/// event, and learnt only from the resync's key list.)
fn wait_new_run(world: &World, timeout: Duration) -> bool {
    let start = Instant::now();
    let mut n = 0u32;
    while start.elapsed() < timeout {
        let probe = page_hashes(&world.layout, &[u32::MAX / 2 - n; PAGE as usize]);
        world.emulator.store_pages(&world.layout, &probe);
        n += 1;
        let probing = Instant::now();
        while probing.elapsed() < Duration::from_millis(200) {
            if prefix(&world.index, &probe) == probe.len() {
                return true;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    false
}

/// Counts every page of `pages` the index still claims as a false hit: the index knows they
/// are gone (`why`), and nothing stores them in between (this thread is the only writer).
fn check_forgotten(world: &World, pages: &[PageHash], why: &str) {
    let mut map = vec![false; pages.len()];
    let hits = world.index.query_map(&Lookup::page_hashes(pages), &mut map);
    for (page, _) in pages.iter().zip(&map).filter(|(_, &claimed)| claimed) {
        world.false_hit(|| {
            format!(
                "page {page:?} claimed after {why}, while the index was {} ({:?})",
                world.index.health().as_str(),
                hits.as_ref().map(|h| h.trust.as_str()),
            )
        });
    }
}

/// Notes when the pages lost in the gap, and the first pages stored after the restart, are
/// hits: the index has recovered.
fn check_recovery(
    world: &World,
    gap_pages: &[PageHash],
    after_restart: &[PageHash],
    start: Instant,
) {
    let mut f = lock(world);
    if f.gap_recovered.is_none() && !gap_pages.is_empty() && all_hit(&world.index, gap_pages) {
        f.gap_recovered = Some(start.elapsed());
    }
    if f.restart_recovered.is_none()
        && !after_restart.is_empty()
        && world.index.health() == Health::Live
        && all_hit(&world.index, after_restart)
    {
        f.restart_recovered = Some(start.elapsed());
    }
}

fn all_hit(index: &QueryHandle, pages: &[PageHash]) -> bool {
    let mut map = vec![false; pages.len()];
    let _ = index.query_map(&Lookup::page_hashes(pages), &mut map);
    map.iter().all(|&b| b)
}
