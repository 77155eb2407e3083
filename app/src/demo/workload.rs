//! The router side of the demo: shared system prompts, conversations that grow turn by turn,
//! and the check of every hit against the master.

use std::sync::atomic::Ordering;
use std::sync::mpsc::SyncSender;
use std::time::{Duration, Instant};

use hicache_index::{Lookup, Namespace, PageHash};
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

use super::world::{page_hashes, Applied, World, PAGE};

/// Shared system prompts.
const PROMPTS: usize = 300;
/// Conversations each router thread keeps going.
const CONVERSATIONS: usize = 400;
/// A conversation longer than this starts over.
const MAX_TOKENS: usize = 48 * PAGE as usize;

/// The workload's deterministic generator: SplitMix64 from `rand_xoshiro`, seeded with the
/// demo's `--seed` (the same stream as the simulator's generator for the same state).
struct Rng(SplitMix64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(SplitMix64::from_seed(seed.to_le_bytes()))
    }

    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A value in `low..high`.
    fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low).max(1)
    }

    /// A uniform value in `0..1`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn tokens(&mut self, out: &mut Vec<u32>, n: usize) {
        out.extend((0..n).map(|_| self.range(0, 150_000) as u32));
    }
}

/// The shared system prompts: 1 to 24 pages each.
pub(super) fn system_prompts(seed: u64) -> Vec<Vec<u32>> {
    let mut rng = Rng::new(seed ^ 0x5157_e111);
    (0..PROMPTS)
        .map(|_| {
            let mut prompt = Vec::new();
            let pages = rng.range(1, 25) as usize;
            rng.tokens(&mut prompt, pages * PAGE as usize);
            prompt
        })
        .collect()
}

/// One router thread: conversations that start from a popular system prompt and grow turn by
/// turn; each request is asked, its hits checked against the master, and handed to the workers.
pub(super) fn router(
    world: &World,
    id: usize,
    prompts: &[Vec<u32>],
    tx: &SyncSender<Vec<PageHash>>,
    seed: u64,
    interval: Duration,
) {
    let mut rng = Rng::new(seed);
    let mut conversations: Vec<Vec<u32>> = vec![Vec::new(); CONVERSATIONS];
    let mut next = Instant::now();
    while !world.stop.load(Ordering::Acquire) {
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
        next = next.max(now - interval * 10) + interval;
        let c = rng.range(0, CONVERSATIONS as u64) as usize;
        let conversation = &mut conversations[c];
        if conversation.is_empty() || conversation.len() > MAX_TOKENS || rng.unit() < 0.2 {
            // Popular prompts are asked far more often (a skewed pick).
            let p = (rng.unit().powi(2) * PROMPTS as f64) as usize;
            conversation.clear();
            conversation.extend_from_slice(&prompts[p.min(PROMPTS - 1)]);
        }
        let user = rng.range(16, 400) as usize;
        rng.tokens(conversation, user);

        {
            let began = world.nanos();
            world.asking[id].store(began, Ordering::SeqCst);
            // Where the index stood before the query: a removal it had applied by then is
            // never excused.
            let applied = world.applied();
            let asked = Instant::now();
            let answer = world.index.query(&Lookup::tokens(conversation));
            let took = asked.elapsed();
            let Ok(hits) = answer else {
                world.asking[id].store(u64::MAX, Ordering::SeqCst);
                continue;
            };
            world.latency.record(took);
            world.queries.fetch_add(1, Ordering::Relaxed);
            world
                .pages_asked
                .fetch_add(hits.total_pages as u64, Ordering::Relaxed);
            world
                .pages_hit
                .fetch_add(hits.prefix_pages as u64, Ordering::Relaxed);
            check_hits(world, conversation, hits.prefix_pages, began, applied);
            world.asking[id].store(u64::MAX, Ordering::SeqCst);
        }

        // The request is served: the worker writes its pages, the answer joins the conversation.
        let answer = rng.range(32, 600) as usize;
        rng.tokens(conversation, answer);
        let _ = tx.try_send(page_hashes(&world.layout, conversation));
    }
}

/// Counts every claimed page that the master does not fully hold: a false hit, unless its
/// removal was not yet applied by the index when the query `began` (the index stood at
/// `applied` then, and the removal was not seen applied before `began` either).
fn check_hits(world: &World, tokens: &[u32], prefix_pages: usize, began: u64, applied: Applied) {
    for page in world
        .layout
        .page_hashes(tokens, Namespace::NONE)
        .take(prefix_pages)
    {
        let Some(missing) = world
            .layout
            .object_keys(&page)
            .find(|k| !world.emulator.contains(k))
        else {
            continue;
        };
        let removal = world.removals().get(&page).copied();
        let raced = removal.is_some_and(|r| r.applied_ns > began && !applied.covers(r.at));
        if raced {
            world.in_flight_claims.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        world.false_hit(|| {
            // What a person needs to chase it: when, in which state, since when it is gone.
            let c = world.index.counters();
            let removed = match removal {
                Some(r) => format!(
                    "its removal (run {}, sequence {}) was applied by the index at {:.3} s; the index stood at run {}, sequence {:?} before the query",
                    r.at.run,
                    r.at.seq.0,
                    r.applied_ns as f64 / 1e9,
                    applied.run,
                    applied.seq.map(|s| s.0),
                ),
                None => "no removal of it is on record".to_owned(),
            };
            format!(
                "object {missing} claimed by a query at {:.3} s while the index was {} ({} of {} resyncs done); {removed}",
                began as f64 / 1e9,
                world.index.health().as_str(),
                c.resyncs_completed,
                c.resyncs_started,
            )
        });
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn the_workload_generator_is_splitmix64_from_its_seed() {
        // SplitMix64's published first outputs from state 0: the demo's workload for a seed
        // is the one it was before the generator came from rand_xoshiro.
        let mut rng = Rng::new(0);
        assert_eq!(rng.next(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(rng.next(), 0x6e78_9e6a_a1b9_65f4);
    }
}
