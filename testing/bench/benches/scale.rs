//! Row 10: how cost grows with what the index holds. In one run, three sessions holding 1M, 8M
//! and 32M pages at TP 8 (16 objects a page) are measured in turn, in ten slices each (so that
//! every size's figures come from the same minutes of a shared host):
//! - ingest, as row 2: decode + apply of 64-event Mooncake batches (20-field event maps) of
//!   4,096 fresh pages, cycled, each batch renumbered outside the timed part; the events per
//!   second of each round of 256 batches (six a slice), their median;
//! - a 256-page query given page hashes, all hits, through the session's reader (as a router
//!   asks): each query 256 pages drawn at random among those held, so its probes touch the
//!   whole table as the index grows (a real prefix's pages sit at random places too: the table
//!   is hashed); p50, p99 and mean of 20,000 queries (2,000 a slice).
//!
//! The sessions are filled through `Session::handle` too, with the same batches: one batch of
//! four pages is encoded once, and its pages' hashes, written out in their 16 object keys and
//! group ids, are replaced in place by the next pages' (as event ids are renumbered), so
//! filling 32M pages costs the decode of 512M events and no encoding.
//!
//! Writes `<target>/perf/scale.json`; `cargo bench -- --test` runs 4K, 16K and 64K pages
//! once, checked, without figures.
//!
//! ```text
//! cargo bench -p hicache-index-bench --bench scale
//! ```

use std::hint::black_box;

use hicache_index::{Config, IndexConfig, Instant, Lookup, ModelLayout, PageHash, Session};
use hicache_index_bench::perf::{self, BenchArgs};
use hicache_index_bench::workload;
use hicache_index_shortcuts::{Shortcuts, Untimed};
use hicache_index_wire::{EventIdSlots, FIXED_WIDTH_EVENT_ID};
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Pages a query asks about.
const QUERY_PAGES: usize = 256;

/// Pages a batch stores at TP 8 (64 events of 16 objects a page).
const PAGES_PER_BATCH: usize = 4;

/// Batches in the pool: 4,096 pages.
const POOL_BATCHES: usize = 1024;

/// Batches fed between two readings of the clock while ingest is measured.
const ROUND: usize = 256;

/// One batch that can be made to store any four pages: its bytes, where its event ids are, and
/// where each of its pages' hashes is written out (hex, in object keys and group ids).
#[derive(Clone)]
struct Template {
    payload: Vec<u8>,
    ids: EventIdSlots,
    /// (offset, which of the batch's pages) of every hex hash in `payload`.
    hashes: Vec<(usize, usize)>,
}

impl Template {
    /// The batch of `pages` (four), encoded, with every place its pages' hashes are written.
    fn new(pages: &[PageHash]) -> Template {
        let layout = workload::tp8();
        let mut payloads = workload::payloads(&layout, pages, FIXED_WIDTH_EVENT_ID);
        assert_eq!(
            payloads.len(),
            1,
            "four pages at TP 8 are one 64-event batch"
        );
        let payload = payloads.remove(0);
        let ids = EventIdSlots::find(&payload);
        assert_eq!(ids.len(), 64);
        let mut hashes = Vec::new();
        for (k, page) in pages.iter().enumerate() {
            let hex = hex(page);
            let found: Vec<usize> = payload
                .windows(hex.len())
                .enumerate()
                .filter(|(_, w)| *w == hex)
                .map(|(at, _)| at)
                .collect();
            // Each of a page's 16 objects names it in its key and in its group id.
            assert_eq!(found.len(), 32, "page {k}'s hash written 32 times");
            hashes.extend(found.into_iter().map(|at| (at, k)));
        }
        Template {
            payload,
            ids,
            hashes,
        }
    }

    /// Makes the batch store `pages` instead, numbered from `event_id`; returns the next id.
    fn rewrite(&mut self, pages: &[PageHash], event_id: u64) -> u64 {
        let hexes: Vec<[u8; 64]> = pages.iter().map(hex).collect();
        for &(at, k) in &self.hashes {
            self.payload[at..at + 64].copy_from_slice(&hexes[k]);
        }
        self.ids.renumber(&mut self.payload, event_id)
    }
}

/// A page hash as lower-case hex, as object keys write it.
fn hex(page: &PageHash) -> [u8; 64] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 64];
    for (i, b) in page.0.iter().enumerate() {
        out[2 * i] = DIGITS[usize::from(b >> 4)];
        out[2 * i + 1] = DIGITS[usize::from(b & 0xf)];
    }
    out
}

/// The pages of batch `b` of a run of batches numbered from page 0.
fn batch_pages(b: usize) -> Vec<PageHash> {
    (b * PAGES_PER_BATCH..(b + 1) * PAGES_PER_BATCH)
        .map(|i| workload::synthetic_page(i as u64))
        .collect()
}

/// A session holding some pages, the batches of fresh pages it is fed while measured, and
/// what it gave.
struct Fed {
    session: Session,
    /// The pages `0..held` it was filled with (the queries ask about them).
    held: usize,
    seq: u64,
    event_id: u64,
    /// The batches of the 4,096 pages after those, cycled.
    pool: Vec<Template>,
    next: usize,
    rng: Xoshiro256PlusPlus,
    /// Events per second of each round of ingest.
    ingest_rounds: Vec<f64>,
    /// Each query's time, ns.
    queries: Vec<u64>,
}

