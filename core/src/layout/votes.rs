//! Which layout is in force for each model its SGLang workers serve: the workers' votes, and the
//! verdict when they disagree.
//!
//! Every worker votes for the model it serves with the layout it advertises (or with why its
//! advertisement could not be read, or why it advertises none). A model's verdict is
//! [`ModelVerdict::Agreed`] when every worker that votes for it advertises the same keys
//! ([`Layout::same_keys`]: fields that do not change the keys, such as pool names and the order
//! of suffixes, take no part), [`ModelVerdict::NoLayout`] when none advertises a layout (SGLang
//! 0.5.23's MHA workers never do), and [`ModelVerdict::Conflict`] otherwise (a worker that
//! advertises none beside one that does too: its keys are unknown). A model without an agreed
//! layout answers misses; the other models are untouched. When the last worker of a model goes away, the model keeps its
//! last verdict (its pages keep their key form); the next worker to vote decides again.
//!
//! Every change of a verdict (a new layout in force, a conflict, a conflict resolved) bumps
//! [`LayoutVotes::generation`], which a query's plan carries: a query planned under one layout
//! is never answered under another.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::objects::{HitPolicy, Layout};

/// What one worker advertises for its model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Advertised {
    /// The layout it writes.
    Layout(Layout),
    /// Its advertisement could not be used (why, for a person): it counts as a disagreement.
    Unusable(String),
    /// It advertises no layout (why, for a person: SGLang 0.5.23's MHA workers never do). Its
    /// keys are unknown: beside workers that advertise a layout it counts as a disagreement,
    /// and a model none of whose workers advertises one has no layout.
    Nothing(String),
}

/// The verdict on one model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelVerdict {
    /// Every worker advertises these keys: the layout in force.
    Agreed(Layout),
    /// The workers disagree (or one cannot be read): the model answers misses.
    Conflict {
        /// Why, for a person (it names the workers).
        reason: String,
    },
    /// No worker advertises a layout: the model answers misses until one does.
    NoLayout {
        /// Why, for a person (it names a worker and what it said).
        reason: String,
    },
}

/// The workers' votes and the verdict on every model they named.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LayoutVotes {
    /// Worker name -> (model, what it advertises).
    votes: BTreeMap<String, (String, Advertised)>,
    /// Model -> its verdict (kept when its last worker leaves).
    verdicts: BTreeMap<String, ModelVerdict>,
    generation: u64,
}

impl Layout {
    /// Reports whether `self` and `other` name the same objects with the same hit policies: the
    /// page size, EAGLE mode, key prefix and the set of `(suffix, hit policy)` pairs. Pool
    /// names and the order of pools and suffixes do not change a key and are ignored.
    pub fn same_keys(&self, other: &Layout) -> bool {
        fn keys(layout: &Layout) -> Vec<(&str, HitPolicy)> {
            let mut keys: Vec<(&str, HitPolicy)> = layout.suffixes().collect();
            keys.sort_unstable_by(|a, b| a.0.cmp(b.0));
            keys
        }
        self.page_size == other.page_size
            && self.eagle == other.eagle
            && self.key_prefix == other.key_prefix
            && keys(self) == keys(other)
    }
}

/// Returns the verdict on the votes of one model's workers (at least one).
///
/// One rule: every worker advertises a layout, all with the same keys (agreed), or none
/// advertises one (no layout); anything else is a conflict, named by the first worker that
/// breaks the rule.
fn verdict_of(voters: &[(&String, &Advertised)]) -> ModelVerdict {
    let layout = voters.iter().find_map(|(w, a)| match a {
        Advertised::Layout(layout) => Some((*w, layout)),
        _ => None,
    });
    let Some((first_worker, layout)) = layout else {
        if let Some((worker, Advertised::Unusable(why))) = voters
            .iter()
            .find(|(_, a)| matches!(a, Advertised::Unusable(_)))
        {
            return ModelVerdict::Conflict {
                reason: format!("worker {worker}: {why}"),
            };
        }
        let (worker, advertised) = voters[0];
        let why = match advertised {
            Advertised::Nothing(why) => why.as_str(),
            _ => "advertises no layout",
        };
        return ModelVerdict::NoLayout {
            reason: format!("worker {worker}: {why}"),
        };
    };
    for (worker, advertised) in voters {
        match advertised {
            Advertised::Layout(other) if other.same_keys(layout) => {}
            Advertised::Layout(_) => {
                return ModelVerdict::Conflict {
                    reason: format!(
                        "workers {first_worker} and {worker} advertise layouts with different keys"
                    ),
                }
            }
            Advertised::Unusable(why) => {
                return ModelVerdict::Conflict {
                    reason: format!("worker {worker}: {why}"),
                }
            }
            Advertised::Nothing(why) => {
                return ModelVerdict::Conflict {
                    reason: format!(
                        "worker {worker}: {why}, while worker {first_worker} advertises one \
                         (the keys of {worker} are unknown)"
                    ),
                }
            }
        }
    }
    ModelVerdict::Agreed(layout.clone())
}

