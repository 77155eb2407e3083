//! SGLang HiCache page hashes: a SHA-256 chain over full pages of tokens.

use core::fmt;
use core::str::FromStr;

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
        let mut out = [0u8; 32];
        for (i, pair) in hex.chunks_exact(2).enumerate() {
            out[i] = (lower_hex_value(pair[0])? << 4) | lower_hex_value(pair[1])?;
        }
        Some(PageHash(out))
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

/// Returns the value of a lowercase hex digit.
pub(crate) fn lower_hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
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

// PAGE HASHING PENDING (helper): see the crate's issue 2.
