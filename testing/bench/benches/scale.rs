//! Row 10: how cost grows with what the index holds. In one run, three sessions holding 1M, 8M
//! and 32M pages at TP 8 (16 objects a page) are measured in turn, in ten slices each (so that
//! every size's figures come from the same minutes of a shared host):
//! - ingest, as row 2: decode + apply of 64-event Mooncake batches (20-field event maps) of
//!   pages never stored before (unlike row 2, whose pool of 4,096 pages is stored again and
//!   again, so that its probes stay in cache): the events per second of each round of 256
//!   batches (six a slice), their median;
//! - two 256-page queries given page hashes, all hits, through the session's reader (as a
//!   router asks): 256 pages stored one after another (a prefix stored together: the index
//!   gives pages their slots in the order it first sees them, so these sit side by side; only
//!   their buckets are scattered), from a random place, and 256 pages drawn at random among
//!   those held (probes that touch the whole table); p50, p99 and mean of 10,000 queries of
//!   each (1,000 a slice).
//!
//! The sessions are filled through `Session::handle` too, with the same batches: one batch of
//! four pages is encoded once, and its pages' hashes, written out in their 16 object keys and
//! group ids, are replaced in place by the next pages' (as event ids are renumbered), so
//! filling 32M pages costs the decode of 512M events and no encoding.
//!
//! Writes `<target>/perf/scale.json`; `cargo bench -- --test` runs 4K, 16K and 64K pages in
//! two slices, checked, without figures.
//!
//! ```text
//! cargo bench -p hicache-index-bench --bench scale
//! ```

use std::hint::black_box;

use hicache_index::{
    Config, Effects, IndexConfig, Instant, Lookup, ModelLayout, PageHash, Session,
};
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

/// Batches fed between two readings of the clock while ingest is measured (a round).
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
    /// Batch `b` (see [`page`]), encoded, with every place its pages' hashes are written.
    fn new(b: usize) -> Template {
        let layout = workload::tp8();
        let pages: Vec<PageHash> = (0..PAGES_PER_BATCH).map(|k| page(b, k)).collect();
        let mut payloads = workload::payloads(&layout, &pages, FIXED_WIDTH_EVENT_ID);
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

    /// Makes it batch `b` instead, numbered from `event_id`; returns the next id.
    fn rewrite(&mut self, b: usize, event_id: u64) -> u64 {
        let hexes: [[u8; 64]; PAGES_PER_BATCH] = std::array::from_fn(|k| hex(&page(b, k)));
        for &(at, k) in &self.hashes {
            self.payload[at..at + 64].copy_from_slice(&hexes[k]);
        }
        self.ids.renumber(&mut self.payload, event_id)
    }
}

/// A page hash as lower-case hex, as object keys write it.
fn hex(page: &PageHash) -> [u8; 64] {
    let mut out = [0u8; 64];
    page.write_hex(&mut out);
    out
}

/// Page `k` of batch `b`: batches are numbered from page 0, four pages each.
fn page(b: usize, k: usize) -> PageHash {
    workload::synthetic_page((b * PAGES_PER_BATCH + k) as u64)
}

/// A session holding some pages, the batches of fresh pages it is fed while measured, and
/// what it gave.
struct Fed {
    /// The session under measure.
    session: Session,
    /// The pages `0..held` it was filled with (the queries ask about them).
    held: usize,
    /// The sequence of the last batch fed.
    seq: u64,
    /// The event id the next batch starts from.
    event_id: u64,
    /// The batch number (see [`page`]) of the next fresh pages to store.
    next_batch: usize,
    /// One round's batches, written anew with fresh pages before each round.
    round: Vec<Template>,
    /// Draws the pages queries ask about.
    rng: Xoshiro256PlusPlus,
    /// Events per second of each round of ingest.
    ingest_rounds: Vec<f64>,
    /// Each query's time, ns, of pages stored one after another.
    in_order: Vec<u64>,
    /// Each query's time, ns, of pages drawn at random.
    at_random: Vec<u64>,
}

impl Fed {
    /// A session holding pages `0..held`, filled through its batches (`template` rewritten for
    /// each), with room for `fresh` more.
    fn filled(held: usize, fresh: usize, template: &mut Template) -> Fed {
        let session = Session::new(Config {
            layouts: vec![ModelLayout {
                model: None,
                layout: workload::tp8(),
            }],
            index: IndexConfig {
                max_pages: held + fresh,
                ..IndexConfig::default()
            },
            ..Config::default()
        })
        .expect("a valid configuration");
        let mut fed = Fed {
            session,
            held,
            seq: 0,
            event_id: FIXED_WIDTH_EVENT_ID,
            next_batch: held / PAGES_PER_BATCH,
            // Every batch has its hashes and ids at the same places: copies of one template.
            round: vec![template.clone(); ROUND],
            rng: Xoshiro256PlusPlus::seed_from_u64(held as u64),
            ingest_rounds: Vec::new(),
            in_order: Vec::new(),
            at_random: Vec::new(),
        };
        for b in 0..held / PAGES_PER_BATCH {
            fed.event_id = template.rewrite(b, fed.event_id);
            let payload = std::mem::take(&mut template.payload);
            let fx = fed.feed(&payload);
            assert!(fx.is_empty(), "{fx:?}");
            template.payload = payload;
        }
        fed.check();
        fed
    }

