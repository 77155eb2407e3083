"""A minimal cache-aware router for SGLang workers, on hicache_index.

The index answers store-wide: one Mooncake store (L3) is shared by every worker, so its answer
is the same for all of them. What tells the workers apart is what each holds on its GPU, which
the router knows from what it sent there. Each worker is scored, in pages of prefill saved:

    score = gpu_pages                        (a) leading pages the router recently sent it
          + l3_weight * (l3_pages - gpu)     (b) further leading pages it can load from L3
          - load_pages * outstanding         (c) its queue: requests sent and not answered

and the request goes to the best score (ties: fewer outstanding, then fewer served, then the
order given). `index` is a `hicache_index.Index` (in process) or `Client` (the sidecar): the
same `query`. Requests are SGLang's `POST /generate` with `input_ids` (tokenise first).

    python router.py --events tcp://127.0.0.1:19997 --page-size 64 --tp 8 \
        --worker http://127.0.0.1:30000 --worker http://127.0.0.1:30001 --listen 127.0.0.1:8080
"""

from __future__ import annotations

import argparse
import http.client
import json
import threading
import urllib.parse
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Sequence

import hicache_index as hi


class Worker:
    """One SGLang worker: its URL, its queue, and the pages the router sent it (an LRU)."""

    def __init__(self, url: str, gpu_capacity_pages: int) -> None:
        self.url = url.rstrip("/")
        self.outstanding = 0
        self.served = 0
        self.capacity = gpu_capacity_pages
        self.pages: "OrderedDict[bytes, None]" = OrderedDict()

    def gpu_prefix(self, hashes: Sequence[bytes]) -> int:
        """Leading pages of `hashes` this worker still holds, by the router's record."""
        n = 0
        for h in hashes:
            if h not in self.pages:
                break
            n += 1
        return n

    def remember(self, hashes: Sequence[bytes]) -> None:
        for h in hashes:
            self.pages[h] = None
            self.pages.move_to_end(h)
        while len(self.pages) > self.capacity:
            self.pages.popitem(last=False)


class Router:
    def __init__(
        self,
        index: Any,
        workers: Sequence[str],
        page_size: int,
        *,
        l3_weight: float = 0.8,
        load_pages: float = 4.0,
        gpu_capacity_pages: int = 100_000,
        timeout: float = 600.0,
    ) -> None:
        self.index = index
        self.workers = [Worker(url, gpu_capacity_pages) for url in workers]
        self.page_size = page_size
        self.l3_weight = l3_weight
        self.load_pages = load_pages
        self.timeout = timeout
        self.lock = threading.Lock()

    def scores(self, hashes: Sequence[bytes], l3_pages: int) -> List[float]:
        out = []
        for w in self.workers:
            gpu = w.gpu_prefix(hashes)
            out.append(gpu + self.l3_weight * max(0, l3_pages - gpu) - self.load_pages * w.outstanding)
        return out

    def choose(self, tokens: Sequence[int]) -> Worker:
        """The worker for `tokens`, without sending anything."""
        hashes = hi.page_hashes(tokens, self.page_size)
        l3_pages = self.l3_pages(hashes)
        with self.lock:
            return self._pick(hashes, l3_pages)

    def l3_pages(self, hashes: List[bytes]) -> int:
        """Leading pages any worker can load from L3 (misses unless the index is live). While
        the index reconciles (the store dropped objects a moment ago) it counts half."""
        if not hashes:
            return 0
        answer = self.index.query(page_hashes=hashes)
        return answer.prefix_pages // 2 if answer.trust == "reconciling" else answer.prefix_pages

    def _pick(self, hashes: List[bytes], l3_pages: int) -> Worker:
        scores = self.scores(hashes, l3_pages)
        best = max(
            range(len(self.workers)),
            key=lambda i: (scores[i], -self.workers[i].outstanding, -self.workers[i].served, -i),
        )
        return self.workers[best]

    def generate(self, request: Dict[str, Any]) -> Dict[str, Any]:
        """Routes one SGLang `/generate` request (with `input_ids`) and returns its answer."""
        tokens = request["input_ids"]
        hashes = hi.page_hashes(tokens, self.page_size)
        l3_pages = self.l3_pages(hashes)
        with self.lock:
            worker = self._pick(hashes, l3_pages)
            worker.outstanding += 1
            worker.served += 1
            worker.remember(hashes)  # the worker's radix cache will hold them
        try:
            return post(worker.url + "/generate", request, self.timeout)
        finally:
            with self.lock:
                worker.outstanding -= 1


def post(url: str, doc: Any, timeout: float) -> Any:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request("POST", parts.path, json.dumps(doc), {"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{url}: HTTP {response.status}: {data[:200]!r}")
        return json.loads(data)
    finally:
        conn.close()


def serve(router: Router, host: str, port: int) -> ThreadingHTTPServer:
    """An HTTP front with SGLang's `POST /generate`, forwarding to the chosen worker."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            try:
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, answer = 200, router.generate(request)
            except Exception as e:  # noqa: BLE001 - answered to the caller
                status, answer = 502, {"error": str(e)}
            body = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return ThreadingHTTPServer((host, port), Handler)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", help="the master's KV event endpoint (in-process Index)")
    p.add_argument("--master-http", help="the master's admin HTTP (resync, verification)")
    p.add_argument("--sidecar", help="ask `hicache-index serve` at this URL instead")
    p.add_argument("--page-size", type=int, required=True)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--worker", action="append", required=True)
    p.add_argument("--listen", default="127.0.0.1:8080")
    args = p.parse_args()
    if args.sidecar:
        index: Any = hi.Client(args.sidecar)
    else:
        index = hi.Index(args.events, master_http=args.master_http, page_size=args.page_size, tp=args.tp)
    router = Router(index, args.worker, args.page_size)
    host, _, port = args.listen.rpartition(":")
    serve(router, host, int(port)).serve_forever()


if __name__ == "__main__":
    main()
