//! Page hashes against SGLang 0.5.23's own vectors, the wide form, laziness and the chain.

use std::cell::Cell;

use hicache_index::hash::{namespace_seed, Namespace, PageHashes, Token};
use hicache_index::PageHash;
use quickcheck_macros::quickcheck;
use serde_json::Value;
use sha2::{Digest, Sha256};

const FIXTURE: &str = include_str!("fixtures/page_hashes.json");

/// Reads `tokens`: a list, or the string `"list(range(a, b))"` meaning `a..b`.
fn tokens_of(value: &Value) -> Vec<u32> {
    if let Some(list) = value.as_array() {
        return list
            .iter()
            .map(|t| u32::try_from(t.as_u64().expect("token")).expect("u32 token"))
            .collect();
    }
    let text = value.as_str().expect("tokens list or range string");
    let inner = text
        .strip_prefix("list(range(")
        .and_then(|rest| rest.strip_suffix("))"))
        .expect("list(range(a, b))");
    let (a, b) = inner.split_once(',').expect("two bounds");
    let a: u32 = a.trim().parse().expect("start");
    let b: u32 = b.trim().parse().expect("end");
    (a..b).collect()
}

fn hex_list(value: &Value) -> Vec<String> {
    value
        .as_array()
        .expect("list of hashes")
        .iter()
        .map(|h| h.as_str().expect("hex").to_owned())
        .collect()
}

fn hex_of(pages: impl Iterator<Item = PageHash>) -> Vec<String> {
    pages.map(|h| h.to_string()).collect()
}

fn digest(parts: &[&[u8]]) -> [u8; 32] {
    let mut d = Sha256::new();
    for p in parts {
        d.update(p);
    }
    d.finalize().into()
}

#[test]
fn every_upstream_vector_matches() {
    let fixture: Value = serde_json::from_str(FIXTURE).expect("fixture is JSON");
    let vectors = fixture["vectors"].as_array().expect("vectors");
    assert!(vectors.len() >= 10);
    for v in vectors {
        let name = v["name"].as_str().expect("name");
        let tokens = tokens_of(&v["tokens"]);
        let page_size = u32::try_from(v["page_size"].as_u64().expect("page_size")).unwrap();
        let eagle = v["eagle"].as_bool().expect("eagle");
        let expected = hex_list(&v["page_hashes"]);

        let pages = PageHashes::new(&tokens, page_size, eagle, Namespace::NONE);
        assert_eq!(pages.page_count(), expected.len(), "{name}: page count");
        assert_eq!(hex_of(pages), expected, "{name}");

        let wide: Vec<u64> = tokens.iter().map(|&t| u64::from(t)).collect();
        let pages = PageHashes::new(&wide, page_size, eagle, Namespace::NONE);
        assert_eq!(hex_of(pages), expected, "{name} as u64 tokens");
    }
}

#[test]
fn every_namespaced_vector_matches_seed_and_pages() {
    let fixture: Value = serde_json::from_str(FIXTURE).expect("fixture is JSON");
    let vectors = fixture["namespaced"].as_array().expect("namespaced");
    assert!(!vectors.is_empty());
    for v in vectors {
        let namespace = Namespace {
            extra_key: v["extra_key"].as_str(),
            cache_salt: v["cache_salt"].as_str(),
        };
        assert!(!namespace.is_none());
        let seed = namespace_seed(namespace).expect("a namespace has a seed");
        assert_eq!(
            seed.to_string(),
            v["seed_hex"].as_str().unwrap(),
            "{namespace:?}"
        );

        let tokens = tokens_of(&v["tokens"]);
        let page_size = u32::try_from(v["page_size"].as_u64().unwrap()).unwrap();
        let pages = PageHashes::new(&tokens, page_size, false, namespace);
        assert_eq!(hex_of(pages), hex_list(&v["page_hashes"]), "{namespace:?}");
    }
}

#[test]
fn namespace_seed_encodes_presence_and_length() {
    assert_eq!(namespace_seed(Namespace::NONE), None);
    assert!(Namespace::NONE.is_none());
    let both = Namespace {
        extra_key: Some("k"),
        cache_salt: Some("s"),
    };
    let expected = digest(&[
        b"sglang-cache-namespace-v1",
        &[1],
        &1u64.to_le_bytes(),
        b"k",
        &[1],
        &1u64.to_le_bytes(),
        b"s",
    ]);
    assert_eq!(namespace_seed(both), Some(PageHash(expected)));
    let key_only = Namespace::new(Some("k"), None);
    let expected = digest(&[
        b"sglang-cache-namespace-v1",
        &[1],
        &1u64.to_le_bytes(),
        b"k",
        &[0],
    ]);
    assert_eq!(namespace_seed(key_only), Some(PageHash(expected)));
}

