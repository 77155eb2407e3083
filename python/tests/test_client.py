"""The sidecar client against a real `hicache-index serve` on 127.0.0.1: the same answers and
errors as the index in process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import hicache_index as hi
from conftest import Master, eventually

LAYOUT = {"page_size": 4, "tp": 2}
FLAGS = ["--page-size", "4", "--tp", "2"]


def test_client_answers_as_the_index_in_process(master: Master, serve_factory) -> None:
    serve = serve_factory(["--events", master.events, "--master-http", master.http, *FLAGS])
    layout = hi.Layout(**LAYOUT)
    prompt = list(range(40))
    hashes = hi.page_hashes(prompt, 4)
    with hi.Client(serve.url) as client, hi.Index(master.events, master_http=master.http, **LAYOUT) as index:
        assert client.wait_live(timeout=30) and index.wait_live(timeout=30)
        master.store_pages(layout, hashes[:6])
        assert eventually(lambda: client.query(tokens=prompt).prefix_pages == 6)
        assert eventually(lambda: index.query(tokens=prompt).prefix_pages == 6)
        for kwargs in (
            {"tokens": prompt},
            {"tokens": prompt, "prefix_only": False},
            {"page_hashes": hashes},
            {"page_hashes": [h.hex() for h in hashes]},
            {"tokens": prompt, "cache_salt": "s", "extra_key": "k"},
        ):
            assert client.query(**kwargs) == index.query(**kwargs), kwargs
        for bad in ({}, {"page_hashes": [b"\0" * 32, b"x"]}, {"tokens": prompt, "model": "m"}):
            with pytest.raises(ValueError) as remote:
                client.query(**bad)
            with pytest.raises(ValueError) as local:
                index.query(**bad)
            assert str(remote.value) == str(local.value)
        batch = client.query_batch([{"tokens": prompt}, {"page_hashes": ["zz"]}])
        assert batch[0] == index.query(tokens=prompt)
        assert isinstance(batch[1], ValueError) and "page_hashes[0]" in str(batch[1])
        assert client.health == "live"
        assert client.metrics()["hicache_index_queries_total"] >= 1
        assert asyncio.run(client.query_async(tokens=prompt)).prefix_pages == 6


def test_client_sends_the_token_and_reports_failures(master: Master, serve_factory, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    serve = serve_factory(["--events", master.events, "--auth-token-file", str(token), *FLAGS])
    with hi.Client(serve.url) as anonymous:
        with pytest.raises(hi.Error, match="401"):
            anonymous.query(tokens=[1, 2, 3, 4])
    with hi.Client(serve.url, token="s3cret") as client:
        assert client.query(tokens=[1, 2, 3, 4]).total_pages == 1
        # Keep-alive: many queries over the thread's one connection.
        for _ in range(50):
            client.query(tokens=[1, 2, 3, 4])
    serve.close()
    with hi.Client(serve.url, timeout=1) as gone:
        with pytest.raises(hi.Error, match="cannot reach"):
            gone.query(tokens=[1, 2, 3, 4])
    with pytest.raises(ValueError):
        hi.Client("ftp://x")
