//! The master's key list (`GET /get_all_keys`): which of its lines may become keys.
//!
//! The body holds one key per line, each ending in `\n`, verbatim: nothing is trimmed, and a
//! space or a `\r` is part of a key (spec section 6). So a line is applied exactly as it is, or
//! not at all. A line that is not a well-formed object key (blank, not UTF-8, or not of the
//! form `{P}_{H}{S}`: another application's key, say) is *odd*: it may be the first or last part
//! of a key that itself contains a `\n`, and the lines next to it may be its other parts, so the
//! well-formed line just before and just after an odd line are *doubted*: they count only once
//! the master confirms each as a key of its own (`/batch_query_keys`), so that a store shared
//! with other applications is restored whole.
//!
//! What the text cannot tell: a key containing one or more `\n` whose parts are all well-formed
//! object keys (SGLang never writes one; someone writing such a key on purpose can make its
//! parts look present). That class is not closed here: it is bounded by verification, which
//! finds such keys absent at the master and forgets them (see `VerifyConfig`).

use alloc::string::String;
use alloc::vec::Vec;

use crate::layout::parse_object_key;

/// Splits a `/get_all_keys` body into its lines, each without its `\n` and otherwise exactly
/// as the master wrote it (never trimmed). A body that ends in `\n` has no empty last line.
pub fn snapshot_lines(body: &[u8]) -> impl Iterator<Item = &[u8]> {
    let body = body.strip_suffix(b"\n").unwrap_or(body);
    let empty = body.is_empty();
    body.split(|&b| b == b'\n').filter(move |_| !empty)
}

/// The most doubted lines one key list keeps for confirmation; a key list with more fails its
/// fetch, as one whose confirmation failed does (the lines past it cannot be confirmed).
pub const MAX_DOUBTED: usize = 1 << 20;

/// Decides line by line which snapshot lines become keys, across chunks of one snapshot.
#[derive(Debug, Default)]
pub(crate) struct LineFilter {
    /// The last well-formed line, held back until the next line shows it is not next to an
    /// odd one.
    pending: Option<String>,
    /// The previous line was odd: the next well-formed line is doubted.
    after_odd: bool,
    /// Lines that were not well-formed keys.
    pub(crate) odd: u64,
    /// Well-formed lines next to an odd line.
    pub(crate) doubted: u64,
    /// The doubted lines kept for confirmation (at most [`MAX_DOUBTED`]; `doubted` counts
    /// them all).
    pub(crate) doubted_keys: Vec<String>,
}

impl LineFilter {
    /// Takes the next line; hands `apply` the line before it when that one is now known to be a
    /// key to apply.
    pub(crate) fn push(&mut self, line: &[u8], mut apply: impl FnMut(&str)) {
        let key = core::str::from_utf8(line)
            .ok()
            .filter(|k| parse_object_key(k).is_some());
        let Some(key) = key else {
            self.odd += 1;
            if let Some(before) = self.pending.take() {
                self.doubt(before);
            }
            self.after_odd = true;
            return;
        };
        if let Some(before) = self.pending.take() {
            apply(&before);
        }
        if core::mem::take(&mut self.after_odd) {
            self.doubt(key.into());
        } else {
            self.pending = Some(key.into());
        }
    }

    fn doubt(&mut self, key: String) {
        self.doubted += 1;
        if self.doubted_keys.len() < MAX_DOUBTED {
            self.doubted_keys.push(key);
        }
    }

    /// Ends the snapshot: hands `apply` the last line if it is a key to apply.
    pub(crate) fn finish(&mut self, mut apply: impl FnMut(&str)) {
        if let Some(last) = self.pending.take() {
            apply(&last);
        }
        self.after_odd = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "m_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "m_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn applied(body: &str) -> Vec<String> {
        let mut filter = LineFilter::default();
        let mut out = Vec::new();
        for line in snapshot_lines(body.as_bytes()) {
            filter.push(line, |k| out.push(k.into()));
        }
        filter.finish(|k| out.push(k.into()));
        out
    }

    #[test]
    fn lines_are_split_on_newline_only_and_never_trimmed() {
        let lines: Vec<&[u8]> = snapshot_lines(b"a b\r\n c\n").collect();
        assert_eq!(lines, [&b"a b\r"[..], &b" c"[..]]);
        assert_eq!(snapshot_lines(b"").count(), 0);
        assert_eq!(snapshot_lines(b"\n").count(), 0);
        assert_eq!(snapshot_lines(b"x").count(), 1);
    }

    #[test]
    fn well_formed_lines_apply_in_order() {
        let body = alloc::format!("{A}_0_k\n{A}_0_v\n{B}__k\n");
        assert_eq!(
            applied(&body),
            [
                alloc::format!("{A}_0_k"),
                alloc::format!("{A}_0_v"),
                alloc::format!("{B}__k")
            ]
        );
    }

    #[test]
    fn a_line_with_a_trailing_space_is_applied_verbatim_never_trimmed() {
        let body = alloc::format!("{A}_0_k \n{A}_0_k\r\n");
        let verbatim = [alloc::format!("{A}_0_k "), alloc::format!("{A}_0_k\r")];
        assert_eq!(applied(&body), verbatim);
    }

    #[test]
    fn the_lines_next_to_an_odd_line_are_doubted() {
        // "junk\n<A>_0_v" is one key of a foreign tenant, split in two by the list's format.
        let body = alloc::format!("{B}_0_k\n{A}_0_k\njunk\n{A}_0_v\n{B}_0_v\n");
        assert_eq!(
            applied(&body),
            [alloc::format!("{B}_0_k"), alloc::format!("{B}_0_v")]
        );
        let mut filter = LineFilter::default();
        for line in snapshot_lines(body.as_bytes()) {
            filter.push(line, |_| {});
        }
        filter.finish(|_| {});
        assert_eq!((filter.odd, filter.doubted), (1, 2));
        assert_eq!(
            filter.doubted_keys,
            [alloc::format!("{A}_0_k"), alloc::format!("{A}_0_v")]
        );
    }

    #[test]
    fn blank_and_invalid_utf8_lines_are_odd() {
        let mut body = alloc::format!("{A}_0_k\n\n{A}_0_v\n").into_bytes();
        body.extend_from_slice(b"\xff\n");
        body.extend_from_slice(alloc::format!("{B}_0_k\n").as_bytes());
        let mut filter = LineFilter::default();
        let mut out = 0;
        for line in snapshot_lines(&body) {
            filter.push(line, |_| out += 1);
        }
        filter.finish(|_| out += 1);
        assert_eq!((out, filter.odd, filter.doubted), (0, 2, 3));
    }
}