impl LayoutVotes {
    /// Makes an empty set of votes (no model known).
    pub fn new() -> LayoutVotes {
        LayoutVotes::default()
    }

    /// Records what `worker` advertises for `model` (`None`: the worker is gone or advertises
    /// no model), and returns whether any verdict changed.
    pub fn set(&mut self, worker: &str, vote: Option<(&str, Advertised)>) -> bool {
        let before = self.votes.get(worker).map(|(m, _)| m.clone());
        match vote {
            Some((model, advertised)) => {
                self.votes.insert(worker.into(), (model.into(), advertised));
            }
            None => {
                self.votes.remove(worker);
            }
        }
        let mut changed = false;
        let after = self.votes.get(worker).map(|(m, _)| m.clone());
        for model in [before, after].into_iter().flatten() {
            changed |= self.decide(&model);
        }
        if changed {
            self.generation += 1;
        }
        changed
    }

    /// Recomputes the verdict on `model`; returns whether it changed.
    fn decide(&mut self, model: &str) -> bool {
        let voters: Vec<(&String, &Advertised)> = self
            .votes
            .iter()
            .filter(|(_, (m, _))| m == model)
            .map(|(w, (_, advertised))| (w, advertised))
            .collect();
        if voters.is_empty() {
            // No worker left: the last verdict stays.
            return false;
        }
        let verdict = verdict_of(&voters);
        let changed = match (self.verdicts.get(model), &verdict) {
            (Some(ModelVerdict::Agreed(old)), ModelVerdict::Agreed(new)) => !old.same_keys(new),
            (Some(old), new) => old != new,
            (None, _) => true,
        };
        self.verdicts.insert(model.into(), verdict);
        changed
    }

    /// Returns the verdict on `model`, `None` if no worker ever named it.
    pub fn verdict(&self, model: &str) -> Option<&ModelVerdict> {
        self.verdicts.get(model)
    }

