//! Query inputs and answers: which leading pages of a request are fully present.

use crate::effect::Health;
use crate::hash::{Namespace, PageHash};
pub use crate::index::MapCover;
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
