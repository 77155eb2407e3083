"""An index of the SGLang HiCache pages present in a Mooncake store, for routers.

``Index`` keeps the index inside this process (the Rust subscriber on a thread of its own);
``Client`` asks a ``hicache-index serve`` sidecar over HTTP with the same ``query``. Both
answer an ``Answer``. The tools ``page_hashes``, ``object_keys`` and ``Layout`` give the same
answers as the CLI's ``hash`` and ``keys``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from . import _native
from ._native import Answer, Error, Layout, object_keys, page_hashes
from .client import Client

__version__: str = _native.__version__

__all__ = [
    "Answer",
    "Client",
    "Error",
    "Index",
    "Layout",
    "object_keys",
    "page_hashes",
    "__version__",
]


class Index(_native.Index):
    """The index in process: ``serve``'s subscriber with ``serve``'s options (see the stubs).

    Queries take microseconds, release the GIL and may come from many threads at once;
    ``query_async`` answers inline (it never waits on the network). ``wait_live_async`` and
    ``close_async`` run their blocking twins on the loop's default executor.
    """

    async def query_async(self, *args: Any, **kwargs: Any) -> Answer:
        """Answers like ``query`` (inline: a query never waits on IO)."""
        return self.query(*args, **kwargs)

    def query_batch(self, queries: Any) -> list:
        """Answers several queries (each a mapping of ``query``'s keywords), in order: one
        ``Answer`` per query, or the ``ValueError`` that refused that query alone (as
        ``Client.query_batch``)."""
        out: list = []
        for q in queries:
            try:
                out.append(self.query(**q))
            except ValueError as e:
                out.append(e)
        return out

    async def wait_live_async(self, timeout: Optional[float] = None) -> bool:
        """Waits like ``wait_live`` without blocking the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.wait_live, timeout)

    async def close_async(self) -> None:
        """Closes like ``close`` without blocking the event loop."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.close)

    async def __aenter__(self) -> "Index":
        return self

    async def __aexit__(self, *exc: object) -> bool:
        await self.close_async()
        return False

