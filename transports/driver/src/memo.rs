//! The prefix memo: page digests already computed, shared by every query thread.
//!
//! Routers see the same prefixes again and again (system prompts, few-shot headers, turns of
//! one conversation). A page of a repeated prefix has the same prior digest and the same tokens,
//! so its digest is already known: [`PrefixMemo`] answers it without SHA-256 (see
//! [`hicache_index::DigestMemo`]).
//!
//! - **Exact.** An entry is found only by a key equal in full to the one it was stored under
//!   (prior digest, mode, every token compared), never by the memo's own 64-bit key hash alone:
//!   two keys whose key hashes collide are kept apart. So the memo never returns a digest
//!   SHA-256 would not produce for that page.
//! - **Bounded in bytes.** Each of its shards forgets its oldest entries (first in, first out)
//!   once it holds more than its share of the budget; an entry is charged its tokens, its
//!   digests and a fixed overhead.
//! - **No global lock.** Keys are spread over shards, each behind its own mutex held only to
//!   look up or insert one entry: query threads meet only when they touch the same shard at the
//!   same instant.

use std::collections::VecDeque;
use std::sync::Mutex;

use hicache_index::{DigestMemo, PageHash, Token};

/// The default budget: 64 MiB.
pub const DEFAULT_MEMO_BYTES: usize = 64 << 20;

/// Shards of a memo (a power of two): enough that query threads rarely meet on one.
const SHARDS: usize = 64;

/// What an entry costs beyond its tokens, charged high enough that the memo's real heap stays
/// within its budget: the entry in the table twice over (a hash table grows by doubling, so up
/// to half its slots are spare) with its control byte, its slot in the insertion queue twice
/// over likewise, and the allocator's header of the token box.
const ENTRY_OVERHEAD: usize =
    2 * (std::mem::size_of::<Entry>() + 1) + 2 * std::mem::size_of::<(u64, u64)>() + 16;

/// A page's raw tokens as stored: narrow when every one fits in a u32 (the usual case).
#[derive(Debug)]
enum Stored {
    Narrow(Box<[u32]>),
    Wide(Box<[u64]>),
}

impl Stored {
    fn of<T: Token>(tokens: &[T]) -> Stored {
        if narrow(tokens) {
            Stored::Narrow(tokens.iter().map(|t| t.to_u64() as u32).collect())
        } else {
            Stored::Wide(tokens.iter().map(|t| t.to_u64()).collect())
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Stored::Narrow(t) => t.len() * 4,
            Stored::Wide(t) => t.len() * 8,
        }
    }

    /// Whether the stored tokens are `tokens`, every one compared (without an early exit, so the
    /// comparison runs as vector code: a page is 64 tokens or more).
    fn equals<T: Token>(&self, tokens: &[T]) -> bool {
        match self {
            Stored::Narrow(s) => {
                // In 32-bit lanes (a token's high half compared with 0 apart): for `u32`
                // tokens, the high halves fold away and the loop is XORs of four tokens a
                // vector instruction, not the widening of each token to 64 bits first.
                s.len() == tokens.len()
                    && s.iter().zip(tokens).fold(0u32, |diff, (a, b)| {
                        let b = b.to_u64();
                        diff | (a ^ b as u32) | (b >> 32) as u32
                    }) == 0
            }
            Stored::Wide(s) => {
                s.len() == tokens.len()
                    && s.iter()
                        .zip(tokens)
                        .fold(0, |diff, (a, b)| diff | (*a ^ b.to_u64()))
                        == 0
            }
        }
    }
}

#[derive(Debug)]
struct Entry {
    key_hash: u64,
    /// Its place in the shard's insertion order (tells apart entries whose key hashes collide).
    serial: u64,
    prior: Option<[u8; 32]>,
    eagle: bool,
    tokens: Stored,
    digest: PageHash,
}

impl Entry {
    fn matches<T: Token>(&self, prior: Option<&[u8; 32]>, eagle: bool, tokens: &[T]) -> bool {
        self.eagle == eagle && self.prior.as_ref() == prior && self.tokens.equals(tokens)
    }

    fn same_key(&self, other: &Entry) -> bool {
        match &other.tokens {
            Stored::Narrow(t) => self.matches(other.prior.as_ref(), other.eagle, t),
            Stored::Wide(t) => self.matches(other.prior.as_ref(), other.eagle, t),
        }
    }