impl Fed {
    /// A session holding pages `0..held`, filled through its batches (`template` rewritten for
    /// each).
    fn filled(held: usize, template: &mut Template) -> Fed {
        let session = Session::new(Config {
            layouts: vec![ModelLayout {
                model: None,
                layout: workload::tp8(),
            }],
            index: IndexConfig {
                max_pages: held + POOL_BATCHES * PAGES_PER_BATCH,
                ..IndexConfig::default()
            },
            ..Config::default()
        })
        .expect("a valid configuration");
        let first_batch = held / PAGES_PER_BATCH;
        // Every batch has its hashes and ids at the same places: copies of one template.
        let pool = (0..POOL_BATCHES)
            .map(|b| {
                let mut t = template.clone();
                t.rewrite(&batch_pages(first_batch + b), 0);
                t
            })
            .collect();
        let mut fed = Fed {
            session,
            held,
            seq: 0,
            event_id: FIXED_WIDTH_EVENT_ID,
            pool,
            next: 0,
            rng: Xoshiro256PlusPlus::seed_from_u64(held as u64),
            ingest_rounds: Vec::new(),
            queries: Vec::new(),
        };
        for b in 0..first_batch {
            fed.event_id = template.rewrite(&batch_pages(b), fed.event_id);
            let payload = std::mem::take(&mut template.payload);
            fed.feed(&payload);
            template.payload = payload;
        }
        let c = fed.session.counters();
        assert_eq!(c.pages, held as u64, "{c:?}");
        fed
    }

    /// Feeds one batch (checked in debug builds to give no report; the counters are checked
    /// after each slice).
    fn feed(&mut self, payload: &[u8]) {
        self.seq += 1;
        let fx = self.session.feed(
            Instant::ZERO,
            black_box(&[b"", &self.seq.to_be_bytes(), payload]),
        );
        debug_assert!(fx.is_empty(), "{fx:?}");
        drop(black_box(fx));
    }

    /// One slice: `rounds` rounds of [`ROUND`] batches of the pool, each timed, then `queries`
    /// hash queries of held pages, each timed.
    fn slice(&mut self, rounds: usize, queries: usize) {
        for _ in 0..rounds {
            for k in 0..ROUND {
                let t = &mut self.pool[(self.next + k) % POOL_BATCHES];
                self.event_id = t.ids.renumber(&mut t.payload, self.event_id);
            }
            let pool = std::mem::take(&mut self.pool);
            // Wall time measures the bench; it never reaches the core.
            #[allow(clippy::disallowed_methods)]
            let start = std::time::Instant::now();
            for k in 0..ROUND {
                self.feed(&pool[(self.next + k) % POOL_BATCHES].payload);
            }
            let took = start.elapsed().as_secs_f64();
            self.pool = pool;
            self.ingest_rounds.push((ROUND * 64) as f64 / took);
            self.next = (self.next + ROUND) % POOL_BATCHES;
        }
        let c = self.session.counters();
        assert_eq!((c.gaps, c.restarts, c.evictions), (0, 0, 0), "{c:?}");

        let reader = self.session.reader();
        let mut asked = vec![PageHash([0; 32]); QUERY_PAGES];
        for _ in 0..queries {
            for page in &mut asked {
                *page = workload::synthetic_page(self.rng.next_u64() % self.held as u64);
            }
            #[allow(clippy::disallowed_methods)]
            let start = std::time::Instant::now();
            let hits = reader.query(black_box(&Lookup::page_hashes(&asked)));
            self.queries.push(start.elapsed().as_nanos() as u64);
            let hits = hits.expect("a valid query");
            assert_eq!(hits.prefix_pages, QUERY_PAGES, "every page asked is held");
        }
    }

    /// Its figures, as JSON.
    fn json(&mut self) -> String {
        self.ingest_rounds.sort_by(f64::total_cmp);
        self.queries.sort_unstable();
        let q = &self.queries;
        let at = |p: f64| q[((q.len() - 1) as f64 * p) as usize];
        let mean = q.iter().sum::<u64>() as f64 / q.len() as f64;
        let median = self.ingest_rounds[self.ingest_rounds.len() / 2];
        format!(
            "{{\"pages\":{},\"ingest_events_per_second\":{median},\"ingest_rounds\":{},\"query_pages\":{QUERY_PAGES},\"queries\":{},\"query_p50_ns\":{},\"query_p99_ns\":{},\"query_mean_ns\":{mean}}}",
            self.held,
            self.ingest_rounds.len(),
            q.len(),
            at(0.5),
            at(0.99),
        )
    }
}

fn main() {
    let args = BenchArgs::from_env();
    if !args.is_selected("scale") {
        return;
    }
    let sizes: [usize; 3] = if args.quick {
        [1 << 12, 1 << 14, 1 << 16]
    } else {
        [1 << 20, 1 << 23, 1 << 25]
    };
    // Per slice and size: rounds of ingest, then queries.
    let (slices, rounds, queries) = if args.quick {
        (2, 1, 50)
    } else {
        (10, 6, 2_000)
    };
    let mut template = Template::new(&batch_pages(0));
    let mut sessions: Vec<Fed> = sizes
        .iter()
        .map(|&held| {
            #[allow(clippy::disallowed_methods)]
            let started = std::time::Instant::now();
            let fed = Fed::filled(held, &mut template);
            println!(
                "scale: {held} pages filled in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            fed
        })
        .collect();
    // The sizes in turn, slice by slice, so that each size's figures come from the same
    // minutes of this shared host as the others'.
    for _ in 0..slices {
        for fed in &mut sessions {
            fed.slice(rounds, queries);
        }
    }
    let results: Vec<String> = sessions.iter_mut().map(Fed::json).collect();
    for r in &results {
        println!("scale: {r}");
    }
    if !args.quick {
        perf::write_result("scale.json", &format!("[{}]", results.join(",")));
    }
}
