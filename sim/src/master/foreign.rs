//! Another application's keys in the default tenant: keys that are no HiCache page, put by a
//! second client and listed by `GET /get_all_keys` among the SGLang keys (spec section 6: keys
//! are verbatim, and a key may hold a `\n`).

use hicache_index::Medium;

use super::history::MasterOutput;
use super::messages::QKind;
use super::pages::PageId;
use super::state::Master;

/// The keys one flood call puts, at most.
const FLOOD_CALL: (u64, u64) = (100, 600);
/// Distinct key prefixes of other HiCache deployments: fewer than the index's namespace table
/// holds (1,024), so that a flood tests the key list and the stream, not the table's bound.
const OTHER_DEPLOYMENTS: u64 = 256;

impl Master {
    /// Puts one foreign key (a `stored` event with it); returns its id.
    pub(super) fn add_foreign(&mut self, key: String, out: &mut MasterOutput) -> u32 {
        let id = self.foreign_keys.len() as u32;
        let key = key.into_boxed_str();
        self.foreign_index.entry(key.clone()).or_default().push(id);
        self.foreign_keys.push(key);
        self.foreign_present.insert(id);
        self.stats.foreign_keys += 1;
        self.emit(QKind::ForeignStored, id, Some(Medium::Cpu), out);
        id
    }

    /// Removes one foreign key (a `removed` event with it).
    fn remove_foreign(&mut self, id: u32, out: &mut MasterOutput) {
        if self.foreign_present.remove(id) {
            self.emit(QKind::ForeignRemoved, id, Some(Medium::Cpu), out);
        }
    }

    /// One call of the other application's client: a batch of new keys of every shape, and,
    /// once it holds [`MasterOptions::foreign_per_object`](crate::options::MasterOptions)
    /// times the default tenant's SGLang objects (at least 16 objects' worth), as many
    /// removals of its older keys.
    pub(super) fn foreign_flood(&mut self, out: &mut MasterOutput) {
        let share = self.opts.foreign_per_object as usize * self.present[0].len().max(16);
        let n = self.rng.range(FLOOD_CALL.0, FLOOD_CALL.1);
        for _ in 0..n {
            if self.foreign_present.len() >= share {
                let i = self.rng.index(self.foreign_present.len());
                let id = self.foreign_present.get(i).expect("index within the set");
                self.remove_foreign(id, out);
            }
            let key = self.foreign_key();
            if self.foreign_index.contains_key(key.as_str()) {
                continue;
            }
            self.add_foreign(key, out);
        }
    }

    /// Draws one key of the other application: of another shape, HiCache-shaped of another
    /// deployment, or built around an SGLang key with a `\n`, a space or a `\r`.
    fn foreign_key(&mut self) -> String {
        let n = self.foreign_keys.len();
        let r = &mut self.rng;
        match r.below(12) {
            0 => format!("session:{}:state", r.below(1 << 20)),
            1 => format!("vllm/kv/{:016x}", r.next_u64()),
            2 => format!("ckpt/layer.{}/shard-{n}.bin", r.below(96)),
            3 => format!("{:016x}{:016x}", r.next_u64(), r.next_u64()),
            4 => format!("tmp file {n}"),
            5 => format!("模型-缓存-{n}"),
            6 | 7 => {
                // A HiCache key of another deployment (another model prefix): well formed.
                let app = r.below(OTHER_DEPLOYMENTS);
                let rank = r.below(4);
                format!(
                    "other-app-{app}_{:016x}{:016x}{:016x}{:016x}_{rank}_{}",
                    r.next_u64(),
                    r.next_u64(),
                    r.next_u64(),
                    r.next_u64(),
                    if r.chance(0.5) { "k" } else { "v" }
                )
            }
            8 => format!("job\n{n}\nstep {}", r.below(1000)),
            shape => {
                let Some(page) = self.some_default_page() else {
                    return format!("orphan-{n}");
                };
                let p = self.pages[page as usize];
                let obj = p.first_obj + self.rng.below(u64::from(p.objs)) as u32;
                let key = &self.objects[obj as usize].key;
                match (shape, self.rng.below(3)) {
                    (9, 0) => format!("x\n{key}"),
                    (9, 1) => format!("{key}\nx"),
                    (9, _) => format!("\n{key}"),
                    (10, 0) => format!("{key}\n"),
                    (10, _) => format!("{key} "),
                    _ => format!("{key}\r"),
                }
            }
        }
    }

    /// Returns a page of the default tenant ever written, if any (a few random tries).
    fn some_default_page(&mut self) -> Option<PageId> {
        if self.pages.is_empty() {
            return None;
        }
        (0..8).find_map(|_| {
            let page = self.rng.index(self.pages.len()) as PageId;
            (self.pages[page as usize].tenant == 0).then_some(page)
        })
    }
}