    /// Feeds one batch; returns what the session said.
    fn feed(&mut self, payload: &[u8]) -> Effects {
        self.seq += 1;
        self.session.feed(
            Instant::ZERO,
            black_box(&[b"", &self.seq.to_be_bytes(), payload]),
        )
    }

    /// Checks that every batch fed so far was applied whole, each of its events storing an
    /// object of a page the index keeps: nothing skipped, cleared, evicted, unread or left
    /// untracked.
    fn check(&self) {
        let c = self.session.counters();
        let stored_pages = self.next_batch * PAGES_PER_BATCH;
        assert_eq!(c.batches, self.seq, "every batch applied: {c:?}");
        assert_eq!(c.stored, 64 * self.seq, "every event stored: {c:?}");
        assert_eq!(c.pages, stored_pages as u64, "every page kept: {c:?}");
        assert_eq!(
            c.objects,
            16 * stored_pages as u64,
            "every object kept: {c:?}"
        );
        assert_eq!(
            (
                c.gaps,
                c.restarts,
                c.evictions,
                c.unparsed_keys,
                c.group_id_mismatches,
                c.untracked_objects
            ),
            (0, 0, 0, 0, 0, 0),
            "{c:?}"
        );
    }

    /// One slice: `rounds` rounds of [`ROUND`] batches of fresh pages, each timed, then
    /// `queries` hash queries of each form, alternately, each timed.
    fn slice(&mut self, rounds: usize, queries: usize) {
        for _ in 0..rounds {
            for t in &mut self.round {
                self.event_id = t.rewrite(self.next_batch, self.event_id);
                self.next_batch += 1;
            }
            let round = std::mem::take(&mut self.round);
            let mut reports = 0;
            // Wall time measures the bench; it never reaches the core.
            #[allow(clippy::disallowed_methods)]
            let start = std::time::Instant::now();
            for t in &round {
                reports += self.feed(&t.payload).len();
            }
            let took = start.elapsed().as_secs_f64();
            assert_eq!(reports, 0, "a batch gave a report");
            self.round = round;
            self.ingest_rounds.push((ROUND * 64) as f64 / took);
        }
        self.check();

        let reader = self.session.reader();
        let mut asked = vec![PageHash([0; 32]); QUERY_PAGES];
        for _ in 0..queries {
            for in_order in [true, false] {
                // Pages `from..from + 256`, or each drawn from all held.
                let from =
                    in_order.then(|| self.rng.next_u64() % (self.held - QUERY_PAGES + 1) as u64);
                for (k, page) in asked.iter_mut().enumerate() {
                    let i = match from {
                        Some(from) => from + k as u64,
                        None => self.rng.next_u64() % self.held as u64,
                    };
                    *page = workload::synthetic_page(i);
                }
                #[allow(clippy::disallowed_methods)]
                let start = std::time::Instant::now();
                let hits = reader.query(black_box(&Lookup::page_hashes(&asked)));
                let took = start.elapsed().as_nanos() as u64;
                let hits = hits.expect("a valid query");
                assert_eq!(hits.prefix_pages, QUERY_PAGES, "every page asked is held");
                if in_order {
                    self.in_order.push(took);
                } else {
                    self.at_random.push(took);
                }
            }
        }
    }

    /// Its figures, as JSON.
    fn json(&mut self) -> String {
        let n = self.ingest_rounds.len();
        let median = perf::median(&mut self.ingest_rounds).expect("rounds were measured");
        let query = |times: &mut Vec<u64>| {
            times.sort_unstable();
            let at = |p: f64| times[((times.len() - 1) as f64 * p) as usize];
            let mean = times.iter().sum::<u64>() as f64 / times.len() as f64;
            format!(
                "{{\"queries\":{},\"p50_ns\":{},\"p99_ns\":{},\"mean_ns\":{mean}}}",
                times.len(),
                at(0.5),
                at(0.99)
            )
        };
        let (in_order, at_random) = (query(&mut self.in_order), query(&mut self.at_random));
        format!(
            "{{\"pages\":{},\"ingest_events_per_second\":{median},\"ingest_rounds\":{n},\"round_batches\":{ROUND},\"query_pages\":{QUERY_PAGES},\"in_order\":{in_order},\"at_random\":{at_random}}}",
            self.held,
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
    // Per slice and size: rounds of ingest, then queries of each form.
    let (slices, rounds, queries) = if args.quick {
        (2, 2, 20)
    } else {
        (10, 6, 1_000)
    };
    let fresh = slices * rounds * ROUND * PAGES_PER_BATCH;
    let mut template = Template::new(0);
    let mut sessions: Vec<Fed> = sizes
        .iter()
        .map(|&held| {
            #[allow(clippy::disallowed_methods)]
            let started = std::time::Instant::now();
            let fed = Fed::filled(held, fresh, &mut template);
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
    for (r, fed) in results.iter().zip(&sessions) {
        println!("scale: {r}");
        assert!(
            fed.ingest_rounds.iter().all(|r| r.is_finite() && *r > 0.0),
            "every round measured"
        );
    }
    if !args.quick {
        perf::write_result("scale.json", &format!("[{}]\n", results.join(",")));
    }
}
