"""The package against a real Mooncake master (0.3.14, KV events on) and a real store client,
as tests/mooncake runs them for the Rust crates: pages the store client puts are hits, removed
ones miss, a master restart is followed.

Skipped unless MOONCAKE_VENVS names the venvs `.ci/mooncake-setup` makes (`master/` with
`mooncake_master`, `client/` with the store client's Python). `.ci/python-mooncake` runs this
file inside private network and PID namespaces with only loopback up; every address here is
127.0.0.1. Process logs go to $MOONCAKE_VENVS/logs/python/.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

import hicache_index as hi
from conftest import ROOT, eventually

VENVS = os.environ.get("MOONCAKE_VENVS")
pytestmark = pytest.mark.skipif(
    not VENVS, reason="MOONCAKE_VENVS is not set: run .ci/python-mooncake (a real Mooncake master)"
)

LAYOUT = {"page_size": 4, "tp": 2}
WAIT = 20.0  # the longest any one wait lasts


def free_ports(n: int) -> List[int]:
    """`n` distinct free TCP ports of 127.0.0.1 (bound together, then released)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def log_file(name: str) -> Path:
    assert VENVS
    folder = Path(VENVS) / "logs" / "python"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{os.getpid()}-{time.monotonic_ns()}-{name}.log"


def tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        text = []
    return f"--- last lines of {path} ---\n" + "\n".join(text[-lines:])


def kill_group(process: subprocess.Popen) -> None:
    """Kills a process started in its own group, with whatever it started, and reaps it."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait()


class RealMaster:
    """`mooncake_master` with its KV event publisher on free loopback ports (the flags of
    tests/mooncake/src/process.rs)."""

    def __init__(self, backend_id: str) -> None:
        assert VENVS
        self.binary = str(Path(VENVS) / "master" / "bin" / "mooncake_master")
        self.backend_id = backend_id
        self.rpc, self.metrics, self.events_port = free_ports(3)
        self.process: Optional[subprocess.Popen] = None
        self.log = log_file("master")
        self.start()

    @property
    def rpc_address(self) -> str:
        return f"127.0.0.1:{self.rpc}"

    @property
    def events(self) -> str:
        return f"tcp://127.0.0.1:{self.events_port}"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.metrics}"

    def healthy(self) -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.metrics, timeout=1)
            try:
                conn.request("GET", "/health")
                return conn.getresponse().status == 200
            finally:
                conn.close()
        except OSError:
            return False

    def start(self) -> None:
        """Starts the master (again, on the same ports, retrying while a port is still held)
        and waits until it answers /health."""
        deadline = time.monotonic() + WAIT
        while True:
            with open(self.log, "ab") as log:
                self.process = subprocess.Popen(
                    [
                        self.binary,
                        f"--rpc_port={self.rpc}",
                        "--rpc_address=127.0.0.1",
                        f"--metrics_port={self.metrics}",
                        "--metrics_host=127.0.0.1",
                        "--enable_kv_events=true",
                        f"--kv_events_bind_endpoint={self.events}",
                        f"--kv_events_backend_id={self.backend_id}",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, "MC_TCP_BIND_ADDRESS": "127.0.0.1"},
                    start_new_session=True,
                )
            while self.process.poll() is None and time.monotonic() < deadline:
                if self.healthy():
                    return
                time.sleep(0.02)
            kill_group(self.process)
            if time.monotonic() >= deadline:
                raise RuntimeError(f"mooncake_master did not start\n{tail(self.log)}")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL, as a crash: its objects are gone, without any event."""
        if self.process is not None:
            kill_group(self.process)
            self.process = None


class StoreClient:
    """tests/mooncake/store_client.py: a real Mooncake store client, one JSON command a line."""

    def __init__(self) -> None:
        assert VENVS
        self.log = log_file("store-client")
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [str(Path(VENVS) / "client" / "bin" / "python"), str(ROOT / "tests" / "mooncake" / "store_client.py")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env={**os.environ, "MC_TCP_BIND_ADDRESS": "127.0.0.1", "PYTHONUNBUFFERED": "1"},
                start_new_session=True,
            )
        self.answers: "queue.Queue[Optional[str]]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.answers.put(line)
        self.answers.put(None)

    def call(self, op: str, timeout: float = 60.0, **fields: Any) -> Dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.process.stdin.flush()
        try:
            line = self.answers.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"store client: no answer to {op} within {timeout} s\n{tail(self.log)}") from None
        if line is None:
            raise RuntimeError(f"the store client exited\n{tail(self.log)}")
        answer = json.loads(line)
        if not answer.get("ok"):
            raise RuntimeError(f"store client {op}: {answer.get('error')}\n{tail(self.log)}")
        return answer

    def setup(self, master: RealMaster) -> None:
        self.call("setup", master=master.rpc_address)

    def put_pages(self, tokens: List[int], pages: Optional[int] = None) -> Dict[str, Any]:
        """Puts the first `pages` pages of `tokens`, one object at a time; the keys are
        computed by the driver itself (independently of the package)."""
        return self.call("put_pages", tokens=tokens, pages=pages, mla=False, model=None, **LAYOUT)

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write('{"op":"exit"}\n')
                self.process.stdin.flush()
                self.process.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        kill_group(self.process)


@pytest.fixture
def master(request: Any) -> Iterator[RealMaster]:
    m = RealMaster(request.node.name.replace("[", "-").replace("]", ""))
    yield m
    m.kill()


@pytest.fixture
def store(master: RealMaster) -> Iterator[List[StoreClient]]:
    """The store client connected to `master`, in a list a test may replace it in."""
    clients = [StoreClient()]
    clients[0].setup(master)
    yield clients
    for c in clients:
        c.close()


