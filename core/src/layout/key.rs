//! The object key codec: an object key split into its parts ([`ObjectKey`]), [`parse_object_key`]
//! and the suffix rules that make it exact.

use alloc::borrow::ToOwned;
use core::fmt::{self, Write as _};

use crate::hash::PageHash;

use super::error::LayoutError;
use super::limits::MAX_SUFFIX_LEN;

/// An object key split into its parts.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectKey<'a> {
    /// The key prefix; `Some("")` for a key that starts with `_` before the hash.
    pub prefix: Option<&'a str>,
    /// The page hash.
    pub page_hash: PageHash,
    /// Everything after the hash; starts with `_`.
    pub suffix: &'a str,
}

/// Length of a page hash in hex characters.
pub(super) const HASH_HEX_LEN: usize = 64;

/// Checks one suffix against the rules that make key parsing exact.
pub(super) fn check_suffix(suffix: &str) -> Result<(), LayoutError> {
    if !suffix.starts_with('_') {
        return Err(LayoutError::SuffixWithoutUnderscore {
            suffix: suffix.to_owned(),
        });
    }
    if suffix.len() > MAX_SUFFIX_LEN {
        return Err(LayoutError::SuffixTooLong {
            suffix: suffix.to_owned(),
        });
    }
    let mut run = 0;
    for b in suffix.bytes() {
        run = if is_lower_hex(b) { run + 1 } else { 0 };
        if run >= HASH_HEX_LEN {
            return Err(LayoutError::SuffixLooksLikeHash {
                suffix: suffix.to_owned(),
            });
        }
    }
    Ok(())
}

fn is_lower_hex(b: u8) -> bool {
    matches!(b, b'0'..=b'9' | b'a'..=b'f')
}

/// Splits an object key into prefix, page hash and suffix, without allocating.
///
/// The hash is the last run of exactly 64 lowercase hex characters that starts the key or follows a
/// `_`, and is followed by a `_` that opens a suffix of at most [`MAX_SUFFIX_LEN`] bytes. The
/// prefix is everything before the `_` in front of the hash (`Some("")` when the key starts with
/// `_`), or `None` when the hash starts the key. For every valid [`Layout`](crate::layout::Layout)
/// this is the exact inverse of [`Layout::object_keys`](crate::layout::Layout::object_keys); any
/// other shape gives `None`.
///
/// ```
/// use hicache_index::layout::parse_object_key;
///
/// let h = "cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72";
/// let key = format!("prod_Qwen-Qwen3-8B_{h}_1_v");
/// let parsed = parse_object_key(&key).unwrap();
/// assert_eq!(parsed.prefix, Some("prod_Qwen-Qwen3-8B"));
/// assert_eq!(parsed.page_hash.to_string(), h);
/// assert_eq!(parsed.suffix, "_1_v");
/// assert_eq!(parse_object_key("sglang_mooncake_store_warmup_key"), None);
/// ```
pub fn parse_object_key(key: &str) -> Option<ObjectKey<'_>> {
    let bytes = key.as_bytes();
    // The suffix is 1..=MAX_SUFFIX_LEN bytes, so the hash starts in this window.
    let last = bytes.len().checked_sub(HASH_HEX_LEN + 1)?;
    let first = bytes.len().saturating_sub(HASH_HEX_LEN + MAX_SUFFIX_LEN);
    for start in (first..=last).rev() {
        let end = start + HASH_HEX_LEN;
        if bytes[end] != b'_' || (start > 0 && bytes[start - 1] != b'_') {
            continue;
        }
        let Some(page_hash) = PageHash::from_hex(&bytes[start..end]) else {
            continue;
        };
        // Both cuts sit next to an ASCII '_' or a hex digit: char boundaries.
        return Some(ObjectKey {
            prefix: (start > 0).then(|| &key[..start - 1]),
            page_hash,
            suffix: &key[end..],
        });
    }
    None
}

impl fmt::Display for ObjectKey<'_> {
    /// Writes the key back: `{P}_{H}{S}`, or `{H}{S}` without a prefix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(prefix) = self.prefix {
            f.write_str(prefix)?;
            f.write_char('_')?;
        }
        write!(f, "{}{}", self.page_hash, self.suffix)
    }
}
