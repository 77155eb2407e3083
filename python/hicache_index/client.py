"""The sidecar client: ``Client(url)`` asks ``hicache-index serve`` over HTTP keep-alive, with
the same ``query`` as the in-process ``Index``. Python's standard library only; the optional nng
route (``Client(url, nng="tcp://...")``, ``serve --nng-listen``) needs pynng and msgpack
(``pip install 'hicache-index[nng]'``), imported only when asked for."""

from __future__ import annotations

import asyncio
import http.client
import json
import ssl
import threading
import time
import urllib.parse
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Union

from ._native import Answer, Error

if TYPE_CHECKING:  # pragma: no cover - the optional route's packages, for type checkers only
    import pynng

_ANSWER_FIELDS = (
    "prefix_pages",
    "pages",
    "trust",
    "total_pages",
    "memory_pages",
    "disk_only_pages",
    "reason",
)

_RETRYABLE = (
    http.client.RemoteDisconnected,
    http.client.CannotSendRequest,
    http.client.BadStatusLine,
    BrokenPipeError,
    ConnectionResetError,
    ConnectionAbortedError,
)


def _answer(doc: Mapping[str, Any]) -> Answer:
    return Answer(**{k: doc[k] for k in _ANSWER_FIELDS if k in doc})


def _hex(hashes: Any) -> List[str]:
    if isinstance(hashes, (str, bytes)):
        raise ValueError("page_hashes must be a sequence of page hashes, not a string")
    return [h.hex() if isinstance(h, (bytes, bytearray, memoryview)) else h for h in hashes]


_QUERY_KEYS = frozenset(
    ("tokens", "page_hashes", "cache_salt", "extra_key", "model", "prefix_only", "tenant")
)


def _request(query: Mapping[str, Any]) -> Dict[str, Any]:
    """The JSON body of one query, from a mapping of ``Client.query``'s keywords."""
    unknown = sorted(set(query) - _QUERY_KEYS)
    if unknown:
        raise TypeError(f"query() got an unexpected keyword argument {unknown[0]!r}")
    tokens = query.get("tokens")
    if isinstance(tokens, (str, bytes)):
        raise ValueError("tokens must be a sequence of token ids, not a string")
    body: Dict[str, Any] = {}
    if tokens is not None:
        body["tokens"] = tokens if isinstance(tokens, list) else list(tokens)
    if query.get("page_hashes") is not None:
        body["page_hashes"] = _hex(query["page_hashes"])
    for key in ("cache_salt", "extra_key", "model", "tenant"):
        if query.get(key) is not None:
            body[key] = query[key]
    if not query.get("prefix_only", True):
        body["page_map"] = True
    return body


def _answers(doc: Any, where: str) -> Any:
    """The ``answers`` of a batch's answer map (an ``{"error": ...}`` map refused it whole)."""
    if isinstance(doc, dict) and "answers" in doc:
        return doc["answers"]
    if isinstance(doc, dict) and "error" in doc:
        raise ValueError(doc["error"])
    raise Error(f"{where}: not a batch answer: {str(doc)[:200]}")


_NNG_SCHEMES = ("tcp", "tcp4", "tcp6", "ipc", "abstract", "tls+tcp", "ws", "wss", "inproc")


