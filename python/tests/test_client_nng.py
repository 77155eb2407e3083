"""The sidecar client's nng route (`Client(url, nng=...)`) against a real `hicache-index serve
--nng-listen` on 127.0.0.1: the same answers and errors as over HTTP, hits, misses and refusals,
single queries and batches, from several threads at once.

Needs a `hicache-index` built with the `nng` feature (`--version` lists it) and pynng and
msgpack in the venv; without them the tests are skipped, unless HICACHE_INDEX_REQUIRE_NNG=1
(.ci/python sets it) makes the skip a failure."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

import hicache_index as hi
from conftest import Master, binary, eventually, free_port

LAYOUT = {"page_size": 4, "tp": 2}
FLAGS = ["--page-size", "4", "--tp", "2"]
NNG_COUNT = 'hicache_index_query_duration_seconds_count{transport="nng"}'


def _unavailable() -> str:
    """Why the nng route cannot be tested here ("" when it can)."""
    version = subprocess.run(
        [binary("hicache-index"), "--version"], capture_output=True, text=True, check=True
    ).stdout
    if "nng" not in version.partition("features:")[2]:
        return (
            f"{binary('hicache-index')} was built without the nng feature ({version.strip()}): "
            "cargo build -p hicache-index-app --features nng"
        )
    try:
        import msgpack  # noqa: F401
        import pynng  # noqa: F401
    except ImportError as e:
        return f"pynng and msgpack are needed (pip install 'hicache-index[nng]'): {e}"
    return ""


@pytest.fixture(scope="module")
def nng_ready() -> None:
    why = _unavailable()
    if why:
        if os.environ.get("HICACHE_INDEX_REQUIRE_NNG") == "1":
            pytest.fail(f"HICACHE_INDEX_REQUIRE_NNG=1 but {why}")
        pytest.skip(why)


def nng_url() -> str:
    return f"tcp://127.0.0.1:{free_port()}"


def same(a: Any, b: Any) -> bool:
    """Two results of query_batch (or query) are the same: equal answers, or ValueErrors with
    the same message."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, ValueError) or isinstance(b, ValueError):
        return type(a) is type(b) and str(a) == str(b)
    return bool(a == b)


def test_nng_answers_as_http(nng_ready: None, master: Master, serve_factory) -> None:
    nng = nng_url()
    serve = serve_factory(
        ["--events", master.events, "--master-http", master.http, "--nng-listen", nng,
         "--max-tokens", "64", "--max-batch-queries", "4", *FLAGS]
    )
    layout = hi.Layout(**LAYOUT)
    prompt = list(range(40))  # 10 pages
    other = list(range(1000, 1040))
    hashes = hi.page_hashes(prompt, 4)
    with hi.Client(serve.url) as http, hi.Client(serve.url, nng=nng) as client:
        assert client.nng == nng and "nng=" in repr(client)
        assert client.wait_live(timeout=30)
        master.store_pages(layout, hashes[:6])
        assert eventually(lambda: client.query(tokens=prompt).prefix_pages == 6)
        before = client.metrics().get(NNG_COUNT, 0)

        hits: List[Dict[str, Any]] = [
            {"tokens": prompt},
            {"tokens": tuple(prompt), "prefix_only": False},
            {"page_hashes": hashes},
            {"page_hashes": [h.hex() for h in hashes], "prefix_only": False},
            {"tokens": prompt, "tenant": "default"},
        ]
        for kwargs in hits:
            answer = client.query(**kwargs)
            assert isinstance(answer, hi.Answer)
            assert answer.prefix_pages == 6 and answer.trust == "live", (kwargs, answer)
            assert answer == http.query(**kwargs), kwargs
        full = client.query(tokens=prompt, prefix_only=False)
        assert full.pages == [True] * 6 + [False] * 4 and full.total_pages == 10

        misses: List[Dict[str, Any]] = [
            {"tokens": other},
            {"tokens": prompt, "cache_salt": "s", "extra_key": "k"},
            {"page_hashes": hi.page_hashes(other, 4), "prefix_only": False},
        ]
        for kwargs in misses:
            answer = client.query(**kwargs)
            assert answer.prefix_pages == 0 and answer.total_pages == 10, (kwargs, answer)
            assert answer == http.query(**kwargs), kwargs

        refused: List[Dict[str, Any]] = [
            {},
            {"tokens": prompt, "page_hashes": hashes},
            {"page_hashes": [b"\0" * 32, b"x"]},
            {"page_hashes": ["zz"]},
            {"tokens": prompt, "model": "m"},
            {"tokens": list(range(65))},  # over --max-tokens (413 over HTTP)
        ]
        for kwargs in refused:
            with pytest.raises(ValueError) as over_nng:
                client.query(**kwargs)
            with pytest.raises(ValueError) as over_http:
                http.query(**kwargs)
            assert type(over_nng.value) is ValueError, kwargs
            assert str(over_nng.value) == str(over_http.value) and str(over_nng.value), kwargs
        # Undecodable requests: refused both ways, the decoders' words differ (JSON's has the
        # line and column; a token past u64 msgpack cannot even encode).
        for kwargs in ({"tokens": [-1]}, {"tokens": [1.5]}, {"tokens": [2**64]}):
            with pytest.raises(ValueError, match="^malformed request: "):
                client.query(**kwargs)
            with pytest.raises(ValueError, match="^malformed request: "):
                http.query(**kwargs)

        batch = [
            {"tokens": prompt},
            {"page_hashes": ["zz"]},
            {"tokens": other, "prefix_only": False},
            {"tokens": prompt, "model": "m"},
        ]
        over_nng = client.query_batch(batch)
        assert isinstance(over_nng[0], hi.Answer) and over_nng[0].prefix_pages == 6
        assert isinstance(over_nng[1], ValueError) and "page_hashes[0]" in str(over_nng[1])
        assert isinstance(over_nng[2], hi.Answer) and over_nng[2].prefix_pages == 0
        assert isinstance(over_nng[3], ValueError)
        assert same(over_nng, http.query_batch(batch))
        # The whole batch refused (over --max-batch-queries): ValueError both ways.
        with pytest.raises(ValueError) as whole_nng:
            client.query_batch([{"tokens": prompt}] * 5)
        with pytest.raises(ValueError) as whole_http:
            http.query_batch([{"tokens": prompt}] * 5)
        assert str(whole_nng.value) == str(whole_http.value)

        # Removed pages miss over both.
        master.remove_pages(layout, hashes[3:6])
        assert eventually(lambda: client.query(tokens=prompt).prefix_pages == 3)
        assert client.query(tokens=prompt) == http.query(tokens=prompt)

        # The queries above went over nng, not HTTP: serve counted them on its nng histogram.
        asked = len(hits) + len(misses) + len(refused) + 3
        assert client.metrics()[NNG_COUNT] >= before + asked
        assert asyncio.run(client.query_async(tokens=prompt)).prefix_pages == 3
        assert same(asyncio.run(client.query_batch_async(batch[:2])), http.query_batch(batch[:2]))


