//! Hashing a session's `Debug` form, as it is written, without the fields that never decide
//! what it does next: its counters (written, never read, by its decisions), its configuration
//! (the same in every history) and the reader's query count (the checker's own queries move
//! it).
//!
//! Leaving out a field that does decide behaviour would merge two states that differ: only
//! these names are left out, wherever they appear as a field (`name: value`).
//!
//! What `Debug` does not show is added by [`crate::World::fingerprint`]: which page keys the
//! index holds and which pages the reader claims. The one thing of the index left out is the
//! slot each page sits in: it orders a verification round's keys, and decides nothing while a
//! round asks every key (the shipped sample, 1024, is far above the checker's pages). The
//! explorer's audit ([`crate::explore::audit`]) plays the same continuations after histories
//! merged into one state and checks they behave alike.

use std::fmt::{self, Debug, Write};
use std::hash::Hasher;

/// The field names left out.
const LEFT_OUT: [&str; 3] = ["counters", "config", "queries"];

/// Hashes `value`'s `Debug` form into `h`, leaving out the values of the fields in
/// `LEFT_OUT` (counters, config, queries).
pub fn hash_debug(value: &impl Debug, h: &mut impl Hasher) {
    let mut w = Stripper {
        h,
        state: State::Keep,
        last: 0,
        in_string: false,
        escaped: false,
        buf: [0; BUF],
        len: 0,
    };
    let _ = write!(w, "{value:?}");
    w.flush();
}

/// The bytes kept are hashed in blocks of this many (the pieces `Debug` writes are small).
const BUF: usize = 1024;

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Keep,
    /// A left-out field's name was written: its `": "` comes next.
    Named,
    /// Inside a left-out field's value, this deep in brackets.
    Skip(usize),
}

struct Stripper<'h, H: Hasher> {
    h: &'h mut H,
    state: State,
    /// The last byte kept.
    last: u8,
    in_string: bool,
    escaped: bool,
    buf: [u8; BUF],
    len: usize,
}

impl<H: Hasher> Stripper<'_, H> {
    fn keep(&mut self, bytes: &[u8]) {
        if let Some(&c) = bytes.last() {
            self.last = c;
        }
        if self.len + bytes.len() > BUF {
            self.flush();
        }
        if bytes.len() > BUF {
            self.h.write(bytes);
            return;
        }
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    fn flush(&mut self) {
        self.h.write(&self.buf[..self.len]);
        self.len = 0;
    }
}

impl<H: Hasher> Write for Stripper<'_, H> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        match self.state {
            State::Keep => {
                // `DebugStruct` writes each field's name as one piece, after `" { "` or `", "`.
                if matches!(self.last, b' ' | b'{' | b'(') && LEFT_OUT.contains(&s) {
                    self.state = State::Named;
                    return Ok(());
                }
            }
            State::Named => {
                if s == ": " {
                    self.state = State::Skip(0);
                    return Ok(());
                }
                // Not a field after all: keep what was held back. (Unreachable in practice:
                // the names are only ever written as field names.)
                self.state = State::Keep;
            }
            State::Skip(_) => {}
        }
        if self.state == State::Keep {
            self.keep(s.as_bytes());
            return Ok(());
        }
        let mut kept_from = 0;
        let b = s.as_bytes();
        for (i, &c) in b.iter().enumerate() {
            let State::Skip(depth) = self.state else {
                continue;
            };
            if self.in_string {
                match (self.escaped, c) {
                    (true, _) => self.escaped = false,
                    (false, b'\\') => self.escaped = true,
                    (false, b'"') => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match c {
                b'"' => self.in_string = true,
                b'{' | b'[' | b'(' => self.state = State::Skip(depth + 1),
                b'}' | b']' | b')' | b',' if depth == 0 => {
                    // The value ended: keep from here on.
                    self.state = State::Keep;
                    kept_from = i;
                }
                b'}' | b']' | b')' => self.state = State::Skip(depth - 1),
                _ => {}
            }
        }
        if let State::Skip(_) = self.state {
            return Ok(());
        }
        self.keep(&b[kept_from..]);
        Ok(())
    }
}

/// A fast 128-bit hasher for fingerprints (two multiply-rotate lanes over 8-byte words): each
/// `write` is mixed as one piece, so equal sequences of pieces hash equal.
#[derive(Clone, Debug)]
pub struct Fast {
    a: u64,
    b: u64,
}

impl Default for Fast {
    fn default() -> Fast {
        Fast {
            a: 0x243f_6a88_85a3_08d3,
            b: 0x1319_8a2e_0370_7344,
        }
    }
}

impl Fast {
    fn mix(&mut self, w: u64) {
        self.a = (self.a ^ w)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(31);
        self.b = (self.b ^ w.rotate_left(17))
            .wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
            .rotate_left(29);
    }

    /// Returns both lanes, mixed.
    pub fn finish128(&self) -> u128 {
        let a = (self.a ^ (self.b >> 32)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        let b = (self.b ^ (self.a >> 29)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        (u128::from(a ^ (a >> 33)) << 64) | u128::from(b ^ (b >> 33))
    }
}

impl Hasher for Fast {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.mix(u64::from_le_bytes(c.try_into().expect("eight bytes")));
        }
        let rest = chunks.remainder();
        let mut tail = [0u8; 8];
        tail[..rest.len()].copy_from_slice(rest);
        self.mix(u64::from_le_bytes(tail) ^ ((bytes.len() as u64) << 56));
    }

    fn finish(&self) -> u64 {
        self.finish128() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    #[derive(Debug)]
    #[allow(dead_code)]
    struct Inner {
        n: u32,
        m: Vec<u32>,
    }

    #[derive(Debug)]
    #[allow(dead_code)]
    struct State {
        config: Inner,
        key: &'static str,
        counters: Inner,
        seq: u32,
        nested: Option<Inner>,
    }

    fn hash(s: &State) -> u64 {
        let mut h = DefaultHasher::new();
        hash_debug(s, &mut h);
        h.finish()
    }

    fn state(config: u32, counters: Vec<u32>, seq: u32, key: &'static str) -> State {
        State {
            config: Inner {
                n: config,
                m: vec![],
            },
            key,
            counters: Inner { n: 1, m: counters },
            seq,
            nested: Some(Inner { n: seq, m: vec![] }),
        }
    }

    #[test]
    fn left_out_fields_do_not_change_the_hash_and_others_do() {
        let a = state(1, vec![1, 2], 3, "k");
        assert_eq!(hash(&a), hash(&state(2, vec![], 3, "k")));
        assert_ne!(hash(&a), hash(&state(1, vec![1, 2], 4, "k")));
        assert_ne!(hash(&a), hash(&state(1, vec![1, 2], 3, "j")));
    }

    #[test]
    fn a_field_name_inside_a_string_is_kept() {
        assert_ne!(
            hash(&state(1, vec![], 3, "counters: 1")),
            hash(&state(1, vec![], 3, "counters: 2"))
        );
    }
}
