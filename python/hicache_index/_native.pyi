"""Stubs of the native module (hicache_index._native)."""

import os
from datetime import timedelta
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, TypedDict, Union

from typing_extensions import Unpack

__version__: str

_Duration = Union[float, int, str, timedelta]
_Hash = Union[bytes, str]

class Error(Exception):
    """A failure that is not the caller's input (could not start, unreachable, publisher off)."""

class Answer:
    prefix_pages: int
    # "live", "reconciling" (the store dropped objects a moment ago: a hit may be one of them
    # until the reconcile under way is applied), "recovering", "connecting", "disconnected",
    # "events_disabled"; "layout_conflict" or "no_layout" (nothing claimed, see `reason`).
    trust: str
    total_pages: int
    memory_pages: int
    disk_only_pages: int
    reason: Optional[str]
    def __init__(
        self,
        *,
        prefix_pages: int,
        pages: Sequence[bool],
        trust: str,
        total_pages: int,
        memory_pages: int,
        disk_only_pages: int,
        reason: Optional[str] = None,
    ) -> None: ...
    @property
    def pages(self) -> List[bool]: ...
    @property
    def live(self) -> bool: ...

class _LayoutFlags(TypedDict, total=False):
    """The layout's flags, as ``Layout`` and ``Index`` take them (each named as its CLI flag)."""

    page_size: Optional[int]
    tp: Optional[int]
    pp: Optional[int]
    mla: bool
    tp_lcm: Optional[int]
    tag: Optional[str]
    model: Optional[str]
    dcp: Optional[int]
    cp: Optional[int]
    tag_only_prefix: bool
    key_prefix: Optional[str]
    eagle: bool
    pool: Optional[Sequence[str]]
    logical_kv: bool

class Layout:
    def __init__(
        self,
        *,
        layout: Union[str, "os.PathLike[str]", None] = None,
        **flags: Unpack[_LayoutFlags],
    ) -> None: ...
    @staticmethod
    def from_sglang(document: Union[str, bytes, Mapping[str, Any]], eagle: bool = False) -> "Layout": ...
    def object_keys(self, page_hash: _Hash) -> List[str]: ...
    @property
    def page_size(self) -> int: ...
    @property
    def eagle(self) -> bool: ...
    @property
    def object_count(self) -> int: ...

class Index:
    def __init__(
        self,
        events: str,
        *,
        topic: Optional[str] = None,
        master_http: Optional[str] = None,
        ha_locator: Optional[str] = None,
        cluster_id: Optional[str] = None,
        no_resync: bool = False,
        resync_timeout: Optional[_Duration] = None,
        no_verify: bool = False,
        verify_interval: Optional[_Duration] = None,
        verify_sample: Optional[int] = None,
        verify_escalate_every: Optional[_Duration] = None,
        layout: Union[
            str,
            "os.PathLike[str]",
            Layout,
            Sequence[str],
            Mapping[str, Union[str, "os.PathLike[str]"]],
            Mapping[str, Layout],
            None,
        ] = None,
        workers: Optional[Sequence[str]] = None,
        worker_poll_interval: Optional[_Duration] = None,
        worker_timeout: Optional[_Duration] = None,
        max_pages: Optional[int] = None,
        prefix_memo_bytes: Optional[int] = None,
        **flags: Unpack[_LayoutFlags],
    ) -> None: ...
    def query(
        self,
        tokens: Optional[Sequence[int]] = None,
        page_hashes: Optional[Sequence[_Hash]] = None,
        cache_salt: Optional[str] = None,
        extra_key: Optional[str] = None,
        model: Optional[str] = None,
        prefix_only: bool = True,
        tenant: Optional[str] = None,
    ) -> Answer: ...
    @property
    def health(self) -> str: ...
    @property
    def endpoint(self) -> Optional[str]: ...
    @property
    def closed(self) -> bool: ...
    def failures(self) -> List[str]: ...
    def models(self) -> List[str]: ...
    def metrics(self) -> Dict[str, Union[int, float]]: ...
    def wait_live(self, timeout: Optional[float] = None) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Index": ...
    def __exit__(self, *exc: object) -> bool: ...

def page_hashes(
    tokens: Sequence[int],
    page_size: int,
    cache_salt: Optional[str] = None,
    extra_key: Optional[str] = None,
    eagle: bool = False,
) -> List[bytes]: ...
def object_keys(page_hash: _Hash, layout: Optional[Layout] = None, **flags: Any) -> List[str]: ...
def index_options() -> List[Tuple[str, bool]]: ...
def bench_rust(index: Index, page_hashes: Sequence[_Hash], iterations: int, bare: bool = False) -> float: ...
