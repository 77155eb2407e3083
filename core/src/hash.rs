//! SGLang HiCache page hashes: a SHA-256 chain over full pages of tokens.
//!
//! Exactly as SGLang 0.5.23 computes them (`mem_cache/utils.py` over
//! `cpp_utils/hash_binding.cpp`):
//!
//! ```text
//! n_pages  = floor(units / page_size)        units = tokens, or tokens - 1 bigrams (EAGLE)
//! page i   = SHA-256( prior ‖ body_i )
//! prior    = digest of page i-1 (32 bytes); for page 0 the namespace seed, or nothing
//! body_i   = every token of the page as u32 LE                        (plain)
//!          | every bigram (a, b) of the page as LE(a) ‖ LE(b), u32s  (EAGLE)
//!          | 0xff ‖ the same values as u64 LE                         (wide: see below)
//! seed     = SHA-256( "sglang-cache-namespace-v1" ‖ field(extra_key) ‖ field(cache_salt) )
//! field    = 0x00 for None | 0x01 ‖ u64_le(len) ‖ utf8 bytes
//! ```
//!
//! **Wide pages.** When a token of a page does not fit in a u32, the page is hashed in the wide
//! form: `0xff` (an odd byte count keeps it apart from every u32 page) then every value as u64 LE.
//! A page's tokens are, for EAGLE, the `page_size + 1` raw tokens its bigrams are made of: page
//! `i` covers `t[i*P ..= i*P + P]`, so a large token at `t[(i+1)*P]` makes both page `i` and page
//! `i + 1` wide. This is SGLang's `has_wide_tokens` window. SGLang refuses tokens above
//! `i64::MAX` (it raises and stores nothing); they are hashed here in the wide form all the same,
//! which can only produce a page no store holds (a miss).
//!
//! Hashing is lazy ([`PageHashes`] is an iterator), so a query that stops at its first missing
//! page never pays for the rest.

use core::fmt;
use core::iter::FusedIterator;
use core::str::FromStr;

use sha2::{Digest, Sha256};

/// The SHA-256 digest that names one logical page of tokens.
///
/// Kept as 32 raw bytes on every hot path; hex (64 lowercase characters) only for display and
/// parsing.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PageHash(pub [u8; 32]);

impl PageHash {
    /// Parses 64 lowercase hex characters, as they appear in object keys.
    ///
    /// Uppercase is rejected: SGLang writes lowercase, and an object key must map to exactly one
    /// page.
    pub fn from_hex(hex: &[u8]) -> Option<PageHash> {
        if hex.len() != 64 {
            return None;
        }
        // Eight characters a step, as one word (SWAR): a table lookup a character cost 12 %
        // of ingest (perf of the `ingest` bench's loop), every event's key holding a hash.
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        // The high bit of each byte whose value is at least `n` / at most `n`, when every byte
        // is below 0x80 (then no borrow crosses a byte; a word with another byte is rejected).
        let at_least = |x: u64, n: u64| ((x | HIGH) - n * ONES) & HIGH;
        let at_most = |x: u64, n: u64| ((n * ONES) | HIGH).wrapping_sub(x) & HIGH;
        let mut out = [0u8; 32];
        let mut good = true;
        for (four, chars) in out.chunks_exact_mut(4).zip(hex.chunks_exact(8)) {
            let x = u64::from_le_bytes(chars.try_into().expect("eight characters"));
            let digit = at_least(x, 0x30) & at_most(x, 0x39);
            let letter = at_least(x, 0x61) & at_most(x, 0x66);
            good &= x & HIGH == 0 && digit | letter == HIGH;
            // A digit's low nibble is its value; a letter's is its value less 9, and only a
            // letter has bit 6.
            let values = (x & (0x0f * ONES)) + ((x >> 6) & ONES) * 9;
            // Character 2k (the high nibble) and 2k + 1 into byte k of a 16-bit lane.
            let pairs =
                ((values & 0x00ff_00ff_00ff_00ff) << 4) | ((values >> 8) & 0x00ff_00ff_00ff_00ff);
            for (k, byte) in four.iter_mut().enumerate() {
                *byte = (pairs >> (16 * k)) as u8;
            }
        }
        good.then_some(PageHash(out))
    }

