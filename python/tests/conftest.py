"""Fixtures: the project's emulated master (`hicache-index-emulator`, steered over stdin) and
`hicache-index serve`, both from the Cargo build directory ($HICACHE_INDEX_BIN_DIR, else
target/debug), on 127.0.0.1 only."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator, List

import pytest

import hicache_index as hi

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("HICACHE_INDEX_BIN_DIR", ROOT / "target" / "debug"))


def binary(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{path} is missing: cargo build -p hicache-index-app -p hicache-index-emulator")
    return str(path)


class Master:
    """The emulated master: a real ZeroMQ PUB socket and HTTP admin side."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [binary("hicache-index-emulator")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        hello = json.loads(self._line())
        self.events: str = hello["events"]
        self.http: str = hello["http"]

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the emulator ended")
        return line

    def command(self, op: str, **fields: Any) -> Any:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.process.stdin.flush()
        answer = json.loads(self._line())
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer

    def store_pages(self, layout: hi.Layout, hashes: List[bytes]) -> Any:
        keys = [k for h in hashes for k in layout.object_keys(h)]
        return self.command("store", keys=keys)

    def remove_pages(self, layout: hi.Layout, hashes: List[bytes]) -> Any:
        keys = [k for h in hashes for k in layout.object_keys(h)]
        return self.command("remove", keys=keys)

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def master() -> Iterator[Master]:
    m = Master()
    yield m
    m.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def eventually(check: Any, timeout: float = 10.0) -> Any:
    """Calls `check` until it returns a true value, at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.01)


class Serve:
    """`hicache-index serve` on a free port of 127.0.0.1."""

    def __init__(self, args: List[str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [binary("hicache-index"), "serve", "--listen", f"127.0.0.1:{self.port}", *args],
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    err = self.process.stderr.read() if self.process.stderr else ""
                    self.close()
                    raise RuntimeError(f"serve did not start: {err}")
                time.sleep(0.02)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        if self.process.stderr:
            self.process.stderr.close()


@pytest.fixture
def serve_factory() -> Iterator[Any]:
    started: List[Serve] = []

    def start(args: List[str]) -> Serve:
        s = Serve(args)
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()
