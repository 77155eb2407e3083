"""The example router (examples/python/router.py) against fake SGLang workers: small HTTP
servers on 127.0.0.1 that answer `POST /generate`, each of which can hold its requests (a gate)
so that the router sees it loaded. Whether a prompt's pages are in L3 comes from the emulated
master, through the in-process Index or the sidecar Client."""

from __future__ import annotations

import importlib.util
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List

import pytest

import hicache_index as hi
from conftest import ROOT, Master, eventually

LAYOUT = {"page_size": 4, "tp": 2}
FLAGS = ["--page-size", "4", "--tp", "2"]

_spec = importlib.util.spec_from_file_location("router", ROOT / "examples" / "python" / "router.py")
assert _spec and _spec.loader
router_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(router_module)
Router = router_module.Router


class FakeWorker:
    """An SGLang worker's `POST /generate`: records each request; while `gate` is clear, holds
    it (at most 20 s) before answering `{"text": ..., "meta_info": {"worker": name}}`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.received: List[Dict[str, Any]] = []
        self.in_flight = 0
        self.gate = threading.Event()
        self.gate.set()
        self.lock = threading.Lock()
        worker = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with worker.lock:
                    worker.received.append(request)
                    worker.in_flight += 1
                worker.gate.wait(timeout=20)
                with worker.lock:
                    worker.in_flight -= 1
                body = json.dumps({"text": "ok", "meta_info": {"worker": worker.name}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.gate.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def workers() -> Iterator[Any]:
    started: List[FakeWorker] = []

    def start(n: int) -> List[FakeWorker]:
        for i in range(n):
            started.append(FakeWorker(f"w{i}"))
        return started[-n:]

    yield start
    for w in started:
        w.close()


def prompt(n: int, pages: int = 16) -> List[int]:
    return [n * 100_000 + i for i in range(4 * pages)]


def test_a_repeated_prompt_goes_back_to_the_worker_that_served_it(master: Master, workers) -> None:
    fakes = workers(3)
    with hi.Index(master.events, **LAYOUT) as index:
        assert index.wait_live(timeout=20)
        router = Router(index, [w.url for w in fakes], page_size=4)
        prompts = [prompt(i) for i in range(3)]
        first = [router.generate({"input_ids": p})["meta_info"]["worker"] for p in prompts]
        # Nothing cached anywhere yet: the load and served counts spread them.
        assert sorted(first) == ["w0", "w1", "w2"], first
        for i in (2, 0, 1, 2):
            again = router.generate({"input_ids": prompts[i]})["meta_info"]["worker"]
            assert again == first[i], f"prompt {i} went to {again}, its pages are on {first[i]}"
        # A prompt extending prompt 1 goes where its prefix is.
        longer = prompts[1] + list(range(7, 7 + 4 * 4))
        assert router.generate({"input_ids": longer})["meta_info"]["worker"] == first[1]
        assert [len(w.received) for w in fakes] == [2, 3, 3]
        assert all(w.outstanding == 0 for w in router.workers)


@pytest.mark.parametrize("via", ["index", "client"])
def test_an_l3_resident_prompt_is_not_sent_to_an_overloaded_worker(
    master: Master, workers, serve_factory, via: str
) -> None:
    a, b = workers(2)
    layout = hi.Layout(**LAYOUT)
    if via == "index":
        index: Any = hi.Index(master.events, **LAYOUT)
    else:
        index = hi.Client(serve_factory(["--events", master.events, *FLAGS]).url)
    threads: List[threading.Thread] = []
    answers: List[str] = []

    def send(tokens: List[int]) -> None:
        answers.append(router.generate({"input_ids": tokens})["meta_info"]["worker"])

    try:
        assert index.wait_live(timeout=30)
        router = Router(index, [a.url, b.url], page_size=4, l3_weight=0.8, load_pages=4.0)
        p = prompt(9)  # 16 pages
        hashes = hi.page_hashes(p, 4)
        # Worker a serves p and holds it: its GPU has p's pages and 3 requests queue there
        # (16 pages saved outweigh a queue of 3 x 4 pages while p is nowhere else).
        a.gate.clear()
        for queued in range(1, 4):
            t = threading.Thread(target=send, args=(p,), daemon=True)
            t.start()
            threads.append(t)
            assert eventually(lambda: a.in_flight == queued), (queued, a.in_flight, b.received)
        assert len(b.received) == 0
        assert router.l3_pages(hashes) == 0
        assert router.choose(p) is router.workers[0], "without L3, a's GPU prefix wins"

        # p's pages reach the store: b can load them (16 x 0.8 = 12.8 > 16 - 3 x 4).
        master.store_pages(layout, hashes)
        assert eventually(lambda: router.l3_pages(hashes) == 16)
        assert router.choose(p) is router.workers[1]
        send(p)
        assert answers == ["w1"], answers
        assert len(b.received) == 1 and a.in_flight == 3
    finally:
        a.gate.set()
        for t in threads:
            t.join(timeout=20)
        index.close()
    assert sorted(answers) == ["w0", "w0", "w0", "w1"]
    assert all(w.outstanding == 0 for w in router.workers)


def test_the_http_front_forwards_generate_to_the_chosen_worker(master: Master, workers) -> None:
    fakes = workers(2)
    with hi.Index(master.events, **LAYOUT) as index:
        assert index.wait_live(timeout=20)
        router = Router(index, [w.url for w in fakes], page_size=4)
        front = router_module.serve(router, "127.0.0.1", 0)
        threading.Thread(target=front.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{front.server_address[1]}/generate"
        try:
            request = {"input_ids": prompt(3), "sampling_params": {"max_new_tokens": 1}}
            answers = [router_module.post(url, request, 10)["meta_info"]["worker"] for _ in range(2)]
            assert answers == ["w0", "w0"]
            assert fakes[0].received == [request, request]
            fakes[0].close()  # the worker is gone: the caller gets a 502 with the reason
            with pytest.raises(RuntimeError, match="HTTP 502"):
                router_module.post(url, request, 10)
            assert all(w.outstanding == 0 for w in router.workers)
        finally:
            front.shutdown()
            front.server_close()
