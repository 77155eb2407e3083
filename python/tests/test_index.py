"""The index in process against the project's emulated master."""

from __future__ import annotations

import asyncio

import pytest

import hicache_index as hi
from conftest import Master, eventually

LAYOUT = {"page_size": 4, "tp": 2}


def tokens(n_pages: int, start: int = 0) -> list:
    return list(range(start, start + 4 * n_pages))


def test_pages_stored_at_the_master_are_hits_and_removed_ones_miss(master: Master) -> None:
    layout = hi.Layout(**LAYOUT)
    with hi.Index(master.events, master_http=master.http, **LAYOUT) as index:
        assert index.wait_live(timeout=20)
        prompt = tokens(8)
        hashes = hi.page_hashes(prompt, 4)
        assert index.query(tokens=prompt).prefix_pages == 0
        master.store_pages(layout, hashes[:5])
        answer = eventually(lambda: index.query(tokens=prompt).prefix_pages == 5 and index.query(tokens=prompt))
        assert answer and answer.trust == "live" and answer.total_pages == 8
        assert answer.pages == [True] * 5 + [False]
        assert index.query(page_hashes=hashes).prefix_pages == 5
        assert index.query(page_hashes=[h.hex() for h in hashes]).prefix_pages == 5
        # Another namespace is another page: a salted prompt misses.
        assert index.query(tokens=prompt, cache_salt="other").prefix_pages == 0
        master.remove_pages(layout, hashes[2:3])
        assert eventually(lambda: index.query(tokens=prompt).prefix_pages == 2)
        every = index.query(tokens=prompt, prefix_only=False)
        assert every.pages == [True, True, False, True, True, False, False, False]


def test_a_gap_without_resync_forgets_rather_than_claims(master: Master) -> None:
    layout = hi.Layout(**LAYOUT)
    with hi.Index(master.events, **LAYOUT) as index:
        assert index.wait_live(timeout=20)
        hashes = hi.page_hashes(tokens(4), 4)
        master.store_pages(layout, hashes[:2])
        assert eventually(lambda: index.query(page_hashes=hashes).prefix_pages == 2)
        # Lost events: the index cannot know what they did, so it forgets.
        master.command("remove_silently", keys=layout.object_keys(hashes[0]))
        master.command("store_unpublished", keys=["x_0_k"])
        master.store_pages(layout, hashes[3:4])
        assert eventually(lambda: index.metrics()["hicache_index_gaps_total"] >= 1)
        assert index.query(page_hashes=hashes).prefix_pages == 0


def test_bad_input_is_a_value_error_with_serves_message(master: Master) -> None:
    with hi.Index(master.events, **LAYOUT) as index:
        with pytest.raises(ValueError, match='give exactly one of "tokens" and "page_hashes"'):
            index.query()
        with pytest.raises(ValueError, match='give exactly one of "tokens" and "page_hashes"'):
            index.query(tokens=[1], page_hashes=[])
        with pytest.raises(ValueError, match=r"page_hashes\[1\] is not 64 lowercase hex"):
            index.query(page_hashes=[b"\0" * 32, b"short"])
        with pytest.raises(ValueError, match="is not a token id"):
            index.query(tokens=[1, -1])
        with pytest.raises(ValueError, match='unknown model "nope"'):
            index.query(tokens=[1, 2, 3, 4], model="nope")


def test_every_form_of_page_hashes_gives_the_same_answer(master: Master) -> None:
    """The list of exact 32-byte `bytes` is read on a fast path; every other form (hex, a
    `bytes` subclass, a tuple, an iterator, mixed) on the general one: the same answers."""

    class Sub(bytes):
        pass

    layout = hi.Layout(**LAYOUT)
    hashes = hi.page_hashes(tokens(6), 4)
    with hi.Index(master.events, **LAYOUT) as index:
        assert index.wait_live(timeout=20)
        master.store_pages(layout, hashes[:4])
        assert eventually(lambda: index.query(page_hashes=hashes).prefix_pages == 4)
        expected = index.query(page_hashes=hashes, prefix_only=False)
        assert expected.pages == [True] * 4 + [False] * 2
        mixed = [h if i % 3 == 0 else h.hex() if i % 3 == 1 else Sub(h) for i, h in enumerate(hashes)]
        for form in (
            [h.hex() for h in hashes],
            [Sub(h) for h in hashes],
            tuple(hashes),
            iter(hashes),
            mixed,
        ):
            assert index.query(page_hashes=form, prefix_only=False) == expected, form
        for i in range(3):  # the same buffer reused by the next query on this thread
            assert index.query(page_hashes=hashes[i:]).prefix_pages == 4 - i
        assert index.query(page_hashes=[]).total_pages == 0
        for bad, position in (
            ([*hashes[:2], hashes[2][:31]], 2),
            ([hashes[0], hashes[1] + b"\0"], 1),
            ([bytearray(hashes[0])], 0),
            ([hashes[0], None], 1),
            ([hashes[0], hashes[1].hex().upper()], 1),
        ):
            with pytest.raises(ValueError, match=rf"page_hashes\[{position}\] is not 64 lowercase hex"):
                index.query(page_hashes=bad)
        assert index.query(page_hashes=hashes).prefix_pages == 4