    fn cost(&self) -> usize {
        ENTRY_OVERHEAD + self.tokens.bytes()
    }
}

/// One shard: entries found by their full key (the key hash only picks the bucket), and their
/// insertion order for forgetting the oldest.
#[derive(Debug, Default)]
struct Shard {
    table: hashbrown::HashTable<Entry>,
    /// (key hash, serial) of every entry, oldest first.
    order: VecDeque<(u64, u64)>,
    next_serial: u64,
    bytes: usize,
    /// Lookups this shard answered, and those it could not.
    hits: u64,
    misses: u64,
}

impl Shard {
    fn get<T: Token>(
        &self,
        key_hash: u64,
        prior: Option<&[u8; 32]>,
        eagle: bool,
        tokens: &[T],
    ) -> Option<PageHash> {
        self.table
            .find(key_hash, |e| e.matches(prior, eagle, tokens))
            .map(|e| e.digest)
    }

    fn put(&mut self, mut entry: Entry, budget: usize) {
        let cost = entry.cost();
        if cost > budget {
            return;
        }
        if self
            .table
            .find(entry.key_hash, |e| e.same_key(&entry))
            .is_some()
        {
            return;
        }
        while self.bytes + cost > budget {
            let Some((hash, serial)) = self.order.pop_front() else {
                break;
            };
            if let Ok(gone) = self.table.find_entry(hash, |e| e.serial == serial) {
                let (gone, _) = gone.remove();
                self.bytes -= gone.cost();
            }
        }
        entry.serial = self.next_serial;
        self.next_serial += 1;
        self.order.push_back((entry.key_hash, entry.serial));
        self.bytes += cost;
        self.table
            .insert_unique(entry.key_hash, entry, |e| e.key_hash);
    }
}

/// How often the memo answered, and what it holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoStats {
    /// Pages whose digest the memo knew.
    pub hits: u64,
    /// Pages it did not know (hashed, then offered to it).
    pub misses: u64,
    /// Bytes charged for what it holds now.
    pub bytes: usize,
    /// Entries it holds now.
    pub entries: usize,
}

/// A bounded, exact, sharded memo of page digests, shared by query threads (see the module
/// docs).
#[derive(Debug)]
pub struct PrefixMemo {
    shards: Box<[Mutex<Shard>]>,
    /// Each shard's share of the budget.
    shard_budget: usize,
    /// Applied to every key hash (the identity but in tests that force collisions).
    key_hash: fn(u64) -> u64,
}

impl PrefixMemo {
    /// Makes a memo that holds at most about `bytes` bytes; 0 makes one that remembers nothing.
    pub fn new(bytes: usize) -> PrefixMemo {
        PrefixMemo::with_key_hash(bytes, |h| h)
    }

    /// Makes a memo like [`PrefixMemo::new`] whose key hashes all go through `f`: a constant
    /// `f` makes every key collide (tests check that the memo stays exact then).
    pub fn with_key_hash(bytes: usize, f: fn(u64) -> u64) -> PrefixMemo {
        PrefixMemo {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            shard_budget: bytes / SHARDS,
            key_hash: f,
        }
    }

    /// Returns how often it answered and what it holds.
    pub fn stats(&self) -> MemoStats {
        let mut stats = MemoStats::default();
        for shard in self.shards.iter() {
            if let Ok(s) = shard.lock() {
                stats.hits += s.hits;
                stats.misses += s.misses;
                stats.bytes += s.bytes;
                stats.entries += s.table.len();
            }
        }
        stats
    }

    fn hash_key<T: Token>(&self, prior: Option<&[u8; 32]>, eagle: bool, tokens: &[T]) -> u64 {
        (self.key_hash)(key_hash(prior, eagle, tokens))
    }

    fn shard(&self, key_hash: u64) -> &Mutex<Shard> {
        &self.shards[shard_of(key_hash)]
    }
}

/// The shard of a key hash: bits 32 and up, which neither the bucket (the low bits) nor the tag
/// (the top 7 bits) of the shard's `hashbrown` table reads. Picked by the top bits, every entry
/// of a shard had 6 of its 7 tag bits alike, so about half the entries a probe passed matched
/// the tag and had their keys compared in full.
fn shard_of(key_hash: u64) -> usize {
    (key_hash >> 32) as usize % SHARDS
}

/// Whether every token fits in 32 bits (held and hashed narrow).
fn narrow<T: Token>(tokens: &[T]) -> bool {
    // An OR over all of them, with no early exit: vector code.
    tokens.iter().fold(0, |all, t| all | t.to_u64()) >> 32 == 0
}

