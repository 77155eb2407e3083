//! Unit tests of `serve`: which nng URLs are local.

use super::plan::nng_is_local;

#[test]
fn only_ipc_and_loopback_nng_urls_are_local() {
    for local in [
        "ipc:///tmp/x.ipc",
        "tcp://127.0.0.1:9101",
        "tcp://localhost:9101",
    ] {
        assert!(nng_is_local(local), "{local}");
    }
    for open in [
        "tcp://0.0.0.0:9101",
        "tcp://10.1.2.3:9101",
        "ws://127.0.0.1:1",
    ] {
        assert!(!nng_is_local(open), "{open}");
    }
}