class _Nng:
    """The nng route: one REQ socket dialed to ``serve --nng-listen`` (redialed by NNG in the
    background whenever the connection drops), one REQ context per thread so that threads
    never wait on each other's answers; msgpack maps both ways, the fields of HTTP's JSON."""

    def __init__(self, url: str, timeout: float) -> None:
        scheme, sep, rest = url.partition("://")
        if not sep or scheme not in _NNG_SCHEMES or not rest:
            raise ValueError(f"{url!r} is not an nng URL (tcp://HOST:PORT or ipc:///PATH)")
        try:
            import msgpack
            import pynng
        except ImportError as e:
            raise Error(
                f"the nng route ({url}) needs pynng and msgpack: pip install 'hicache-index[nng]' "
                f"({e})"
            ) from e
        self.url = url
        self._msgpack = msgpack
        self._pynng = pynng
        self._timeout = timeout
        millis = max(1, int(timeout * 1000))
        # recv_max_size 0: no bound on an answer (a batch of page maps may pass NNG's 1 MiB).
        self._socket = pynng.Req0(recv_timeout=millis, send_timeout=millis, recv_max_size=0)
        try:
            # Not blocking: a serve not yet listening is dialed again until it is.
            self._socket.dial(url, block=False)
        except pynng.NNGException as e:
            self._socket.close()
            raise ValueError(f"cannot dial nng {url}: {e}") from e
        self._local = threading.local()
        self._all: "List[pynng.Context]" = []
        self._lock = threading.Lock()
        self._closed = False

    def _context(self) -> "pynng.Context":
        ctx = getattr(self._local, "ctx", None)
        if ctx is None:
            with self._lock:
                if self._closed:
                    raise Error("the client is closed")
                ctx = self._socket.new_context()
                self._all.append(ctx)
            self._local.ctx = ctx
        return ctx

    def _drop(self) -> None:
        ctx = getattr(self._local, "ctx", None)
        if ctx is not None:
            self._local.ctx = None
            with self._lock:
                if ctx in self._all:
                    self._all.remove(ctx)
            try:
                ctx.close()
            except self._pynng.NNGException:
                pass

    def ask(self, doc: Mapping[str, Any]) -> Any:
        """Sends ``doc`` and returns the answer map (decoded, not yet checked for an error)."""
        try:
            body = self._msgpack.packb(doc)
        except (OverflowError, TypeError, ValueError) as e:
            # What JSON would carry and serve refuse (a token id past u64, an odd type).
            raise ValueError(f"malformed request: {e}") from e
        ctx = self._context()
        try:
            ctx.send(body)
            data = ctx.recv()
        except self._pynng.Timeout as e:
            # The context's request stays pending: a fresh context for the next one.
            self._drop()
            raise Error(f"{self.url}: no nng answer within {self._timeout} s") from e
        except self._pynng.NNGException as e:
            self._drop()
            if self._closed:
                raise Error("the client is closed") from e
            raise Error(f"{self.url}: nng: {e}") from e
        try:
            return self._msgpack.unpackb(data)
        except ValueError as e:
            raise Error(f"{self.url}: not a msgpack answer: {data[:200]!r}") from e

    def close(self) -> None:
        with self._lock:
            self._closed = True
            contexts, self._all = self._all, []
        for ctx in contexts:
            try:
                ctx.close()
            except self._pynng.NNGException:
                pass
        self._socket.close()


