//! Deterministic simulator for hicache-index (std side): encoders, a Mooncake master model, a
//! faulty network and a reference oracle.

pub mod encode;
pub mod reference;