/// The seed of every key hash.
const SEED: u64 = 0x05ee_d1e5;

/// Odd 64-bit constants (digits of pi), one per lane of [`key_hash`].
const LANE: [u64; 4] = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7345,
    0xa409_3822_299f_31d1,
    0x082e_fa98_ec4e_6c89,
];

/// Odd constants (from the digits of e) whose two 32-bit halves each have their top bit set,
/// one per lane of [`key_hash`]'s two-word step: a word of two tokens below 2^31 XORed with one
/// is never 0, which would drop the other word of the step.
const PAIR: [u64; 4] = [
    0xb7e1_5162_8aed_2a6b,
    0xbf71_5880_9cf4_f3c7,
    0xe2e7_160f_b8b4_da57,
    0xa784_d904_d190_cfef,
];

/// The high and low halves of `a * b` folded together by XOR.
#[inline]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    (full as u64) ^ ((full >> 64) as u64)
}

/// Hashes a memo key (the prior, the mode and the tokens' values) to pick its shard and bucket.
///
/// Our own hash, not a `Hasher` of a kept library, because a lookup is on every token query's
/// path: fed to `foldhash` (the page's tokens gathered into a byte buffer first, as it takes
/// bytes), the key hash was 59 % of a lookup that hit (perf of the memo bench's
/// `memo_hashes_only`, 217 ns a page of 64 tokens). Here the words go straight into four
/// independent lanes of folded multiplies (foldhash's own step; tokens that fit in 32 bits
/// two words, four tokens, a multiply: wyhash's step), with no buffer. Its quality only
/// spreads keys: the memo compares keys in full, so keys that collide stay apart. Its seed is
/// fixed, so tokens chosen to collide (a client's) can lengthen a shard's probes, never make
/// an answer wrong. The hash is of the tokens' values, the same whichever [`Token`] type holds
/// them: tokens that all fit in 32 bits are hashed two to a word, others one to a word.
fn key_hash<T: Token>(prior: Option<&[u8; 32]>, eagle: bool, tokens: &[T]) -> u64 {
    let mut lanes = LANE.map(|k| k ^ SEED);
    if let Some(prior) = prior {
        // A digest is uniform already: its words start the lanes, with no multiply of their
        // own (one step less in each lane's chain of multiplies, which bounds the hash).
        for (lane, word) in lanes.iter_mut().zip(prior.chunks_exact(8)) {
            let mut bytes = [0; 8];
            bytes.copy_from_slice(word);
            *lane ^= u64::from_le_bytes(bytes);
        }
    }
    let narrow = narrow(tokens);
    if narrow {
        let pair = |two: &[T]| two[0].to_u64() | two[1].to_u64() << 32;
        let mut sixteens = tokens.chunks_exact(16);
        for sixteen in &mut sixteens {
            for (i, four) in sixteen.chunks_exact(4).enumerate() {
                // Two words a multiply (wyhash's step), half the multiplies of one a word: the
                // key hash was a quarter of a lookup that hit (perf of `memo_hashes_only`).
                lanes[i] = folded_multiply(lanes[i] ^ pair(&four[..2]), pair(&four[2..]) ^ PAIR[i]);
            }
        }
        let mut pairs = sixteens.remainder().chunks_exact(2);
        for (i, two) in (&mut pairs).enumerate() {
            absorb(&mut lanes, i % 4, pair(two));
        }
        for t in pairs.remainder() {
            absorb(&mut lanes, 3, t.to_u64());
        }
    } else {
        let mut fours = tokens.chunks_exact(4);
        for four in &mut fours {
            for (i, t) in four.iter().enumerate() {
                absorb(&mut lanes, i, t.to_u64());
            }
        }
        for (i, t) in fours.remainder().iter().enumerate() {
            absorb(&mut lanes, i, t.to_u64());
        }
    }
    let shape = (tokens.len() as u64) << 3
        | u64::from(prior.is_some()) << 2
        | u64::from(eagle) << 1
        | u64::from(narrow);
    let left = folded_multiply(lanes[0] ^ lanes[2], LANE[1]);
    let right = folded_multiply(lanes[1] ^ lanes[3], LANE[2]);
    folded_multiply(left ^ right ^ shape, LANE[3] ^ SEED)
}

