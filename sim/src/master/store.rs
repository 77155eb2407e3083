//! The object store: what is present, how a put writes a request's objects, evictions, silent
//! removals and a foreign client's keys (the pages and objects themselves: `master/pages.rs`).

use std::rc::Rc;

use hicache_index::{HitPolicy, Medium, Namespace, PageHash};

use crate::models::NAMESPACES;
use crate::rng::Rng;
use crate::util::IdSet;

use super::history::{Change, MasterOutput};
use super::messages::QKind;
use super::pages::{key_hash, ObjId, ObjInfo, PageId, PageInfo, Request};
use super::state::{Master, DISK, MEM};

const RECENT_REQUESTS: usize = 512;
/// The most foreign keys the master holds at once.
const MAX_FOREIGN: usize = 48;
const MAX_REQUEST_PAGES: usize = 40;

impl Master {
    pub(super) fn foreign_put(&mut self, out: &mut MasterOutput) {
        let mut rng = self.rng.clone();
        let page = (0..8).find_map(|_| {
            let req = self.recent_request(&mut rng)?;
            let pages = &req.pages;
            (req.tenant == 0 && !pages.is_empty()).then(|| pages[rng.index(pages.len())])
        });
        self.rng = rng;
        let Some(page) = page else {
            return;
        };
        for obj in self.page_objects(page) {
            let key = &self.objects[obj as usize].key;
            let odd = match self.rng.below(4) {
                0 => format!("{key} "),
                1 => format!("{key}\r"),
                2 => format!("x\n{key}"),
                _ => format!("\n{key}"),
            };
            self.add_foreign(odd, out);
        }
        while self.foreign_present.len() > MAX_FOREIGN {
            let i = self.rng.index(self.foreign_present.len());
            let id = self.foreign_present.get(i).expect("index within the set");
            self.foreign_present.remove(id);
            self.emit(QKind::ForeignRemoved, id, Some(Medium::Cpu), out);
        }
    }

    pub(super) fn page_objects(&self, page: PageId) -> std::ops::Range<ObjId> {
        let p = &self.pages[page as usize];
        p.first_obj..p.first_obj + u32::from(p.objs)
    }

    /// Picks a present object whose replica flags pass `want` (a few random tries).
    pub(super) fn pick_present(&mut self, want: impl Fn(u8) -> bool) -> Option<ObjId> {
        let total: usize = self.present.iter().map(IdSet::len).sum();
        if total == 0 {
            return None;
        }
        for _ in 0..8 {
            let mut i = self.rng.index(total);
            for set in &self.present {
                if i < set.len() {
                    let obj = set.get(i).expect("index within the set");
                    if want(self.flags[obj as usize]) {
                        return Some(obj);
                    }
                    break;
                }
                i -= set.len();
            }
        }
        None
    }

    pub(super) fn tenant_of(&self, obj: ObjId) -> u8 {
        self.pages[self.objects[obj as usize].page as usize].tenant
    }

    pub(super) fn take_away(&mut self, obj: ObjId) {
        self.flags[obj as usize] = 0;
        let t = self.tenant_of(obj) as usize;
        self.present[t].remove(obj);
    }

    /// Evicts an object from every medium. An older master sends one `removed` once no replica is
    /// left (medium `cpu`, whatever the last one was); with
    /// [`MasterOptions::per_medium_removals`](crate::options::MasterOptions::per_medium_removals)
    /// one per medium it had (`cpu` first), the last one taking the object away.
    pub(super) fn evict(&mut self, obj: ObjId, out: &mut MasterOutput) {
        let flags = self.flags[obj as usize];
        self.take_away(obj);
        if !self.opts.per_medium_removals {
            self.emit(QKind::Removed, obj, Some(Medium::Cpu), out);
        } else if flags == MEM | DISK {
            self.emit(QKind::RemovedMedium, obj, Some(Medium::Cpu), out);
            self.emit(QKind::Removed, obj, Some(Medium::Disk), out);
        } else if flags == DISK {
            self.emit(QKind::Removed, obj, Some(Medium::Disk), out);
        } else {
            self.emit(QKind::Removed, obj, Some(Medium::Cpu), out);
        }
    }

    /// Removes an object without an event; the master's unmount counter moves (see
    /// [`Master::silent_signals`]).
    pub(super) fn vanish(&mut self, obj: ObjId, out: &mut MasterOutput) {
        self.take_away(obj);
        self.stats.silent_removals += 1;
        self.signalled_removals += 1;
        self.record(Change::SilentlyRemoved { obj }, out);
    }

    pub(super) fn put(&mut self, out: &mut MasterOutput) {
        self.stats.puts += 1;
        out.put = true;
        let request = self.make_request();
        let model = &self.models[request.model as usize];
        let trailing: Vec<bool> = model
            .policies
            .iter()
            .map(|p| matches!(p, HitPolicy::TrailingPages(_)))
            .collect();
        let last = request.pages.len().saturating_sub(1);
        for (i, &page) in request.pages.iter().enumerate() {
            let first = self.pages[page as usize].first_obj;
            for (j, &is_trailing) in trailing.iter().enumerate() {
                if is_trailing && i != last && self.rng.chance(0.5) {
                    continue;
                }
                let obj = first + j as u32;
                if self.flags[obj as usize] == 0 {
                    self.flags[obj as usize] = MEM;
                    self.segment[obj as usize] = match self.clients.as_mut() {
                        Some(c) => c.place(),
                        None => self.rng.below(u64::from(self.opts.segments.max(1))) as u8,
                    };
                    self.present[request.tenant as usize].insert(obj);
                    self.emit(QKind::Stored, obj, Some(Medium::Cpu), out);
                }
            }
        }
        if self.requests.len() >= RECENT_REQUESTS {
            self.requests.pop_front();
        }
        self.requests.push_back(Rc::new(request));
        // Stay under capacity by evicting (with events), as memory pressure does.
        let total: usize = self.present.iter().map(IdSet::len).sum();
        let over = total.saturating_sub(self.opts.capacity_objects.max(1));
        for _ in 0..over {
            if let Some(obj) = self.pick_present(|_| true) {
                self.evict(obj, out);
            }
        }
    }