#[test]
fn an_empty_cache_salt_or_extra_key_hashes_as_no_namespace() {
    // SGLang 0.5.23 turns "" into None before hashing (io_struct.py, schedule_batch.py).
    for (extra_key, cache_salt) in [(None, Some("")), (Some(""), None), (Some(""), Some(""))] {
        let ns = Namespace {
            extra_key,
            cache_salt,
        };
        assert!(ns.is_none(), "{ns:?}");
        assert_eq!(namespace_seed(ns), None, "{ns:?}");
        let tokens = [1u32, 2, 3, 4, 5, 6, 7, 8];
        let plain: Vec<PageHash> = PageHashes::new(&tokens, 4, false, Namespace::NONE).collect();
        assert_eq!(
            PageHashes::new(&tokens, 4, false, ns).collect::<Vec<_>>(),
            plain
        );
        assert_eq!(Namespace::new(extra_key, cache_salt), Namespace::NONE);
    }
    // An empty field beside a set one is that field absent.
    let half = Namespace {
        extra_key: Some("k"),
        cache_salt: Some(""),
    };
    assert_eq!(
        namespace_seed(half),
        namespace_seed(Namespace::new(Some("k"), None))
    );
}

#[test]
fn namespaced_first_page_uses_the_seed_as_prior() {
    let ns = Namespace {
        extra_key: Some("lora-7"),
        cache_salt: None,
    };
    let seed = namespace_seed(ns).unwrap();
    let tokens = [1u32, 2, 3, 4];
    let mut body = Vec::new();
    for t in tokens {
        body.extend_from_slice(&t.to_le_bytes());
    }
    let page = PageHashes::new(&tokens, 4, false, ns).next().unwrap();
    assert_eq!(page, PageHash(digest(&[&seed.0, &body])));
}

#[test]
fn wide_token_changes_only_its_page_and_later_ones() {
    let narrow: Vec<u64> = (1..=12).collect();
    let mut wide = narrow.clone();
    let big = u64::from(u32::MAX) + 7;
    wide[5] = big; // page 1 of three pages of 4
    let before = hex_of(PageHashes::new(&narrow, 4, false, Namespace::NONE));
    let after: Vec<PageHash> = PageHashes::new(&wide, 4, false, Namespace::NONE).collect();
    assert_eq!(after[0].to_string(), before[0]);
    assert_ne!(after[1].to_string(), before[1]);
    assert_ne!(after[2].to_string(), before[2]);

    // Page 1: prior ‖ 0xff ‖ every token of the page as u64 LE.
    let mut body = vec![0xffu8];
    for t in &wide[4..8] {
        body.extend_from_slice(&t.to_le_bytes());
    }
    assert_eq!(after[1], PageHash(digest(&[&after[0].0, &body])));
    // Page 2 is narrow again, chained on the wide page.
    let mut body = Vec::new();
    for t in &wide[8..12] {
        body.extend_from_slice(&(*t as u32).to_le_bytes());
    }
    assert_eq!(after[2], PageHash(digest(&[&after[1].0, &body])));
}

#[test]
fn wide_token_at_u32_max_stays_narrow() {
    let at_max = [u64::from(u32::MAX), 1];
    let as_u32 = [u32::MAX, 1];
    assert_eq!(
        PageHashes::new(&at_max, 2, false, Namespace::NONE).next(),
        PageHashes::new(&as_u32, 2, false, Namespace::NONE).next()
    );
}

#[test]
fn eagle_wide_page_hashes_bigram_elements_as_u64() {
    // Pages of 2 bigrams: page 0 is t0..=t2, page 1 is t2..=t4, page 2 is t4..=t6.
    let big = 1u64 << 33;
    let tokens = [10u64, 11, big, 13, 14, 15, 16];
    let pages: Vec<PageHash> = PageHashes::new(&tokens, 2, true, Namespace::NONE).collect();
    assert_eq!(pages.len(), 3);

    let mut body = vec![0xffu8];
    for (a, b) in [(10u64, 11u64), (11, big)] {
        body.extend_from_slice(&a.to_le_bytes());
        body.extend_from_slice(&b.to_le_bytes());
    }
    assert_eq!(pages[0], PageHash(digest(&[&body])));

    let mut body = vec![0xffu8];
    for (a, b) in [(big, 13u64), (13, 14)] {
        body.extend_from_slice(&a.to_le_bytes());
        body.extend_from_slice(&b.to_le_bytes());
    }
    assert_eq!(pages[1], PageHash(digest(&[&pages[0].0, &body])));

    let mut body = Vec::new();
    for (a, b) in [(14u32, 15u32), (15, 16)] {
        body.extend_from_slice(&a.to_le_bytes());
        body.extend_from_slice(&b.to_le_bytes());
    }
    assert_eq!(pages[2], PageHash(digest(&[&pages[1].0, &body])));
}

#[test]
fn eagle_wide_lookahead_token_makes_the_page_before_wide_too() {
    // The big token is the last token of page 0's window (and the first of page 1's).
    let big = 1u64 << 40;
    let tokens = [1u64, 2, big, 4, 5];
    let narrow = [1u64, 2, 3, 4, 5];
    let with_big: Vec<PageHash> = PageHashes::new(&tokens, 2, true, Namespace::NONE).collect();
    let without: Vec<PageHash> = PageHashes::new(&narrow, 2, true, Namespace::NONE).collect();
    assert_ne!(with_big[0], without[0]);
    assert_ne!(with_big[1], without[1]);
}