/// One word into lane `i` of [`key_hash`].
#[inline(always)]
fn absorb(lanes: &mut [u64; 4], i: usize, word: u64) {
    lanes[i] = folded_multiply(lanes[i] ^ word, LANE[i]);
}

impl DigestMemo for PrefixMemo {
    fn get<T: Token>(
        &self,
        prior: Option<&[u8; 32]>,
        eagle: bool,
        tokens: &[T],
    ) -> Option<PageHash> {
        if self.shard_budget == 0 {
            return None;
        }
        let key_hash = self.hash_key(prior, eagle, tokens);
        // Counted under the shard's lock, taken anyway: no counter shared by all query threads.
        let mut shard = self.shard(key_hash).lock().ok()?;
        let found = shard.get(key_hash, prior, eagle, tokens);
        match found {
            Some(_) => shard.hits += 1,
            None => shard.misses += 1,
        }
        found
    }

    fn put<T: Token>(&self, prior: Option<&[u8; 32]>, eagle: bool, tokens: &[T], digest: PageHash) {
        if self.shard_budget == 0 {
            return;
        }
        let key_hash = self.hash_key(prior, eagle, tokens);
        let entry = Entry {
            key_hash,
            serial: 0,
            prior: prior.copied(),
            eagle,
            tokens: Stored::of(tokens),
            digest,
        };
        if let Ok(mut shard) = self.shard(key_hash).lock() {
            shard.put(entry, self.shard_budget);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hicache_index::{Namespace, NoMemo, PageHashes};
    use quickcheck_macros::quickcheck;

    /// Hashes `tokens` through `memo` page by page.
    fn through<M: DigestMemo>(
        memo: &M,
        tokens: &[u64],
        page: u32,
        eagle: bool,
        salt: Option<&str>,
    ) -> Vec<PageHash> {
        let ns = Namespace {
            extra_key: None,
            cache_salt: salt,
        };
        let mut pages = PageHashes::new(tokens, page, eagle, ns);
        std::iter::from_fn(|| pages.next_with(memo)).collect()
    }

    fn plain(tokens: &[u64], page: u32, eagle: bool, salt: Option<&str>) -> Vec<PageHash> {
        through(&NoMemo, tokens, page, eagle, salt)
    }

    /// Small token values from a quickcheck input, so that prompts share prefixes often; every
    /// seventh prompt gets a token above u32::MAX (the wide form).
    fn prompts(raw: &[Vec<u8>]) -> Vec<Vec<u64>> {
        raw.iter()
            .enumerate()
            .map(|(i, p)| {
                let mut t: Vec<u64> = p.iter().map(|&b| u64::from(b % 4)).collect();
                if i % 7 == 6 {
                    if let Some(x) = t.last_mut() {
                        *x = u64::from(u32::MAX) + 1;
                    }
                }
                t
            })
            .collect()
    }

    fn memo_matches_the_chain(raw: Vec<Vec<u8>>, memo: &PrefixMemo) -> bool {
        let mut all = true;
        for (i, tokens) in prompts(&raw).iter().enumerate() {
            let eagle = i % 3 == 0;
            let salt = (i % 5 == 0).then_some("tenant");
            // Twice: the second time every page comes from the memo (or a forgotten one is
            // hashed again).
            for _ in 0..2 {
                all &= through(memo, tokens, 2, eagle, salt) == plain(tokens, 2, eagle, salt);
            }
        }
        all
    }

    #[quickcheck]
    fn memo_gives_the_chains_digests(raw: Vec<Vec<u8>>) -> bool {
        memo_matches_the_chain(raw, &PrefixMemo::new(1 << 20))
    }

    #[quickcheck]
    fn memo_stays_exact_when_every_key_hash_collides(raw: Vec<Vec<u8>>) -> bool {
        memo_matches_the_chain(raw, &PrefixMemo::with_key_hash(1 << 20, |_| 7))
    }

    #[quickcheck]
    fn memo_stays_exact_when_it_forgets(raw: Vec<Vec<u8>>) -> bool {
        // A budget of a few entries a shard: most pages are forgotten and hashed again.
        memo_matches_the_chain(raw, &PrefixMemo::with_key_hash(SHARDS * 400, |_| 0))
    }

    #[test]
    fn a_repeated_prefix_is_answered_from_the_memo() {
        let memo = PrefixMemo::new(DEFAULT_MEMO_BYTES);
        let tokens: Vec<u64> = (0..64 * 8).collect();
        let first = through(&memo, &tokens, 64, false, None);
        assert_eq!(memo.stats().hits, 0);
        assert_eq!(memo.stats().entries, 8);
        let again = through(&memo, &tokens, 64, false, None);
        assert_eq!(first, again);
        assert_eq!(memo.stats().hits, 8);
    }

    #[test]
    fn the_memo_holds_no_more_than_its_budget() {
        let budget = SHARDS * 4 * (ENTRY_OVERHEAD + 64 * 4);
        let memo = PrefixMemo::new(budget);
        for start in 0..2_000u64 {
            let tokens: Vec<u64> = (start * 64..start * 64 + 64).collect();
            let _ = through(&memo, &tokens, 64, false, None);
        }
        let stats = memo.stats();
        assert!(stats.bytes <= budget, "{stats:?}");
        assert!(stats.entries > 0, "{stats:?}");
    }

    #[test]
    fn a_page_put_as_wide_tokens_is_found_by_the_same_values_held_narrow() {
        let memo = PrefixMemo::new(DEFAULT_MEMO_BYTES);
        let wide: Vec<u64> = (0..64 * 3).collect();
        let narrow: Vec<u32> = (0..64 * 3).collect();
        let first = through(&memo, &wide, 64, false, None);
        let ns = Namespace::NONE;
        let mut pages = PageHashes::new(&narrow[..], 64, false, ns);
        let again: Vec<PageHash> = std::iter::from_fn(|| pages.next_with(&memo)).collect();
        assert_eq!(first, again);
        assert_eq!(memo.stats().hits, 3, "{:?}", memo.stats());
    }

    #[test]
    fn a_narrow_page_is_not_found_by_tokens_equal_to_it_only_in_their_low_32_bits() {
        // Every key hash collides, so only the comparison of the tokens tells the pages apart.
        let memo = PrefixMemo::with_key_hash(DEFAULT_MEMO_BYTES, |_| 0);
        let narrow: Vec<u64> = (0..64).collect();
        let mut wide = narrow.clone();
        wide[10] += 1 << 32;
        let first = through(&memo, &narrow, 64, false, None);
        let second = through(&memo, &wide, 64, false, None);
        assert_eq!(second, plain(&wide, 64, false, None));
        assert_ne!(first, second);
        assert_eq!(memo.stats().hits, 0, "{:?}", memo.stats());
    }

    #[test]
    fn key_hashes_of_distinct_pages_spread_over_every_shard_and_tag() {
        let memo = PrefixMemo::new(DEFAULT_MEMO_BYTES);
        let mut hashes = std::collections::HashSet::new();
        let mut shards = [0usize; SHARDS];
        // The top 7 bits (hashbrown's tag) of the keys of one shard.
        let mut tags = [0usize; 128];
        let prior = [7u8; 32];
        for page in 0..20_000u64 {
            // Pages that differ in one token, in the prior only, or in the mode; of 64 tokens
            // and of 63 and 65 (a remainder), every ninth with a token above u32::MAX.
            let len = [64, 63, 65][(page % 3) as usize];
            let mut tokens: Vec<u64> = (0..len).collect();
            tokens[(page % 63) as usize] = 1_000 + page;
            if page % 9 == 0 {
                tokens[len as usize - 1] = u64::from(u32::MAX) + page;
            }
            let prior = (page % 4 == 0).then_some(&prior);
            let h = memo.hash_key(prior, page % 5 == 0, &tokens);
            hashes.insert(h);
            shards[shard_of(h)] += 1;
            if shard_of(h) == 0 {
                tags[(h >> 57) as usize] += 1;
            }
        }
        assert!(hashes.len() > 19_990, "{} distinct", hashes.len());
        let (least, most) = (shards.iter().min(), shards.iter().max());
        assert!(least > Some(&200) && most < Some(&450), "{shards:?}");
        // About 312 keys in shard 0 over 128 tags: most tags are taken.
        let taken = tags.iter().filter(|&&n| n > 0).count();
        assert!(taken > 80, "{taken} of 128 tags taken in shard 0");
    }

    #[test]
    fn a_memo_of_zero_bytes_remembers_nothing() {
        let memo = PrefixMemo::new(0);
        let tokens: Vec<u64> = (0..128).collect();
        let _ = through(&memo, &tokens, 64, false, None);
        let _ = through(&memo, &tokens, 64, false, None);
        assert_eq!(memo.stats(), MemoStats::default());
    }
}