    /// Returns a recent request, biased towards the newest.
    pub fn recent_request(&self, rng: &mut Rng) -> Option<&Rc<Request>> {
        let n = self.requests.len();
        if n == 0 {
            return None;
        }
        let back = if rng.chance(0.7) {
            rng.index(n.min(32))
        } else {
            rng.index(n)
        };
        self.requests.get(n - 1 - back)
    }

    pub(super) fn new_token(&mut self) -> u64 {
        if self.opts.wide_tokens && self.rng.chance(0.01) {
            u64::from(u32::MAX) + self.rng.range(1, 1_000)
        } else {
            self.rng.range(1, 50_000)
        }
    }

    pub(super) fn make_request(&mut self) -> Request {
        let mode = self.rng.below(10);
        let mut rng = self.rng.clone();
        let parent = if mode < 7 {
            self.recent_request(&mut rng).map(|r| (**r).clone())
        } else {
            None
        };
        self.rng = rng;
        let (tenant, model, namespace, mut tokens) = match parent {
            Some(p) => {
                let ps = self.models[p.model as usize].layout.page_size as usize;
                let mut tokens = p.tokens;
                if mode >= 4 {
                    // A branch: keep a prefix of whole pages.
                    let cut = self.rng.index(tokens.len() / ps + 1) * ps;
                    tokens.truncate(cut);
                }
                (p.tenant, p.model, p.namespace, tokens)
            }
            None => {
                let tenant = self.rng.index(self.opts.tenants) as u8;
                let model = self.rng.index(self.models.len()) as u8;
                let namespace = (self.opts.namespaces && self.rng.chance(0.3))
                    .then(|| self.rng.index(NAMESPACES.len()) as u8);
                let prompts = &self.prompts[model as usize];
                let tokens = prompts[self.rng.index(prompts.len())].clone();
                (tenant, model, namespace, tokens)
            }
        };
        let layout = &self.models[model as usize].layout;
        let ps = layout.page_size as usize;
        if tokens.len() / ps + 8 > MAX_REQUEST_PAGES {
            let prompts = &self.prompts[model as usize];
            tokens = prompts[self.rng.index(prompts.len())].clone();
        }
        let (lo, hi) = self.opts.pages_per_put;
        let new = ps * self.rng.range(u64::from(lo), u64::from(hi)) as usize + self.rng.index(ps);
        for _ in 0..new {
            let t = self.new_token();
            tokens.push(t);
        }
        let ns = namespace.map_or(Namespace::NONE, |i| NAMESPACES[i as usize]);
        let hashes: Vec<PageHash> = self.models[model as usize]
            .layout
            .page_hashes(&tokens, ns)
            .collect();
        let pages = hashes
            .into_iter()
            .map(|h| self.page_id(tenant, model, h))
            .collect();
        Request {
            tenant,
            model,
            namespace,
            tokens,
            pages,
        }
    }

    /// Returns the page's id, registering the page and its objects on first sight.
    pub(super) fn page_id(&mut self, tenant: u8, model: u8, hash: PageHash) -> PageId {
        if let Some(&id) = self.page_index.get(&(tenant, model, hash)) {
            return id;
        }
        let id = self.pages.len() as PageId;
        let first_obj = self.objects.len() as ObjId;
        let spec = &self.models[model as usize];
        spec.layout.write_logical_key(&hash, &mut self.scratch);
        let logical_len = self.scratch.len();
        for suffix in &spec.suffixes {
            let obj = self.objects.len() as ObjId;
            let mut key = String::with_capacity(logical_len + suffix.len());
            key.push_str(&self.scratch);
            key.push_str(suffix);
            if tenant == 0 {
                self.default_keys.insert(key_hash(&key), obj);
            }
            self.objects.push(ObjInfo {
                page: id,
                logical_len: logical_len as u16,
                key: key.into_boxed_str(),
            });
            self.flags.push(0);
            self.segment.push(0);
        }
        self.pages.push(PageInfo {
            tenant,
            model,
            hash,
            first_obj,
            objs: spec.suffixes.len() as u16,
        });
        self.page_index.insert((tenant, model, hash), id);
        id
    }

    /// Returns the object of `tenant` with `key`, if it was ever written.
    pub fn find_object(&self, tenant: u8, key: &str) -> Option<ObjId> {
        let parsed = hicache_index::parse_object_key(key)?;
        self.models.iter().enumerate().find_map(|(m, spec)| {
            if spec.layout.key_prefix.as_deref() != parsed.prefix {
                return None;
            }
            let slot = spec.suffixes.iter().position(|s| s == parsed.suffix)?;
            let page = self.find_page(tenant, m as u8, &parsed.page_hash)?;
            Some(self.pages[page as usize].first_obj + slot as u32)
        })
    }

    /// Returns the page of `(tenant, model, hash)` if it was ever written.
    pub fn find_page(&self, tenant: u8, model: u8, hash: &PageHash) -> Option<PageId> {
        self.page_index.get(&(tenant, model, *hash)).copied()
    }
}
