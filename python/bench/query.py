"""A query through Python against the same query in Rust, and Python threads querying at once.

256 pages, all present, page hashes given as a list of 32-byte `bytes` (their conversion inside
the timed Python call), against the project's emulated master on 127.0.0.1. Prints the figures;
asserts nothing. Run from the repository root after `.ci/python` (the release wheel in
target/python-venv, the emulator in target/debug):

    target/python-venv/bin/python python/bench/query.py [--rounds 9] [--queries 5000]

1. One thread: rounds of N queries through `Index.query`, each followed by N of the same query
   in Rust (`_native.bench_rust`: the same answer path, hashes converted once beforehand, the
   GIL released). Both are timed in wall time and in the thread's CPU time (which a busy
   machine disturbs less); the best round of each is compared, so a burst of other work on the
   machine hits both sides alike.
2. Threads: 1 and 2 Python threads each asking N queries at once (the GIL is released around
   the lookup only), the best of the rounds' rates; and, for reference, the same with the Rust
   loop in each thread (what the machine's cores allow without Python), rounds interleaved.
   Two threads need two idle cores: on a busy machine both scalings fall alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from typing import Callable, List, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import hicache_index as hi  # noqa: E402
from conftest import Master, eventually  # noqa: E402

PAGES = 256


def timed(f: Callable[[], object]) -> Tuple[float, float]:
    """Wall and thread CPU seconds of f()."""
    wall, cpu = time.perf_counter(), time.thread_time()
    f()
    return time.perf_counter() - wall, time.thread_time() - cpu


def rate(threads: int, work: Callable[[], object], queries: int) -> float:
    """Queries per second of `threads` threads each running `work` (N queries) at once."""
    barrier = threading.Barrier(threads + 1)
    done: List[float] = []

    def run() -> None:
        barrier.wait()
        work()
        done.append(time.perf_counter())

    pool = [threading.Thread(target=run) for _ in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in pool:
        t.join()
    return threads * queries / (max(done) - start)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--queries", type=int, default=5000, help="queries per round and thread")
    args = p.parse_args()
    n = args.queries
    master = Master()
    layout = hi.Layout(page_size=4, tp=2)
    hashes = hi.page_hashes(list(range(4 * PAGES)), 4)
    assert all(isinstance(h, bytes) and len(h) == 32 for h in hashes)
    try:
        with hi.Index(master.events, page_size=4, tp=2) as index:
            index.wait_live(20)
            master.store_pages(layout, hashes)
            assert eventually(lambda: index.query(page_hashes=hashes).prefix_pages == PAGES)
            query = index.query

            def python() -> None:
                for _ in range(n):
                    query(page_hashes=hashes)

            def rust() -> None:
                hi._native.bench_rust(index, hashes, n)

            def bare() -> None:
                hi._native.bench_rust(index, hashes, n, True)

            python(), rust()  # warm up
            print(f"hicache_index {hi.__version__}: {PAGES} pages present, page hashes as bytes")
            print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            per = {"python": [], "rust": [], "bare": []}  # type: dict
            for _ in range(args.rounds):
                for name, f in (("python", python), ("rust", rust), ("bare", bare)):
                    wall, cpu = timed(f)
                    per[name].append((wall / n, cpu / n))
            print(f"one thread, best (median) of {args.rounds} rounds of {n} queries, in us per query:")
            best = {k: (min(w for w, _ in v), min(c for _, c in v)) for k, v in per.items()}
            for name, label in (
                ("python", "Index.query (Python)"),
                ("rust", "answer_lookup (Rust, same answer)"),
                ("bare", "query_prefix_map (Rust, no answer)"),
            ):
                walls = [w for w, _ in per[name]]
                print(
                    f"  {label:36} wall {best[name][0] * 1e6:6.2f} ({statistics.median(walls) * 1e6:6.2f})"
                    f"  cpu {best[name][1] * 1e6:6.2f}"
                )
            print(
                f"  ratio Python / Rust: wall {best['python'][0] / best['rust'][0]:.2f}x, "
                f"cpu {best['python'][1] / best['rust'][1]:.2f}x (goal <= 1.3x)"
            )

            print(f"threads, best of {args.rounds} rounds of {n} queries per thread, queries/s:")
            rates: dict = {(label, k): [] for label in ("python", "rust") for k in (1, 2)}
            for _ in range(args.rounds):  # interleaved, so that other work on the machine hits all alike
                for label, work in (("python", python), ("rust", rust)):
                    for k in (1, 2):
                        rates[label, k].append(rate(k, work, n))
            for label in ("python", "rust"):
                one, two = max(rates[label, 1]), max(rates[label, 2])
                print(
                    f"  {label:6}  1 thread {one:9.0f}  2 threads {two:9.0f}  scaling {two / one:.2f}x"
                    + ("  (goal >= 1.6x)" if label == "python" else "  (the machine's cores without Python)")
                )
            print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    finally:
        master.close()


if __name__ == "__main__":
    main()
