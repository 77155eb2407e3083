//! The pools of a model as suffix ranges with their hit policies ([`PoolPlan`]).

use hicache_index::HitPolicy;

use crate::models::ModelSpec;

/// The pools of a model as suffix ranges with their policies.
#[derive(Copy, Clone, Debug)]
pub(super) struct PoolPlan {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) policy: HitPolicy,
}

pub(super) fn pool_plans(spec: &ModelSpec) -> Vec<PoolPlan> {
    let mut at = 0;
    spec.layout
        .pools
        .iter()
        .map(|p| {
            let (start, end) = (at, at + p.suffixes.len());
            at = end;
            PoolPlan {
                start,
                end,
                policy: p.hit_policy,
            }
        })
        .collect()
}