    /// Writes the 64 lowercase hex characters into `out`.
    pub fn write_hex(&self, out: &mut [u8; 64]) {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        for (i, b) in self.0.iter().enumerate() {
            out[2 * i] = DIGITS[usize::from(b >> 4)];
            out[2 * i + 1] = DIGITS[usize::from(b & 0xf)];
        }
    }
}

impl fmt::Display for PageHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut hex = [0u8; 64];
        self.write_hex(&mut hex);
        f.write_str(core::str::from_utf8(&hex).expect("hex digits are ASCII"))
    }
}

impl fmt::Debug for PageHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PageHash({self})")
    }
}

/// The error of parsing a [`PageHash`] from text.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ParsePageHashError;

impl fmt::Display for ParsePageHashError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a page hash is 64 lowercase hex characters")
    }
}

impl FromStr for PageHash {
    type Err = ParsePageHashError;

    fn from_str(s: &str) -> Result<PageHash, ParsePageHashError> {
        PageHash::from_hex(s.as_bytes()).ok_or(ParsePageHashError)
    }
}

/// A token id that can be hashed: `u32` (the usual tokenizer output) or `u64`.
///
/// The same ids give the same page hashes whatever the integer type; only values above
/// `u32::MAX` switch a page to the wide form.
pub trait Token: Copy {
    /// Returns the token id as a `u64`.
    fn to_u64(self) -> u64;
}

impl Token for u32 {
    #[inline]
    fn to_u64(self) -> u64 {
        u64::from(self)
    }
}

impl Token for u64 {
    #[inline]
    fn to_u64(self) -> u64 {
        self
    }
}

/// The cache namespace of a request: SGLang 0.5.23 seeds the page-hash chain of a request that
/// has either field.
///
/// An empty string is no value: SGLang's request parsing turns `""` into None before hashing
/// (`GenerateReqInput._normalize_single_inputs` and `Req.__init__`'s `cache_salt or None` in
/// SGLang 0.5.23's `managers/io_struct.py` and `managers/schedule_batch.py`), so
/// `cache_salt: Some("")` hashes as no namespace. This type is where that rule lives:
/// [`Namespace::is_none`] and [`namespace_seed`] read the fields through it, however the value
/// was built.
///
/// A router that does not know a request's namespace MUST hash with [`Namespace::NONE`] and claim
/// hits only for un-namespaced requests.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Namespace<'a> {
    /// SGLang's `extra_key` (the user key, with the LoRA id appended).
    pub extra_key: Option<&'a str>,
    /// SGLang's `cache_salt`.
    pub cache_salt: Option<&'a str>,
}

impl<'a> Namespace<'a> {
    /// No namespace: the plain chain, page 0 hashed without a prior.
    pub const NONE: Namespace<'static> = Namespace {
        extra_key: None,
        cache_salt: None,
    };

    /// Returns the namespace of a request's two fields, an empty string read as none.
    pub fn new(extra_key: Option<&'a str>, cache_salt: Option<&'a str>) -> Namespace<'a> {
        Namespace {
            extra_key,
            cache_salt,
        }
        .normalized()
    }

    /// Returns the namespace with every empty field read as none (SGLang's `""` to None).
    pub fn normalized(self) -> Self {
        fn value(part: Option<&str>) -> Option<&str> {
            part.filter(|text| !text.is_empty())
        }
        Namespace {
            extra_key: value(self.extra_key),
            cache_salt: value(self.cache_salt),
        }
    }

    /// Returns whether neither field has a value (an empty string has none).
    pub fn is_none(&self) -> bool {
        let normalized = self.normalized();
        normalized.extra_key.is_none() && normalized.cache_salt.is_none()
    }
}

