//! A trace's blocks as tokens and pages: block id `b` is the tokens `b * 512 .. b * 512 + 512`,
//! so requests that share leading ids share token prefixes exactly, and each block's eight
//! pages (page size 64) have one page hash wherever the block appears.
//!
//! The page hashes are SGLang's chain (SHA-256 of the previous page's digest and the page's
//! tokens as u32 little-endian), computed once per block: a block of a trace always follows
//! the same block (checked), so its pages' hashes are the same in every request.

use hicache_index::PageHash;
use sha2::{Digest, Sha256};

use crate::trace::{Request, Trace, BLOCK_TOKENS};

/// Tokens a page (SGLang's page size in the replay).
pub const PAGE_SIZE: usize = 64;

/// Pages of one block.
pub const PAGES_PER_BLOCK: usize = BLOCK_TOKENS / PAGE_SIZE;

/// A page's number: `block * PAGES_PER_BLOCK + page within the block`.
pub type PageId = u32;

/// The page hashes of every block seen so far (see the module docs).
#[derive(Debug)]
pub struct Blocks {
    /// The hashes of block `b`'s pages, once computed.
    hashes: Vec<Option<[PageHash; PAGES_PER_BLOCK]>>,
    /// The block before block `b` in the requests that name it (`u32::MAX`: none, it leads).
    before: Vec<u32>,
}

/// One request's tokens and full pages, filled by [`Blocks::request`] into reused buffers.
#[derive(Clone, Debug, Default)]
pub struct RequestPages {
    /// The tokens: `input_length` of them.
    pub tokens: Vec<u32>,
    /// The page hashes of the full pages (`input_length / PAGE_SIZE` of them).
    pub hashes: Vec<PageHash>,
    /// The page ids of the same pages.
    pub pages: Vec<PageId>,
}

/// Returns the token at position `at` (< [`BLOCK_TOKENS`]) of block `block`.
pub fn token(block: u32, at: usize) -> u32 {
    block * BLOCK_TOKENS as u32 + at as u32
}

impl Blocks {
    /// Makes the memo for the blocks of `trace`.
    pub fn new(trace: &Trace) -> Blocks {
        let bound = trace.block_id_bound();
        Blocks {
            hashes: vec![None; bound],
            before: vec![u32::MAX; bound],
        }
    }

    /// Returns the hash of page `page`, whose block was seen in an earlier [`Blocks::request`].
    ///
    /// # Panics
    /// If the block was never seen.
    pub fn page_hash(&self, page: PageId) -> PageHash {
        let block = page as usize / PAGES_PER_BLOCK;
        self.hashes[block].expect("a page of a block seen before")[page as usize % PAGES_PER_BLOCK]
    }

    /// Fills `out` with `request`'s tokens and full pages.
    ///
    /// # Panics
    /// If the request names a block after another block than before (the trace's ids would not
    /// stand for prefixes), or fewer blocks than its length needs.
    pub fn request(&mut self, request: &Request, out: &mut RequestPages) {
        let ids = &request.hash_ids;
        assert!(
            ids.len() * BLOCK_TOKENS >= request.input_length,
            "{} blocks for {} tokens",
            ids.len(),
            request.input_length
        );
        out.tokens.clear();
        out.hashes.clear();
        out.pages.clear();
        let full_pages = request.input_length / PAGE_SIZE;
        for (k, &id) in ids.iter().enumerate() {
            let before = if k == 0 { u32::MAX } else { ids[k - 1] };
            let hashes = self.block(id, before);
            let first = k * PAGES_PER_BLOCK;
            for (p, hash) in hashes.iter().enumerate() {
                if first + p < full_pages {
                    out.hashes.push(*hash);
                    out.pages
                        .push((id as usize * PAGES_PER_BLOCK + p) as PageId);
                }
            }
            let tokens = (request.input_length - k * BLOCK_TOKENS).min(BLOCK_TOKENS);
            out.tokens.extend((0..tokens).map(|at| token(id, at)));
        }
    }

    /// Returns block `id`'s page hashes, computing them if it is new (`before`: the block
    /// before it in this request).
    fn block(&mut self, id: u32, before: u32) -> [PageHash; PAGES_PER_BLOCK] {
        let i = id as usize;
        if let Some(hashes) = self.hashes[i] {
            assert_eq!(
                self.before[i], before,
                "block {id} follows another block than before"
            );
            return hashes;
        }
        let mut prior = (before != u32::MAX).then(|| {
            self.hashes[before as usize].expect("the block before was computed first")
                [PAGES_PER_BLOCK - 1]
        });
        let mut hashes = [PageHash([0; 32]); PAGES_PER_BLOCK];
        for (p, out) in hashes.iter_mut().enumerate() {
            let mut sha = Sha256::new();
            if let Some(prior) = prior {
                sha.update(prior.0);
            }
            for at in p * PAGE_SIZE..(p + 1) * PAGE_SIZE {
                sha.update(token(id, at).to_le_bytes());
            }
            *out = PageHash(sha.finalize().into());
            prior = Some(*out);
        }
        self.hashes[i] = Some(hashes);
        self.before[i] = before;
        hashes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hicache_index::{Layout, Namespace, SglangParams};

    #[test]
    fn page_hashes_are_sglangs_chain_over_the_tokens() {
        let trace = Trace::load(crate::trace::TraceName::Synthetic).slice(40);
        let layout = Layout::from_sglang(&SglangParams::new(PAGE_SIZE as u32, 8)).unwrap();
        let mut blocks = Blocks::new(&trace);
        let mut out = RequestPages::default();
        for request in &trace.requests {
            blocks.request(request, &mut out);
            assert_eq!(out.tokens.len(), request.input_length);
            let chain: Vec<PageHash> = layout.page_hashes(&out.tokens, Namespace::NONE).collect();
            assert_eq!(out.hashes, chain);
            assert_eq!(out.pages.len(), chain.len());
            for (page, hash) in out.pages.iter().zip(&out.hashes) {
                assert_eq!(blocks.page_hash(*page), *hash);
            }
        }
    }
}
