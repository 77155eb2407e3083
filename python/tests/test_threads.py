"""Many threads querying while the index ingests: no error, and never a page claimed that the
master was not asked to store."""

from __future__ import annotations

import threading

import hicache_index as hi
from conftest import Master, eventually

PAGES = 64


def test_many_threads_query_while_ingesting(master: Master) -> None:
    layout = hi.Layout(page_size=4, tp=2)
    prompt = list(range(4 * PAGES))
    hashes = hi.page_hashes(prompt, 4)
    with hi.Index(master.events, page_size=4, tp=2) as index:
        assert index.wait_live(timeout=20)
        asked = [0]  # pages the master was asked to store, raised before each store
        done = threading.Event()
        errors: list = []
        answers = [0] * 8

        def ask(slot: int) -> None:
            try:
                while not done.is_set():
                    use_hashes = slot % 2 == 0
                    a = (
                        index.query(page_hashes=hashes)
                        if use_hashes
                        else index.query(tokens=prompt, prefix_only=False)
                    )
                    bound = asked[0]
                    if a.prefix_pages > bound:
                        errors.append(f"claimed {a.prefix_pages} pages, {bound} stored")
                    answers[slot] += 1
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for page in range(PAGES):
            asked[0] = page + 1
            master.store_pages(layout, hashes[page : page + 1])
        assert eventually(lambda: index.query(page_hashes=hashes).prefix_pages == PAGES)
        done.set()
        for t in threads:
            t.join(timeout=30)
        assert not errors, errors[:5]
        assert all(n > 0 for n in answers)