/// The domain tag that opens every namespace seed.
const NAMESPACE_TAG: &[u8] = b"sglang-cache-namespace-v1";

/// Returns the prior of page 0 for `namespace`: `None` for [`Namespace::NONE`] (and for empty
/// strings, which are no value).
///
/// ```
/// use hicache_index::hash::{namespace_seed, Namespace};
///
/// assert_eq!(namespace_seed(Namespace::NONE), None);
/// let salted = Namespace { extra_key: None, cache_salt: Some("tenant-a") };
/// assert_eq!(
///     namespace_seed(salted).unwrap().to_string(),
///     "9d303df3761a7561353e2ae7459eb4ab12a08abb37951b696aa4f0c059c7caaa",
/// );
/// ```
pub fn namespace_seed(namespace: Namespace<'_>) -> Option<PageHash> {
    let namespace = namespace.normalized();
    if namespace.is_none() {
        return None;
    }
    let mut digest = Sha256::new();
    digest.update(NAMESPACE_TAG);
    for part in [namespace.extra_key, namespace.cache_salt] {
        match part {
            None => digest.update([0x00]),
            Some(text) => {
                digest.update([0x01]);
                digest.update((text.len() as u64).to_le_bytes());
                digest.update(text.as_bytes());
            }
        }
    }
    Some(PageHash(digest.finalize().into()))
}

/// The page hashes of a token sequence, computed one page at a time as the iterator advances.
///
/// Yields exactly [`PageHashes::page_count`] hashes (only full pages count). Nothing is hashed
/// before [`Iterator::next`] asks for a page, and no page allocates.
///
/// ```
/// use hicache_index::hash::{Namespace, PageHashes};
///
/// let tokens: Vec<u32> = (1..=10).collect();
/// let mut pages = PageHashes::new(&tokens, 4, false, Namespace::NONE);
/// assert_eq!(pages.page_count(), 2);
/// assert_eq!(
///     pages.next().unwrap().to_string(),
///     "cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72",
/// );
/// ```
#[derive(Clone, Debug)]
pub struct PageHashes<'t, T: Token> {
    tokens: &'t [T],
    page_size: usize,
    eagle: bool,
    prior: Option<[u8; 32]>,
    next_page: usize,
    page_count: usize,
}

/// Returns how many full pages `tokens` tokens make: with EAGLE a page is made of bigrams, of
/// which there are `tokens - 1`; a page size of 0 makes none.
pub fn page_count(tokens: usize, page_size: u32, eagle: bool) -> usize {
    let page_size = usize::try_from(page_size).unwrap_or(usize::MAX);
    let units = if eagle {
        tokens.saturating_sub(1)
    } else {
        tokens
    };
    units.checked_div(page_size).unwrap_or(0)
}

impl<'t, T: Token> PageHashes<'t, T> {
    /// Prepares to hash the full pages of `tokens`; only the namespace seed is computed here.
    ///
    /// `page_size` is in tokens (in bigrams with `eagle`); a page size of 0 yields no pages.
    pub fn new(tokens: &'t [T], page_size: u32, eagle: bool, namespace: Namespace<'_>) -> Self {
        let page_count = page_count(tokens.len(), page_size, eagle);
        let page_size = usize::try_from(page_size).unwrap_or(usize::MAX);
        PageHashes {
            tokens,
            page_size,
            eagle,
            prior: namespace_seed(namespace).map(|seed| seed.0),
            next_page: 0,
            page_count,
        }
    }

    /// Returns the number of full pages of the input, consumed or not.
    pub fn page_count(&self) -> usize {
        self.page_count
    }

    /// Returns the raw tokens page `index` is made of (`page_size + 1` of them with EAGLE).
    fn page_tokens(&self, index: usize) -> &'t [T] {
        let start = index * self.page_size;
        let end = start + self.page_size + usize::from(self.eagle);
        &self.tokens[start..end]
    }
}

