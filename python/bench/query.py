"""A query through Python against the same query in Rust, 256 pages, page hashes given as 32-byte
bytes (their conversion inside the timed Python call). Prints both; asserts nothing.
Run from the repository root: target/python-venv/bin/python python/bench/query.py"""

import sys
import time

sys.path[0] = __import__("os").path.join(__import__("os").path.dirname(__file__), "..", "tests")
import hicache_index as hi  # noqa: E402
from conftest import Master, eventually  # noqa: E402

N = 20000
master = Master()
layout = hi.Layout(page_size=4, tp=2)
hashes = hi.page_hashes(list(range(4 * 256)), 4)
with hi.Index(master.events, page_size=4, tp=2) as index:
    index.wait_live(20)
    master.store_pages(layout, hashes)
    eventually(lambda: index.query(page_hashes=hashes).prefix_pages == 256)
    for _ in range(1000):
        index.query(page_hashes=hashes)
    start = time.perf_counter()
    for _ in range(N):
        index.query(page_hashes=hashes)
    python = (time.perf_counter() - start) / N
    answered, bare = hi._native.bench_rust(index, hashes, N)
    print(f"python Index.query:        {python * 1e6:8.2f} us")
    print(f"rust answer_lookup (same): {answered * 1e6:8.2f} us  ratio {python / answered:.2f}x")
    print(f"rust query_prefix_map:     {bare * 1e6:8.2f} us  ratio {python / bare:.2f}x")
master.close()
