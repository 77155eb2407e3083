//! Query inputs and answers: which leading pages of a request are fully present.

use alloc::vec::Vec;

use crate::effect::Health;
use crate::hash::{page_count, DigestMemo, Namespace, PageHash, PageHashes};
use crate::index::DEFAULT_TENANT;

/// A request's tokens, in either width (ids above `u32::MAX` hash in SGLang's wide form).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Tokens<'a> {
    /// 32-bit token ids (the common case).
    U32(&'a [u32]),
    /// 64-bit token ids.
    U64(&'a [u64]),
}

impl Tokens<'_> {
    /// Returns the number of tokens.
    pub fn len(&self) -> usize {
        match self {
            Tokens::U32(t) => t.len(),
            Tokens::U64(t) => t.len(),
        }
    }

    /// Reports whether there are no tokens.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a query asks about: tokens to hash, or page hashes already computed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Pages<'a> {
    /// Tokens, hashed page by page as the query goes (stopping at the first miss).
    Tokens {
        /// The tokens.
        tokens: Tokens<'a>,
        /// The request's namespace (`extra_key`, `cache_salt`); [`Namespace::NONE`] for none.
        namespace: Namespace<'a>,
    },
    /// Page hashes, in order from the first page.
    Hashes(&'a [PageHash]),
}

/// One question to the index.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Lookup<'a> {
    /// The tenant (`"default"` unless the master runs multi-tenant).
    pub tenant: &'a str,
    /// The model whose layout applies; `None` for the one configured layout.
    pub model: Option<&'a str>,
    /// The pages asked about.
    pub pages: Pages<'a>,
}