impl<T: Token> PageHashes<'_, T> {
    /// Computes the next page's hash like [`Iterator::next`], asking `memo` first: a page whose
    /// key `memo` holds costs no SHA-256, and a page hashed is handed to `memo` to keep.
    ///
    /// The memo is keyed by exactly what SHA-256 reads (the prior, the mode and the page's raw
    /// tokens), so a correct memo cannot change a hash. A memo MUST compare keys in full.
    pub fn next_with<M: DigestMemo + ?Sized>(&mut self, memo: &M) -> Option<PageHash> {
        if self.next_page >= self.page_count {
            return None;
        }
        let raw = self.page_tokens(self.next_page);
        let prior = self.prior.as_ref();
        let page = match memo.get(prior, self.eagle, raw) {
            Some(known) => known.0,
            None => {
                let page = page_digest(prior, self.eagle, raw);
                memo.put(prior, self.eagle, raw, PageHash(page));
                page
            }
        };
        self.next_page += 1;
        self.prior = Some(page);
        Some(PageHash(page))
    }
}

impl<T: Token> Iterator for PageHashes<'_, T> {
    type Item = PageHash;

    fn next(&mut self) -> Option<PageHash> {
        if self.next_page >= self.page_count {
            return None;
        }
        let raw = self.page_tokens(self.next_page);
        self.next_page += 1;
        let page = page_digest(self.prior.as_ref(), self.eagle, raw);
        self.prior = Some(page);
        Some(PageHash(page))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.page_count - self.next_page;
        (left, Some(left))
    }
}

/// Hashes one page: SHA-256 of the prior (if any) and the page's body (see the module docs).
fn page_digest<T: Token>(prior: Option<&[u8; 32]>, eagle: bool, raw: &[T]) -> [u8; 32] {
    let wide = raw.iter().any(|t| t.to_u64() > u64::from(u32::MAX));
    let mut digest = Sha256::new();
    if let Some(prior) = prior {
        digest.update(prior);
    }
    if wide {
        digest.update([0xff]);
    }
    if !eagle && !wide {
        // The common page: every value a u32, encoded a chunk at a time (a loop the compiler
        // vectorises) rather than a value at a time. Value by value, encoding cost two thirds
        // of SHA-256's own time (a profile of the query bench).
        let mut buf = [0u8; FAST_CHUNK];
        for chunk in raw.chunks(FAST_CHUNK / 4) {
            for (out, t) in buf.chunks_exact_mut(4).zip(chunk) {
                // Narrow: no value above u32::MAX (checked above).
                out.copy_from_slice(&(t.to_u64() as u32).to_le_bytes());
            }
            digest.update(&buf[..chunk.len() * 4]);
        }
        return digest.finalize().into();
    }
    let mut body = PageBody::new(digest, wide);
    if eagle {
        for pair in raw.windows(2) {
            body.push(pair[0].to_u64());
            body.push(pair[1].to_u64());
        }
    } else {
        for token in raw {
            body.push(token.to_u64());
        }
    }
    body.finish()
}

/// A store of page digests already computed, for routers that see the same prefixes again and
/// again: keyed by exactly what SHA-256 reads for a page (the prior digest, or none for an
/// un-namespaced page 0; whether the page is made of EAGLE bigrams; its raw tokens).
///
/// Used by [`PageHashes::next_with`]. An implementation MUST answer only for a key equal in full
/// (token for token) to one it was given, so that it returns no digest SHA-256 would not
/// produce; it may forget whatever it likes. Both methods take `&self`: a memo shared by query
/// threads synchronises inside.
pub trait DigestMemo {
    /// Returns the digest remembered for this page, if any.
    fn get<T: Token>(
        &self,
        prior: Option<&[u8; 32]>,
        eagle: bool,
        tokens: &[T],
    ) -> Option<PageHash>;

    /// Offers a digest just computed for this page.
    fn put<T: Token>(&self, prior: Option<&[u8; 32]>, eagle: bool, tokens: &[T], digest: PageHash);
}

/// The memo that remembers nothing: [`PageHashes::next_with`] then hashes every page.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoMemo;

