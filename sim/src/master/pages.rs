//! What the store holds: pages ([`PageInfo`]) and objects ([`ObjInfo`]) by their numbers, the
//! requests that wrote them ([`Request`]), and the lookup hash of an object key.

use hicache_index::{Namespace, PageHash};

use crate::models::NAMESPACES;
#[cfg(doc)]
use crate::models::TENANTS;

/// An object's number, unique over the whole run (tenant and key).
pub type ObjId = u32;
/// A page's number, unique over the whole run (tenant, model, hash).
pub type PageId = u32;

/// One logical page ever written.
#[derive(Copy, Clone, Debug)]
pub struct PageInfo {
    /// Index into [`TENANTS`].
    pub tenant: u8,
    /// Index into the run's models.
    pub model: u8,
    /// The page hash.
    pub hash: PageHash,
    /// The first object; the page's objects are `first_obj..first_obj + objs`, in suffix order.
    pub first_obj: ObjId,
    /// How many objects the page has.
    pub objs: u16,
}

/// One physical object ever written.
#[derive(Clone, Debug)]
pub struct ObjInfo {
    /// Its page.
    pub page: PageId,
    /// The object key.
    pub key: Box<str>,
    /// The length of the logical key (the key without its suffix).
    pub logical_len: u16,
}

/// One request the workers served: its tokens and pages.
#[derive(Clone, Debug)]
pub struct Request {
    /// Index into [`TENANTS`].
    pub tenant: u8,
    /// Index into the run's models.
    pub model: u8,
    /// Index into [`NAMESPACES`], or none.
    pub namespace: Option<u8>,
    /// The tokens.
    pub tokens: Vec<u64>,
    /// Its full pages, in order.
    pub pages: Vec<PageId>,
}

impl Request {
    /// Returns the request's namespace.
    pub fn namespace(&self) -> Namespace<'static> {
        self.namespace
            .map_or(Namespace::NONE, |i| NAMESPACES[i as usize])
    }
}

/// The lookup hash of an object key.
pub(super) fn key_hash(key: &str) -> u64 {
    use core::hash::{Hash, Hasher};
    let mut h = crate::util::FxHasher::default();
    key.hash(&mut h);
    h.finish()
}