impl<'a> Lookup<'a> {
    /// Asks about 32-bit tokens in the default tenant, with the default layout and no namespace.
    pub fn tokens(tokens: &'a [u32]) -> Lookup<'a> {
        Lookup {
            tenant: DEFAULT_TENANT,
            model: None,
            pages: Pages::Tokens {
                tokens: Tokens::U32(tokens),
                namespace: Namespace::NONE,
            },
        }
    }

    /// Asks about 64-bit tokens in the default tenant, with the default layout and no namespace.
    pub fn tokens_u64(tokens: &'a [u64]) -> Lookup<'a> {
        Lookup {
            tenant: DEFAULT_TENANT,
            model: None,
            pages: Pages::Tokens {
                tokens: Tokens::U64(tokens),
                namespace: Namespace::NONE,
            },
        }
    }

    /// Asks about page hashes in the default tenant, with the default layout.
    pub fn page_hashes(hashes: &'a [PageHash]) -> Lookup<'a> {
        Lookup {
            tenant: DEFAULT_TENANT,
            model: None,
            pages: Pages::Hashes(hashes),
        }
    }

    /// Sets the tenant.
    pub fn with_tenant(self, tenant: &'a str) -> Lookup<'a> {
        Lookup { tenant, ..self }
    }

    /// Sets the model whose layout applies.
    pub fn with_model(self, model: &'a str) -> Lookup<'a> {
        Lookup {
            model: Some(model),
            ..self
        }
    }

    /// Sets the request's namespace (ignored for page hashes).
    pub fn with_namespace(self, namespace: Namespace<'a>) -> Lookup<'a> {
        match self.pages {
            Pages::Tokens { tokens, .. } => Lookup {
                pages: Pages::Tokens { tokens, namespace },
                ..self
            },
            Pages::Hashes(_) => self,
        }
    }
}

/// The answer to a [`Lookup`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Hits {
    /// How many leading pages are fully present (honouring trailing-page policies). A router
    /// may reuse exactly these pages.
    pub prefix_pages: usize,
    /// Full pages in the request.
    pub total_pages: usize,
    /// Pages hashed and probed (prefix queries stop after the first miss).
    pub pages_checked: usize,
    /// Of the prefix pages, how many were seen with a memory replica.
    pub memory_pages: usize,
    /// Of the prefix pages, how many were seen only on disk.
    pub disk_only_pages: usize,
    /// The session's health when it answered.
    pub trust: Health,
}

/// How a token query's pages are hashed: the page size and mode of the layout its lookup
/// resolves to, fixed when the query was planned ([`crate::Session::plan`]).
///
/// A query hashes under its plan outside any lock ([`QueryPlan::hashes`]) and then probes
/// ([`crate::Session::probe`]), which refuses a plan that no longer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryPlan {
    /// Tokens a page (bigrams with EAGLE).
    pub page_size: u32,
    /// Whether pages are made of EAGLE bigrams.
    pub eagle: bool,
    /// The generation of the advertised layouts when the query was planned: a layout put in
    /// force since (even with the same page size) makes the plan stale.
    pub layouts: u64,
}

impl QueryPlan {
    /// Returns how many full pages `tokens` make under this plan.
    pub fn page_count(&self, tokens: Tokens<'_>) -> usize {
        page_count(tokens.len(), self.page_size, self.eagle)
    }

    /// Returns the page hashes of `tokens`, computed lazily as they are asked for.
    pub fn hashes<'t>(&self, tokens: Tokens<'t>, namespace: Namespace<'_>) -> PlanHashes<'t> {
        match tokens {
            Tokens::U32(t) => {
                PlanHashes::U32(PageHashes::new(t, self.page_size, self.eagle, namespace))
            }
            Tokens::U64(t) => {
                PlanHashes::U64(PageHashes::new(t, self.page_size, self.eagle, namespace))
            }
        }
    }
}

/// The page hashes of a token query under its [`QueryPlan`], in either token width.
#[derive(Clone, Debug)]
pub enum PlanHashes<'t> {
    /// 32-bit tokens.
    U32(PageHashes<'t, u32>),
    /// 64-bit tokens.
    U64(PageHashes<'t, u64>),
}

impl PlanHashes<'_> {
    /// Returns the number of full pages, hashed or not.
    pub fn page_count(&self) -> usize {
        match self {
            PlanHashes::U32(p) => p.page_count(),
            PlanHashes::U64(p) => p.page_count(),
        }
    }

    /// Hashes the next page, asking `memo` first (see [`PageHashes::next_with`]).
    pub fn next_with<M: DigestMemo + ?Sized>(&mut self, memo: &M) -> Option<PageHash> {
        match self {
            PlanHashes::U32(p) => p.next_with(memo),
            PlanHashes::U64(p) => p.next_with(memo),
        }
    }
}

impl Iterator for PlanHashes<'_> {
    type Item = PageHash;

    fn next(&mut self) -> Option<PageHash> {
        match self {
            PlanHashes::U32(p) => p.next(),
            PlanHashes::U64(p) => p.next(),
        }
    }
}

/// Which pages a query's per-page map covers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MapCover {
    /// The pages checked until the first that misses one of its objects, that page included
    /// (the rest of the map is false): hashing and probing stop there, as for a query without
    /// a map. What a router needs (the prefix), at the cost of the prefix.
    #[default]
    UntilMiss,
    /// Every page up to the map's length, hashed and probed whatever misses before it.
    Every,
}

/// A token query's page hashes under its [`QueryPlan`], computed one at a time as the probe
/// asks for them (through a memo) and kept: a probe that reads the index again (the writer
/// moved under it) hashes no page twice, and a probe that stops at a miss hashed no page after
/// it (see [`crate::Reader::probe_lazily`]).
pub struct LazyHashes<'t, 'k, 'm, M: DigestMemo + ?Sized> {
    pages: PlanHashes<'t>,
    kept: &'k mut Vec<PageHash>,
    memo: &'m M,
}

impl<'t, 'k, 'm, M: DigestMemo + ?Sized> LazyHashes<'t, 'k, 'm, M> {
    /// Prepares to hash `tokens` under `plan`, asking `memo` first for each page and keeping
    /// the hashes in `kept` (cleared here; reuse one buffer so that a query does not allocate).
    pub fn new(
        plan: &QueryPlan,
        tokens: Tokens<'t>,
        namespace: Namespace<'_>,
        kept: &'k mut Vec<PageHash>,
        memo: &'m M,
    ) -> LazyHashes<'t, 'k, 'm, M> {
        kept.clear();
        LazyHashes {
            pages: plan.hashes(tokens, namespace),
            kept,
            memo,
        }
    }

    /// Returns the hashes computed so far, in page order.
    pub fn hashed(&self) -> &[PageHash] {
        self.kept
    }

    /// Returns the number of full pages, hashed or not.
    pub fn page_count(&self) -> usize {
        self.pages.page_count()
    }
}

/// Pages a probe reads in order, by position: the object-safe face of [`LazyHashes`].
pub(crate) trait PageSource {
    /// Returns the hash of page `i`, computing it if it is the next one; `None` past the last.
    fn page(&mut self, i: usize) -> Option<PageHash>;
}

impl<M: DigestMemo + ?Sized> PageSource for LazyHashes<'_, '_, '_, M> {
    fn page(&mut self, i: usize) -> Option<PageHash> {
        if let Some(kept) = self.kept.get(i) {
            return Some(*kept);
        }
        debug_assert_eq!(i, self.kept.len(), "pages are asked for in order");
        let page = self.pages.next_with(self.memo)?;
        self.kept.push(page);
        Some(page)
    }
}