impl DigestMemo for NoMemo {
    fn get<T: Token>(&self, _: Option<&[u8; 32]>, _: bool, _: &[T]) -> Option<PageHash> {
        None
    }

    fn put<T: Token>(&self, _: Option<&[u8; 32]>, _: bool, _: &[T], _: PageHash) {}
}

impl<T: Token> ExactSizeIterator for PageHashes<'_, T> {}

impl<T: Token> FusedIterator for PageHashes<'_, T> {}

/// Bytes of a page body gathered on the stack before they go to SHA-256 in one call.
const BODY_CHUNK: usize = 512;

/// Bytes of a narrow page body encoded at a time: one SHA-256 block. A larger buffer costs its
/// zeroing on every page (a 512-byte one was 5 % of a 256-page query) and gains nothing.
const FAST_CHUNK: usize = 64;

/// A page body being encoded: values as u32 LE (or u64 LE when wide), fed in chunks.
struct PageBody {
    digest: Sha256,
    wide: bool,
    buf: [u8; BODY_CHUNK],
    len: usize,
}

impl PageBody {
    fn new(digest: Sha256, wide: bool) -> Self {
        PageBody {
            digest,
            wide,
            buf: [0; BODY_CHUNK],
            len: 0,
        }
    }

    /// Appends one value; a narrow body only ever receives values that fit in a u32.
    #[inline]
    fn push(&mut self, value: u64) {
        if self.len + 8 > BODY_CHUNK {
            self.digest.update(&self.buf[..self.len]);
            self.len = 0;
        }
        if self.wide {
            self.buf[self.len..self.len + 8].copy_from_slice(&value.to_le_bytes());
            self.len += 8;
        } else {
            // Narrow pages hold no value above u32::MAX: the caller checked the whole page.
            let narrow = value as u32;
            self.buf[self.len..self.len + 4].copy_from_slice(&narrow.to_le_bytes());
            self.len += 4;
        }
    }

    fn finish(mut self) -> [u8; 32] {
        self.digest.update(&self.buf[..self.len]);
        self.digest.finalize().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_chunks_do_not_change_the_digest() {
        // 300 u32 tokens (1200 bytes) and 100 wide ones (800 bytes) cross several chunks.
        let tokens: alloc::vec::Vec<u64> = (0..300).collect();
        let page = PageHashes::new(&tokens, 300, false, Namespace::NONE)
            .next()
            .expect("one full page");
        let mut bytes = alloc::vec::Vec::new();
        for t in &tokens {
            bytes.extend_from_slice(&(*t as u32).to_le_bytes());
        }
        assert_eq!(page.0, <[u8; 32]>::from(Sha256::digest(&bytes)));

        let wide: alloc::vec::Vec<u64> = (0..100).map(|i| (1 << 40) + i).collect();
        let page = PageHashes::new(&wide, 100, false, Namespace::NONE)
            .next()
            .expect("one full page");
        let mut bytes = alloc::vec![0xff];
        for t in &wide {
            bytes.extend_from_slice(&t.to_le_bytes());
        }
        assert_eq!(page.0, <[u8; 32]>::from(Sha256::digest(&bytes)));
    }

    /// A character's value, one at a time: what `from_hex` computes eight at a time.
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }

    #[test]
    fn from_hex_takes_exactly_lowercase_hex_at_every_position_and_every_byte_value() {
        let base: alloc::vec::Vec<u8> = b"0123456789abcdef"
            .iter()
            .cycle()
            .take(64)
            .copied()
            .collect();
        for at in 0..64 {
            for c in 0..=255u8 {
                let mut hex = base.clone();
                hex[at] = c;
                let want = hex
                    .chunks_exact(2)
                    .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
                    .collect::<Option<alloc::vec::Vec<u8>>>();
                let got = PageHash::from_hex(&hex).map(|h| h.0.to_vec());
                assert_eq!(got, want, "byte {c:#04x} at {at}");
            }
        }
        assert_eq!(PageHash::from_hex(&base[..63]), None);
    }
}