def test_nng_from_many_threads(nng_ready: None, master: Master, serve_factory) -> None:
    nng = nng_url()
    serve = serve_factory(["--events", master.events, "--nng-listen", nng, *FLAGS])
    layout = hi.Layout(**LAYOUT)
    prompts = [list(range(i * 100, i * 100 + 4 * (i + 1))) for i in range(4)]
    for i, p in enumerate(prompts):
        master.store_pages(layout, hi.page_hashes(p, 4)[: i + 1])
    with hi.Client(serve.url, nng=nng) as client:
        assert client.wait_live(timeout=30)
        assert eventually(lambda: client.query(tokens=prompts[3]).prefix_pages == 4)
        wrong: List[Any] = []

        def run(i: int) -> None:
            for _ in range(200):
                answer = client.query(tokens=prompts[i])
                if answer.prefix_pages != i + 1:
                    wrong.append((i, answer))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads)
        assert not wrong, wrong[:3]


def test_nng_token_timeout_and_close(
    nng_ready: None, master: Master, serve_factory, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    nng = nng_url()
    serve = serve_factory(
        ["--events", master.events, "--auth-token-file", str(token), "--nng-listen", nng, *FLAGS]
    )
    # nng carries no token (serve listens for it on loopback only); the token is HTTP's.
    with hi.Client(serve.url, nng=nng) as anonymous:
        assert eventually(lambda: anonymous.query(tokens=[1, 2, 3, 4]).total_pages == 1)
    with hi.Client(serve.url) as http, pytest.raises(hi.Error, match="401"):
        http.query(tokens=[1, 2, 3, 4])
    client = hi.Client(serve.url, token="s3cret", nng=nng, timeout=0.5)
    assert client.query(tokens=[1, 2, 3, 4]).total_pages == 1
    assert client.query_batch([{"tokens": [1, 2, 3, 4]}])[0].total_pages == 1
    serve.close()
    started = time.monotonic()
    with pytest.raises(hi.Error, match="no nng answer within"):
        client.query(tokens=[1, 2, 3, 4])
    assert time.monotonic() - started < 5
    client.close()
    with pytest.raises(hi.Error, match="closed"):
        client.query(tokens=[1, 2, 3, 4])


def test_nng_route_needs_its_packages_and_a_url(
    nng_ready: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="not an nng URL"):
        hi.Client("http://127.0.0.1:9", nng="127.0.0.1:9101")
    with pytest.raises(ValueError, match="not an nng URL"):
        hi.Client("http://127.0.0.1:9", nng="http://127.0.0.1:9101")
    with pytest.raises(ValueError):
        hi.Client("http://127.0.0.1:9", nng="tcp://")
    # A serve not listening yet: the client is made at once and redials in the background.
    hi.Client("http://127.0.0.1:9", nng=nng_url()).close()
    monkeypatch.setitem(sys.modules, "pynng", None)
    with pytest.raises(hi.Error, match=r"pip install 'hicache-index\[nng\]'"):
        hi.Client("http://127.0.0.1:9", nng=nng_url())
