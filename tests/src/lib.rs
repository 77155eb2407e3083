//! Integration tests across the hicache-index crates live in `tests/`.