def test_options_are_serves_flags_with_serves_messages(master: Master) -> None:
    with pytest.raises(ValueError, match="is not tcp://HOST:PORT or ipc://PATH"):
        hi.Index("http://nowhere", **LAYOUT)
    with pytest.raises(ValueError, match="'--verify-interval <DURATION>'"):
        hi.Index(master.events, master_http=master.http, verify_interval="soon", **LAYOUT)
    with pytest.raises(ValueError, match="--master-http"):
        hi.Index(master.events, no_resync=True, **LAYOUT)
    with pytest.raises(ValueError, match="--page-size is required"):
        hi.Index(master.events)
    with pytest.raises(TypeError, match="unexpected keyword argument 'master'"):
        hi.Index(master.events, master=master.http, **LAYOUT)
    with pytest.raises(hi.Error, match="is not http://host"):
        hi.Index(master.events, workers=["ftp://w"], **LAYOUT)
    names = dict(hi._native.index_options())
    assert names["no_verify"] is True and names["master_http"] is False
    assert {"events", "layout", "page_size", "tp", "workers", "ha_locator", "max_pages"} <= set(names)


def test_layout_objects_per_model(master: Master) -> None:
    a = hi.Layout(page_size=4, tp=1, model="a")
    b = hi.Layout(page_size=8, tp=1, model="b")
    with hi.Index(master.events, layout={"a": a, "b": b}) as index:
        assert index.wait_live(timeout=20)
        assert index.models() == ["a", "b"]
        prompt = list(range(16))
        master.store_pages(b, hi.page_hashes(prompt, 8))
        assert eventually(lambda: index.query(tokens=prompt, model="b").prefix_pages == 2)
        assert index.query(tokens=prompt, model="a").prefix_pages == 0
        with pytest.raises(ValueError, match="several are known"):
            index.query(tokens=prompt)


def test_metrics_close_and_context_manager(master: Master) -> None:
    index = hi.Index(master.events, **LAYOUT)
    assert index.wait_live(timeout=20)
    before = index.metrics()["hicache_index_queries_total"]
    index.query(tokens=tokens(2))
    metrics = index.metrics()
    assert metrics["hicache_index_queries_total"] == before + 1
    assert metrics['hicache_index_health{state="live"}'] == 1
    assert metrics["hicache_index_subscriber_running"] == 1
    assert index.health == "live" and not index.closed
    index.close()
    index.close()
    assert index.closed and index.health == "disconnected"
    answer = index.query(tokens=tokens(2))
    assert answer.prefix_pages == 0 and answer.trust == "disconnected"
    with pytest.raises(hi.Error, match="closed"):
        index.wait_live(timeout=1)


def test_async_twins(master: Master) -> None:
    layout = hi.Layout(**LAYOUT)

    async def main() -> int:
        async with hi.Index(master.events, **LAYOUT) as index:
            assert await index.wait_live_async(20)
            master.store_pages(layout, hi.page_hashes(tokens(3), 4))
            for _ in range(1000):
                answer = await index.query_async(tokens=tokens(3))
                if answer.prefix_pages == 3:
                    return answer.prefix_pages
                await asyncio.sleep(0.01)
            return -1

    assert asyncio.run(main()) == 3


def test_batch_answers_each_query_or_its_error(master: Master) -> None:
    with hi.Index(master.events, **LAYOUT) as index:
        out = index.query_batch([{"tokens": tokens(2)}, {}, {"page_hashes": ["zz"]}])
        assert isinstance(out[0], hi.Answer)
        assert isinstance(out[1], ValueError) and isinstance(out[2], ValueError)