    /// Returns every model named so far with its verdict, in name order.
    pub fn verdicts(&self) -> impl Iterator<Item = (&str, &ModelVerdict)> + '_ {
        self.verdicts.iter().map(|(m, v)| (m.as_str(), v))
    }

    /// Returns how many workers vote for `model` now.
    pub fn voters(&self, model: &str) -> usize {
        self.votes.values().filter(|(m, _)| m == model).count()
    }

    /// Returns a number that changes whenever a verdict changes.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Pool, SglangParams};
    use alloc::vec;

    fn mha(tp: u32) -> Layout {
        Layout::from_sglang(&SglangParams::new(4, tp)).unwrap()
    }

    fn agreed(votes: &LayoutVotes, model: &str) -> Option<Layout> {
        match votes.verdict(model)? {
            ModelVerdict::Agreed(l) => Some(l.clone()),
            ModelVerdict::Conflict { .. } | ModelVerdict::NoLayout { .. } => None,
        }
    }

    #[test]
    fn workers_that_agree_put_their_layout_in_force() {
        let mut v = LayoutVotes::new();
        assert!(v.set("w1", Some(("m", Advertised::Layout(mha(2))))));
        assert!(!v.set("w2", Some(("m", Advertised::Layout(mha(2))))));
        assert_eq!(agreed(&v, "m"), Some(mha(2)));
        assert_eq!(v.voters("m"), 2);
        assert_eq!(v.verdict("n"), None);
    }

    #[test]
    fn a_disagreeing_worker_makes_only_its_model_a_conflict_until_it_goes_away() {
        let mut v = LayoutVotes::new();
        v.set("w1", Some(("m", Advertised::Layout(mha(2)))));
        v.set("w2", Some(("m", Advertised::Layout(mha(2)))));
        v.set("x", Some(("n", Advertised::Layout(mha(4)))));
        let g = v.generation();
        assert!(v.set("w2", Some(("m", Advertised::Layout(mha(1))))));
        assert!(v.generation() > g);
        match v.verdict("m") {
            Some(ModelVerdict::Conflict { reason }) => {
                assert!(reason.contains("w1") && reason.contains("w2"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(agreed(&v, "n"), Some(mha(4)));
        // The disagreeing worker goes away: the model is consistent again.
        assert!(v.set("w2", None));
        assert_eq!(agreed(&v, "m"), Some(mha(2)));
    }

    #[test]
    fn every_worker_changing_together_puts_the_new_layout_in_force_with_a_new_generation() {
        let mut v = LayoutVotes::new();
        v.set("w1", Some(("m", Advertised::Layout(mha(2)))));
        let g = v.generation();
        assert!(v.set("w1", Some(("m", Advertised::Layout(mha(4))))));
        assert_eq!(agreed(&v, "m"), Some(mha(4)));
        assert!(v.generation() > g);
    }

    #[test]
    fn an_unusable_advertisement_is_a_conflict() {
        let mut v = LayoutVotes::new();
        v.set("w1", Some(("m", Advertised::Layout(mha(2)))));
        v.set(
            "w2",
            Some(("m", Advertised::Unusable("pp rank 1 missing".into()))),
        );
        match v.verdict("m") {
            Some(ModelVerdict::Conflict { reason }) => {
                assert!(reason.contains("pp rank 1 missing"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_model_whose_workers_all_advertise_nothing_has_no_layout_with_the_reason() {
        let mut v = LayoutVotes::new();
        assert!(v.set("w1", Some(("m", Advertised::Nothing("MHA".into())))));
        assert!(!v.set("w2", Some(("m", Advertised::Nothing("MHA".into())))));
        match v.verdict("m") {
            Some(ModelVerdict::NoLayout { reason }) => {
                assert!(reason.contains("w1") && reason.contains("MHA"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        // One worker learns to advertise a layout: the other's keys are unknown.
        assert!(v.set("w2", Some(("m", Advertised::Layout(mha(2))))));
        match v.verdict("m") {
            Some(ModelVerdict::Conflict { reason }) => {
                assert!(
                    reason.contains("w1") && reason.contains("unknown"),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
        // Both do: agreed.
        assert!(v.set("w1", Some(("m", Advertised::Layout(mha(2))))));
        assert_eq!(agreed(&v, "m"), Some(mha(2)));
    }

    #[test]
    fn the_last_worker_leaving_keeps_the_verdict() {
        let mut v = LayoutVotes::new();
        v.set("w1", Some(("m", Advertised::Layout(mha(2)))));
        assert!(!v.set("w1", None));
        assert_eq!(agreed(&v, "m"), Some(mha(2)));
        assert_eq!(v.voters("m"), 0);
    }

    #[test]
    fn a_worker_moving_to_another_model_leaves_its_old_model() {
        let mut v = LayoutVotes::new();
        v.set("w1", Some(("m", Advertised::Layout(mha(2)))));
        v.set("w2", Some(("m", Advertised::Layout(mha(1)))));
        assert!(matches!(
            v.verdict("m"),
            Some(ModelVerdict::Conflict { .. })
        ));
        v.set("w2", Some(("n", Advertised::Layout(mha(1)))));
        assert_eq!(agreed(&v, "m"), Some(mha(2)));
        assert_eq!(agreed(&v, "n"), Some(mha(1)));
    }

    #[test]
    fn pool_names_and_suffix_order_take_no_part_in_the_comparison() {
        let a = mha(2);
        let mut b = a.clone();
        b.pools[0].name = "kv_renamed".into();
        b.pools[0].suffixes.reverse();
        assert!(a.same_keys(&b));
        let mut split = a.clone();
        let moved = split.pools[0].suffixes.pop().unwrap();
        split.pools.push(Pool::all_pages("other", vec![moved]));
        assert!(a.same_keys(&split), "the same objects, all pages");
        let mut trailing = a.clone();
        let moved = trailing.pools[0].suffixes.pop().unwrap();
        trailing.pools.push(Pool {
            name: "t".into(),
            suffixes: vec![moved],
            hit_policy: HitPolicy::TrailingPages(1),
        });
        assert!(!a.same_keys(&trailing), "a hit policy decides hits");
        let mut prefixed = a.clone();
        prefixed.key_prefix = Some("p".into());
        assert!(!a.same_keys(&prefixed));
        assert!(!a.same_keys(&a.clone().with_eagle(true)));
    }
}