#[test]
fn zero_page_size_yields_no_pages() {
    let tokens = [1u32, 2, 3];
    let pages = PageHashes::new(&tokens, 0, false, Namespace::NONE);
    assert_eq!(pages.page_count(), 0);
    assert_eq!(pages.count(), 0);
    assert_eq!(
        PageHashes::new(&tokens, 0, true, Namespace::NONE).count(),
        0
    );
    let none: [u32; 0] = [];
    assert_eq!(PageHashes::new(&none, 4, true, Namespace::NONE).count(), 0);
}

#[test]
fn partial_last_page_is_not_hashed() {
    let tokens: Vec<u32> = (0..11).collect();
    let pages = PageHashes::new(&tokens, 4, false, Namespace::NONE);
    assert_eq!(pages.page_count(), 2);
    assert_eq!(pages.len(), 2);
    // EAGLE: 11 tokens are 10 bigrams, two full pages of 4 and 2 left over.
    assert_eq!(
        PageHashes::new(&tokens, 4, true, Namespace::NONE).count(),
        2
    );
    assert_eq!(
        PageHashes::new(&tokens[..9], 4, true, Namespace::NONE).count(),
        2
    );
    assert_eq!(
        PageHashes::new(&tokens[..8], 4, true, Namespace::NONE).count(),
        1
    );
}

/// A token that counts how often the hasher reads it.
#[derive(Copy, Clone)]
struct Counted<'a> {
    id: u32,
    reads: &'a Cell<usize>,
}

impl Token for Counted<'_> {
    fn to_u64(self) -> u64 {
        self.reads.set(self.reads.get() + 1);
        u64::from(self.id)
    }
}

#[test]
fn taking_one_page_reads_only_that_page() {
    let reads = Cell::new(0);
    let tokens: Vec<Counted<'_>> = (0..100_000)
        .map(|id| Counted { id, reads: &reads })
        .collect();
    for eagle in [false, true] {
        reads.set(0);
        let mut pages = PageHashes::new(&tokens, 16, eagle, Namespace::NONE);
        assert_eq!(reads.get(), 0, "new hashes nothing");
        assert!(pages.page_count() >= 6000);
        let first = pages.next().expect("a first page");
        // Each raw token of the page is read for the wide check and for the body.
        assert!(
            reads.get() <= 4 * 17,
            "read {} tokens for one page",
            reads.get()
        );
        assert_eq!(pages.len(), pages.page_count() - 1);

        let plain: Vec<u32> = (0..100_000).collect();
        let expected = PageHashes::new(&plain, 16, eagle, Namespace::NONE).next();
        assert_eq!(Some(first), expected);
    }
}

#[test]
fn iterator_reports_exact_remaining_and_stays_done() {
    let tokens: Vec<u32> = (0..20).collect();
    let mut pages = PageHashes::new(&tokens, 5, false, Namespace::NONE);
    for left in (0..4).rev() {
        assert!(pages.next().is_some());
        assert_eq!(pages.size_hint(), (left, Some(left)));
    }
    assert_eq!(pages.next(), None);
    assert_eq!(pages.next(), None);
    assert_eq!(pages.page_count(), 4);
}

#[quickcheck]
fn u32_and_u64_tokens_hash_the_same(tokens: Vec<u32>, page_size: u8, eagle: bool) -> bool {
    let page_size = u32::from(page_size % 17);
    let wide: Vec<u64> = tokens.iter().map(|&t| u64::from(t)).collect();
    PageHashes::new(&tokens, page_size, eagle, Namespace::NONE).eq(PageHashes::new(
        &wide,
        page_size,
        eagle,
        Namespace::NONE,
    ))
}

#[quickcheck]
fn longer_input_extends_the_chain(
    tokens: Vec<u64>,
    cut: usize,
    page_size: u8,
    eagle: bool,
) -> bool {
    // Some tokens above u32::MAX exercise wide pages inside the chain.
    let page_size = u32::from(page_size % 9) + 1;
    let cut = if tokens.is_empty() {
        0
    } else {
        cut % (tokens.len() + 1)
    };
    let short: Vec<PageHash> =
        PageHashes::new(&tokens[..cut], page_size, eagle, Namespace::NONE).collect();
    let long: Vec<PageHash> = PageHashes::new(&tokens, page_size, eagle, Namespace::NONE).collect();
    long.len() >= short.len() && long[..short.len()] == short[..]
}

#[quickcheck]
fn namespaced_chain_is_the_plain_chain_after_a_seed(tokens: Vec<u32>, salt: String) -> bool {
    let ns = Namespace {
        extra_key: None,
        cache_salt: Some(&salt),
    };
    let seeded: Vec<PageHash> = PageHashes::new(&tokens, 3, false, ns).collect();
    let plain: Vec<PageHash> = PageHashes::new(&tokens, 3, false, Namespace::NONE).collect();
    // Same page count, and no namespaced page equals its plain twin; an empty salt is none.
    if salt.is_empty() {
        return seeded == plain;
    }
    seeded.len() == plain.len() && seeded.iter().zip(&plain).all(|(a, b)| a != b)
}
