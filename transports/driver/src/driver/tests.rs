//! Unit tests of the driver: a key list handed over in chunks.

use hicache_index::SnapshotRequest;

use super::*;

#[test]
fn key_lists_handed_over_in_chunks_are_split_like_the_whole_body() {
    let bodies: [&[u8]; 9] = [
        b"",
        b"\n",
        b"\n\n",
        b"a",
        b"a\n",
        b"a\n\n",
        b"a\nb",
        b" a \r\n\nb\n\n\n",
        b"\na\n\xff\n",
    ];
    for body in bodies {
        let whole: Vec<&[u8]> = hicache_index::snapshot_lines(body).collect();
        for max in 1..4 {
            let mut h = Handover::new(SnapshotRequest(1), body.to_vec());
            let mut chunked: Vec<Vec<u8>> = Vec::new();
            while !h.is_done() {
                let before = chunked.len();
                chunked.extend(h.lines(max).map(<[u8]>::to_vec));
                assert!(chunked.len() - before <= max);
            }
            assert!(h.lines(max).next().is_none());
            assert_eq!(chunked, whole, "{body:?} in chunks of {max}");
        }
    }
}
