//! The shared scenarios on the tokio transport, against the emulated master and the Python
//! publisher (see `hicache-index-testkit`).

hicache_index_testkit::scenario_tests!(hicache_index_testkit::runtimes::Tokio);