def tokens(request_id: int, pages: int) -> List[int]:
    """A request of its own: `pages` pages of distinct tokens."""
    return [request_id * 100_000 + i + 1 for i in range(4 * pages)]


def subscribed(index: Any, client: StoreClient) -> None:
    """Puts probe keys until a batch reaches the index: its subscription carries events (a
    ZeroMQ subscriber misses what is published before it is joined)."""
    before = index.metrics()["hicache_index_batches_total"]
    deadline = time.monotonic() + WAIT
    n = 0
    while True:
        n += 1
        client.call("put", keys=[f"probe-{os.getpid()}-{time.monotonic_ns()}-{n}"])
        if eventually(lambda: index.metrics()["hicache_index_batches_total"] > before, timeout=0.2):
            return
        assert time.monotonic() < deadline, "no event reached the index within 20 s"


def live_answer(index: Any, toks: List[int], pages: int) -> Any:
    """The answer for `toks` if it claims `pages` leading pages with trust `live`, else None."""
    answer = index.query(tokens=toks)
    return answer if answer.prefix_pages == pages and answer.trust == "live" else None


def prefix(index: Any, toks: List[int]) -> int:
    return index.query(tokens=toks).prefix_pages


@pytest.mark.parametrize("via", ["index", "client"])
def test_pages_put_by_the_real_store_client_are_hits_and_removed_ones_miss(
    master: RealMaster, store: List[StoreClient], serve_factory: Any, via: str
) -> None:
    client = store[0]
    if via == "index":
        index: Any = hi.Index(master.events, master_http=master.http, **LAYOUT)
    else:
        flags = ["--page-size", "4", "--tp", "2"]
        index = hi.Client(serve_factory(["--events", master.events, "--master-http", master.http, *flags]).url)
    with index:
        assert index.wait_live(timeout=WAIT)
        subscribed(index, client)
        layout = hi.Layout(**LAYOUT)
        toks = tokens(1, 4)
        hashes = hi.page_hashes(toks, 4)

        # Three of four pages, put for real one object at a time; the driver's own keys are
        # the package's.
        put = client.put_pages(toks, pages=3)
        assert put["hashes"] == [h.hex() for h in hashes[:3]]
        assert put["keys"] == [k for h in hashes[:3] for k in layout.object_keys(h)]
        answer = eventually(lambda: live_answer(index, toks, 3), timeout=WAIT)
        assert answer, index.query(tokens=toks)
        assert (answer.prefix_pages, answer.total_pages, answer.trust) == (3, 4, "live")
        assert answer.memory_pages == 3, "Mooncake reported medium cpu"
        assert index.query(page_hashes=hashes).prefix_pages == 3

        # A forced remove of one object of page 2 (rank 1's V): page 2 misses, the prefix is 1.
        victim = put["keys"][7]
        assert victim.endswith("_1_v")
        client.call("remove", keys=[victim])
        assert eventually(lambda: prefix(index, toks) == 1, timeout=WAIT), index.query(tokens=toks)
        assert index.query(tokens=toks, prefix_only=False).pages == [True, False, True, False]

        # Half of page 4, then the rest: a partial page is a miss, a complete one a hit.
        page4 = layout.object_keys(hashes[3])
        client.call("put", keys=page4[:2])
        client.call("put", keys=page4[2:])
        assert eventually(
            lambda: index.query(tokens=toks, prefix_only=False).pages == [True, False, True, True], timeout=WAIT
        )
        # Page 1 removed whole: nothing leads any more.
        client.call("remove", keys=put["keys"][:4])
        assert eventually(lambda: index.metrics()["hicache_index_removed_total"] == 5, timeout=WAIT)
        assert prefix(index, toks) == 0
        assert index.query(tokens=toks, prefix_only=False).pages == [False, False, True, True]
        assert index.metrics()["hicache_index_gaps_total"] == 0


def test_a_master_restart_is_followed(master: RealMaster, store: List[StoreClient]) -> None:
    with hi.Index(master.events, master_http=master.http, **LAYOUT) as index:
        assert index.wait_live(timeout=WAIT)
        subscribed(index, store[0])
        old, new = tokens(50, 3), tokens(51, 3)
        store[0].put_pages(old)
        assert eventually(lambda: prefix(index, old) == 3, timeout=WAIT)

        # Crash the master; its store client goes too (its segment lived in that master's world).
        store[0].close()
        store[0] = StoreClient()
        master.kill()
        assert eventually(lambda: index.health != "live" and prefix(index, old) == 0, timeout=WAIT), index.health
        time.sleep(0.3)  # reconnect attempts fail while no master listens

        master.start()
        assert index.wait_live(timeout=WAIT), (index.health, index.failures())
        store[0].setup(master)
        subscribed(index, store[0])

        def following() -> bool:
            m = index.metrics()
            restarts = m["hicache_index_disconnects_total"] + m["hicache_index_restarts_total"]
            return restarts > 0 and index.health == "live" and prefix(index, old) == 0

        assert eventually(following, timeout=WAIT), (index.health, index.failures())
        store[0].put_pages(new)
        assert eventually(lambda: prefix(index, new) == 3, timeout=WAIT)
        assert prefix(index, old) == 0, "the old master's pages stay forgotten"
        metrics = index.metrics()
        assert metrics["hicache_index_disconnects_total"] >= 1
        assert metrics["hicache_index_clears_disconnected_total"] >= 1
        assert metrics["hicache_index_objects"] == 3 * 2 * 2, "the new pages' objects, nothing old"