class Client:
    """Asks a ``hicache-index serve`` at ``url`` (``http://127.0.0.1:9100``; ``https://`` with
    ``--tls-cert``), with the bearer ``token`` of its ``--auth-token-file`` if it has one.

    With ``nng`` (the URL of its ``--nng-listen``: ``tcp://127.0.0.1:9101``,
    ``ipc:///run/hicache.ipc``), ``query`` and ``query_batch`` go over nng instead (msgpack,
    needs ``pynng`` and ``msgpack``: ``pip install 'hicache-index[nng]'``), with the same answers
    and errors; ``health``, ``metrics`` and ``wait_live`` stay on HTTP. nng carries no token
    (``serve`` listens for nng only on loopback or ``ipc://`` unless
    ``--allow-unauthenticated``): ``token`` applies to HTTP alone.

    Each thread keeps one connection alive (one nng context); the client may be shared by
    threads. A refused query (400, 413) raises ``ValueError`` with ``serve``'s message; anything
    else that fails (unreachable, 401, 5xx, no nng answer within ``timeout``) raises
    ``hicache_index.Error``.
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:9100",
        token: Optional[str] = None,
        timeout: float = 5.0,
        ssl_context: Optional[ssl.SSLContext] = None,
        nng: Optional[str] = None,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not http://HOST:PORT or https://HOST:PORT")
        self.url = url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._base = parts.path.rstrip("/")
        self._timeout = timeout
        self._ssl = ssl_context
        self._headers = {"Content-Type": "application/json", "Connection": "keep-alive"}
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token}"
        self._local = threading.local()
        self._all: List[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False
        self.nng: Optional[str] = nng
        self._nng: Optional[_Nng] = _Nng(nng, timeout) if nng is not None else None

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise Error("the client is closed")
            if self._https:
                conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self._timeout, context=self._ssl
                )
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _call(self, method: str, path: str, body: Optional[bytes] = None) -> "tuple[int, bytes]":
        for attempt in (0, 1):
            conn = self._connection()
            try:
                conn.request(method, self._base + path, body=body, headers=self._headers)
                response = conn.getresponse()
                data = response.read()
                if response.will_close:
                    self._drop()
                return response.status, data
            except _RETRYABLE as e:
                # A kept-alive connection the server closed meanwhile: once more on a new one.
                self._drop()
                if attempt == 1:
                    raise Error(f"{self.url}: {e.__class__.__name__}: {e}") from e
            except (OSError, http.client.HTTPException) as e:
                self._drop()
                raise Error(f"cannot reach {self.url}: {e}") from e
        raise AssertionError("unreachable")

    def _post(self, path: str, doc: Mapping[str, Any]) -> Any:
        status, data = self._call("POST", path, json.dumps(doc, separators=(",", ":")).encode())
        try:
            answer = json.loads(data)
        except ValueError as e:
            raise Error(f"{self.url}{path}: HTTP {status}, not JSON: {data[:200]!r}") from e
        if status == 200:
            return answer
        message = answer.get("error", "") if isinstance(answer, dict) else ""
        if status in (400, 413):
            raise ValueError(message)
        raise Error(f"{self.url}{path}: HTTP {status}: {message}")

    def query(
        self,
        tokens: Optional[Sequence[int]] = None,
        page_hashes: Optional[Sequence[Union[bytes, str]]] = None,
        cache_salt: Optional[str] = None,
        extra_key: Optional[str] = None,
        model: Optional[str] = None,
        prefix_only: bool = True,
        tenant: Optional[str] = None,
    ) -> Answer:
        """Answers like ``Index.query``, over ``POST /v1/query`` (or the same map over nng)."""
        body = _request(
            {
                "tokens": tokens,
                "page_hashes": page_hashes,
                "cache_salt": cache_salt,
                "extra_key": extra_key,
                "model": model,
                "prefix_only": prefix_only,
                "tenant": tenant,
            }
        )
        if self._nng is not None:
            doc = self._nng.ask(body)
            if not isinstance(doc, dict):
                raise Error(f"{self._nng.url}: not an answer map: {str(doc)[:200]}")
            if "error" in doc:
                raise ValueError(doc["error"])
            return _answer(doc)
        return _answer(self._post("/v1/query", body))

    def query_batch(self, queries: Sequence[Mapping[str, Any]]) -> List[Union[Answer, ValueError]]:
        """Answers several queries (each a mapping of ``query``'s keywords) in one request,
        ``POST /v1/query_batch`` (or ``{"queries": [...]}`` over nng): one ``Answer`` per query,
        in order, or the ``ValueError`` that refused that query alone."""
        doc = {"queries": [_request(q) for q in queries]}
        if self._nng is not None:
            answers = _answers(self._nng.ask(doc), self._nng.url)
        else:
            answers = _answers(self._post("/v1/query_batch", doc), self.url + "/v1/query_batch")
        return [ValueError(a["error"]) if "error" in a else _answer(a) for a in answers]

    @property
    def health(self) -> str:
        """The sidecar's health (``/readyz``): ``live``, ``reconciling``, ``recovering``, ..., or
        ``stopping``."""
        status, data = self._call("GET", "/readyz")
        try:
            return str(json.loads(data)["health"])
        except (ValueError, KeyError, TypeError) as e:
            raise Error(f"{self.url}/readyz: HTTP {status}: {data[:200]!r}") from e

    def metrics(self) -> Dict[str, float]:
        """Every sample of ``/metrics``, keyed as Prometheus names it (labels included)."""
        status, data = self._call("GET", "/metrics")
        if status != 200:
            raise Error(f"{self.url}/metrics: HTTP {status}")
        out: Dict[str, float] = {}
        for line in data.decode().splitlines():
            if not line or line.startswith("#"):
                continue
            name, _, value = line.rpartition(" ")
            try:
                number = float(value)
            except ValueError:
                continue
            out[name] = int(number) if number.is_integer() and "." not in value else number
        return out

    def wait_live(self, timeout: Optional[float] = None) -> bool:
        """Waits until the sidecar is live, at most ``timeout`` seconds; returns whether it is."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                if self.health == "live":
                    return True
            except Error:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def close(self) -> None:
        """Closes every connection (and the nng socket); the client cannot be used after."""
        self._closed = True
        if self._nng is not None:
            self._nng.close()
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()

    async def query_async(self, *args: Any, **kwargs: Any) -> Answer:
        """Answers like ``query`` on the loop's default executor."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, lambda: self.query(*args, **kwargs))

    async def query_batch_async(
        self, queries: Sequence[Mapping[str, Any]]
    ) -> List[Union[Answer, ValueError]]:
        """Answers like ``query_batch`` on the loop's default executor."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.query_batch, queries)

    async def wait_live_async(self, timeout: Optional[float] = None) -> bool:
        """Waits like ``wait_live`` on the loop's default executor."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.wait_live, timeout)

    async def close_async(self) -> None:
        """Closes like ``close``."""
        self.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> bool:
        self.close()
        return False

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> bool:
        self.close()
        return False

    def __repr__(self) -> str:
        if self.nng is not None:
            return f"Client({self.url!r}, nng={self.nng!r})"
        return f"Client({self.url!r})"
