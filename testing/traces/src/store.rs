//! The store model: a Mooncake store of fixed capacity in objects, evicting the least recently
//! used object (per object, so a page can lose some of its objects and stay partly present).
//!
//! Mooncake's master evicts by lease and access time once usage passes a watermark; the model
//! keeps its order (least recently used first) and makes it exact: an object is used when it is
//! put and when a request loads its page from the store. A request's pages are loaded at its
//! arrival (the leading pages whose every object is present: what SGLang fetches from L3) and
//! put after its prefill (every object of its full pages that is absent; a put of a present
//! key fails in Mooncake, touches nothing and sends no event).

use std::collections::VecDeque;

use hicache_index::EventKind;

use crate::blocks::PageId;

/// An object's number: `page * objects_per_page + its index in the layout's suffixes`.
pub type ObjId = u32;

/// One change of the store, in order: what the master publishes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// `Stored` or `Removed`.
    pub kind: EventKind,
    /// The object.
    pub object: ObjId,
}

/// The store (see the module docs).
#[derive(Debug)]
pub struct Store {
    objects_per_page: u32,
    capacity: usize,
    /// The last use of each object; 0: absent.
    used: Vec<u32>,
    /// Objects by use, oldest first, with the use they were queued at (an entry whose object
    /// was used again since, or left, is skipped).
    queue: VecDeque<(ObjId, u32)>,
    clock: u32,
    len: usize,
    /// Objects present of each page.
    present: Vec<u16>,
    /// Pages with at least one object present, now and at most.
    pages_held: usize,
    peak_pages_held: usize,
    evicted: u64,
}

impl Store {
    /// Makes an empty store of `capacity` objects for pages below `page_bound`, each of
    /// `objects_per_page` objects.
    ///
    /// # Panics
    /// If `capacity` is 0 or the objects cannot be numbered in 32 bits.
    pub fn new(capacity: usize, page_bound: usize, objects_per_page: u32) -> Store {
        assert!(capacity > 0, "a store holds something");
        let objects = page_bound * objects_per_page as usize;
        assert!(
            objects < u32::MAX as usize,
            "objects are numbered in 32 bits"
        );
        Store {
            objects_per_page,
            capacity,
            used: vec![0; objects],
            queue: VecDeque::new(),
            clock: 0,
            len: 0,
            present: vec![0; page_bound],
            pages_held: 0,
            peak_pages_held: 0,
            evicted: 0,
        }
    }

    /// Returns the capacity in objects.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Returns how many objects are present.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Reports whether no object is present.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Returns the most pages that held at least one object at once.
    pub fn peak_pages_held(&self) -> usize {
        self.peak_pages_held
    }

    /// Returns how many objects were evicted.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Reports whether every object of `page` is present.
    pub fn is_page_present(&self, page: PageId) -> bool {
        u32::from(self.present[page as usize]) == self.objects_per_page
    }

    /// Returns how many leading `pages` are present.
    pub fn present_prefix(&self, pages: &[PageId]) -> usize {
        pages
            .iter()
            .take_while(|&&p| self.is_page_present(p))
            .count()
    }

    /// Uses every object of `pages` (a load from the store), most recent last.
    pub fn load(&mut self, pages: &[PageId]) {
        for &page in pages {
            for object in self.objects(page) {
                debug_assert!(self.used[object as usize] != 0, "only present pages load");
                self.touch(object);
            }
        }
    }

    /// Puts every absent object of `pages`, evicting the least recently used objects to make
    /// room; appends the changes, in order, to `out`.
    pub fn put(&mut self, pages: &[PageId], out: &mut Vec<Change>) {
        for &page in pages {
            for object in self.objects(page) {
                if self.used[object as usize] != 0 {
                    continue;
                }
                while self.len >= self.capacity {
                    self.evict_one(out);
                }
                self.len += 1;
                let held = &mut self.present[page as usize];
                *held += 1;
                if *held == 1 {
                    self.pages_held += 1;
                    self.peak_pages_held = self.peak_pages_held.max(self.pages_held);
                }
                self.touch(object);
                out.push(Change {
                    kind: EventKind::Stored,
                    object,
                });
            }
        }
    }

    fn objects(&self, page: PageId) -> std::ops::Range<ObjId> {
        let first = page * self.objects_per_page;
        first..first + self.objects_per_page
    }

    fn touch(&mut self, object: ObjId) {
        self.clock = self.clock.checked_add(1).expect("fewer than 2^32 uses");
        self.used[object as usize] = self.clock;
        self.queue.push_back((object, self.clock));
        if self.queue.len() > 2 * self.capacity + 4096 {
            // Drop the entries of objects used again since or gone: amortised O(1) a use.
            let used = &self.used;
            self.queue.retain(|&(o, at)| used[o as usize] == at);
        }
    }

    fn evict_one(&mut self, out: &mut Vec<Change>) {
        loop {
            let (object, at) = self
                .queue
                .pop_front()
                .expect("a full store queues its objects");
            if self.used[object as usize] != at {
                continue;
            }
            self.used[object as usize] = 0;
            self.len -= 1;
            self.evicted += 1;
            let page = (object / self.objects_per_page) as usize;
            self.present[page] -= 1;
            if self.present[page] == 0 {
                self.pages_held -= 1;
            }
            out.push(Change {
                kind: EventKind::Removed,
                object,
            });
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_object_goes_first_and_leaves_its_page_partial() {
        // Two objects a page, room for three objects.
        let mut store = Store::new(3, 4, 2);
        let mut out = Vec::new();
        store.put(&[0], &mut out);
        store.put(&[1], &mut out);
        assert_eq!(
            out.len(),
            5,
            "objects 0..4 stored, object 0 evicted: {out:?}"
        );
        assert_eq!(
            out[3],
            Change {
                kind: EventKind::Removed,
                object: 0
            }
        );
        assert!(!store.is_page_present(0) && store.is_page_present(1));
        assert_eq!(store.present_prefix(&[1, 0]), 1);
        // Loading page 1 makes page 0's object 1 the oldest.
        store.load(&[1]);
        out.clear();
        store.put(&[2], &mut out);
        let removed: Vec<ObjId> = out
            .iter()
            .filter(|c| c.kind == EventKind::Removed)
            .map(|c| c.object)
            .collect();
        assert_eq!(removed, [1, 2], "page 0's last object, then page 1's first");
        assert_eq!(store.len(), 3);
        assert_eq!(store.evicted(), 3);
    }
}
