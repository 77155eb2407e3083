"""What SGLang's storage code imports and this machine lacks, written for the conformance harness.

None of this is SGLang's code: a list-backed `torch` with what the key builders touch (tensors of
host indices, `arange`, and `torch.utils.cpp_extension.load`, which compiles SGLang's C++ hash
binding with g++ and pybind11 as torch would), a recording Mooncake client, and host pools that
answer the buffer questions `MooncakeStore` asks (how many objects one page has, which class a
pool is). `install(site)` puts them in `sys.modules` and makes SGLang's packages importable from
the unpacked wheel without running their heavy `__init__` files.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
import types
from pathlib import Path


# --- torch ----------------------------------------------------------------------------------
class Tensor:
    """A flat (or 2-D, rows of equal length) tensor of ints backed by a list."""

    def __init__(self, values, width=None):
        self.values = list(values)
        self.width = width  # row length of a 2-D view, None when flat

    def numel(self):
        return len(self.values)

    def __len__(self):
        if self.width:
            return len(self.values) // self.width
        return len(self.values)

    def __getitem__(self, index):
        if self.width:
            rows = [index] if isinstance(index, int) else list(index)
            out = []
            for r in rows:
                out.extend(self.values[r * self.width : (r + 1) * self.width])
            return Tensor(out, self.width)
        if isinstance(index, slice):
            return Tensor(self.values[index])
        return Scalar(self.values[index])

    def reshape(self, *shape):
        if len(shape) == 1:
            return Tensor(self.values)
        return Tensor(self.values, shape[-1])

    def detach(self):
        return self

    def to(self, *args, **kwargs):
        return self

    def cpu(self):
        return self

    def tolist(self):
        return list(self.values)

    def data_ptr(self):
        return id(self)

    def element_size(self):
        return 1


class Scalar(int):
    """One element: an int with torch's `item()`."""

    def item(self):
        return int(self)


class _Dtype:
    def __init__(self, name):
        self.name = name


def _arange(n, dtype=None, device=None):
    return Tensor(range(n))


def _tensor(values, dtype=None, device=None):
    return Tensor(values)


def _get_build_directory(name, verbose=False):
    return os.path.join(os.environ["SGLANG_CONFORMANCE_BUILD"], name)


def _load(name, sources, extra_cflags=None, extra_ldflags=None, build_directory=None, **_):
    """Compiles the extension's sources with g++ and pybind11, as torch's JIT loader would."""
    import pybind11

    build = Path(build_directory or _get_build_directory(name))
    build.mkdir(parents=True, exist_ok=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    target = build / f"{name}{suffix}"
    if not target.exists() or any(os.path.getmtime(s) > target.stat().st_mtime for s in sources):
        command = [
            "g++",
            *(extra_cflags or []),
            "-shared",
            "-fPIC",
            f"-DTORCH_EXTENSION_NAME={name}",
            f"-I{pybind11.get_include()}",
            f"-I{sysconfig.get_paths()['include']}",
            *sources,
            "-o",
            str(target),
            *(extra_ldflags or []),
        ]
        built = subprocess.run(command, capture_output=True, text=True)
        if built.returncode != 0:
            raise RuntimeError(f"g++ failed on {sources}:\n{built.stderr}")
    spec = importlib.util.spec_from_file_location(name, target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _torch():
    torch = types.ModuleType("torch")
    torch.Tensor = Tensor
    torch.int64 = _Dtype("int64")
    torch.int32 = _Dtype("int32")
    torch.uint8 = _Dtype("uint8")
    torch.dtype = _Dtype
    torch.arange = _arange
    torch.tensor = _tensor
    torch.version = types.SimpleNamespace(cuda=None, hip=None)
    utils = types.ModuleType("torch.utils")
    ext = types.ModuleType("torch.utils.cpp_extension")
    ext.load = _load
    ext._get_build_directory = _get_build_directory
    utils.cpp_extension = ext
    torch.utils = utils
    return {"torch": torch, "torch.utils": utils, "torch.utils.cpp_extension": ext}


# --- the Mooncake client --------------------------------------------------------------------
class Store:
    """One shared store for every rank: what exists, and every key put through a batch."""

    objects: dict = {}
    puts: list = []

    @classmethod
    def reset(cls):
        cls.objects = {}
        cls.puts = []


class MooncakeDistributedStore:
    """The client `MooncakeStore` drives, recording instead of storing."""

    def setup(self, *args, **kwargs):
        return 0

    def setup_dummy(self, *args, **kwargs):
        return 0

    def register_buffer(self, ptr, size):
        return 0

    def put(self, key, value):
        Store.objects[key] = value
        return 0

    def get(self, key):
        return Store.objects.get(key)

    def is_exist(self, key):
        return 1 if key in Store.objects else 0

    def batch_is_exist(self, keys):
        return [self.is_exist(k) for k in keys]

    def batch_put_from(self, keys, ptrs, sizes, config=None):
        for key in keys:
            Store.objects[key] = b""
            Store.puts.append(key)
        return [0] * len(keys)

    batch_put_from_multi_buffers = batch_put_from

    def remove_all(self):
        Store.objects.clear()


class ReplicateConfig:
    """Mooncake's replica config, without group ids (group semantics stay off)."""


def _mooncake():
    mooncake = types.ModuleType("mooncake")
    store = types.ModuleType("mooncake.store")
    store.MooncakeDistributedStore = MooncakeDistributedStore
    store.ReplicateConfig = ReplicateConfig
    mooncake.store = store
    return {"mooncake": mooncake, "mooncake.store": store}


# --- host pools -----------------------------------------------------------------------------
class HostKVCache:
    """A host pool: `objects` buffers a page, each page's pointers one per object."""

    objects = 1

    def __init__(self, page_size, kv_buffer=True):
        self.page_size = page_size
        self.kv_buffer = Tensor([0]) if kv_buffer else None

    def get_ksize_per_token(self):
        return 1

    def get_page_buffer_meta(self, indices):
        pages = len(indices) // self.page_size
        count = pages * self.objects
        return list(range(1, count + 1)), [1] * count

    def get_hybrid_pool_buffer(self):
        return [self.kv_buffer] if self.kv_buffer is not None else []


class HostTensorAllocator:
    """Unused: the harness registers no real memory."""


class MHATokenToKVPoolHost(HostKVCache):
    """An MHA pool: a K and a V object a page (per head split with `split` targets)."""

    objects = 2

    def __init__(self, page_size, kv_buffer=True):
        super().__init__(page_size, kv_buffer)
        self.v_buffer = Tensor([0])

    def get_split_heads_page_buffer_meta(self, indices, split):
        pages = len(indices) // self.page_size
        count = pages * 2 * split
        return list(range(1, count + 1)), [1] * count


class MLATokenToKVPoolHost(HostKVCache):
    """An MLA pool: one object a page."""


class DeepSeekV4PagedHostPool(HostKVCache):
    """A DeepSeek-V4 paged pool: one object a page."""


class SidePoolHost(HostKVCache):
    """A page-packed side pool (DSA indexer, DeepSeek-V4 compressed pools): one object a page."""


class MambaPoolHost(HostKVCache):
    """A mamba state pool: a temporal state (unless empty) and `conv` conv states a page."""

    def __init__(self, page_size, conv, temporal=True):
        super().__init__(page_size)
        self.conv_buffer = [Tensor([0]) for _ in range(conv)]
        self.temporal_state_elem_size = 1 if temporal else 0
        self.objects = conv + (1 if temporal else 0)


class DevicePoolEntry:
    """A direct-linker entry (unused by these launches)."""


class StorageMetrics:
    """Unused: storage metrics stay off."""


def _modules():
    def module(name, **attrs):
        m = types.ModuleType(name)
        for key, value in attrs.items():
            setattr(m, key, value)
        return m

    def no_engine():
        raise RuntimeError("no shared Mooncake transfer engine in the harness")

    return {
        "requests": module("requests"),
        "sglang.srt.mem_cache.pool_host": module(
            "sglang.srt.mem_cache.pool_host",
            HostKVCache=HostKVCache,
            HostTensorAllocator=HostTensorAllocator,
        ),
        "sglang.srt.mem_cache.pool_host.mla": module(
            "sglang.srt.mem_cache.pool_host.mla", MLATokenToKVPoolHost=MLATokenToKVPoolHost
        ),
        "sglang.srt.mem_cache.pool_host.mha": module(
            "sglang.srt.mem_cache.pool_host.mha", MHATokenToKVPoolHost=MHATokenToKVPoolHost
        ),
        "sglang.srt.mem_cache.memory_pool_host": module(
            "sglang.srt.mem_cache.memory_pool_host",
            DeepSeekV4PagedHostPool=DeepSeekV4PagedHostPool,
        ),
        "sglang.srt.mem_cache.hybrid_cache": module("sglang.srt.mem_cache.hybrid_cache"),
        "sglang.srt.mem_cache.hybrid_cache.linker_pool_assembler": module(
            "sglang.srt.mem_cache.hybrid_cache.linker_pool_assembler",
            DevicePoolEntry=DevicePoolEntry,
        ),
        "sglang.srt.observability": module("sglang.srt.observability"),
        "sglang.srt.observability.metrics_collector": module(
            "sglang.srt.observability.metrics_collector", StorageMetrics=StorageMetrics
        ),
        "sglang.srt.distributed": module("sglang.srt.distributed"),
        "sglang.srt.distributed.parallel_state": module(
            "sglang.srt.distributed.parallel_state", get_mooncake_transfer_engine=no_engine
        ),
    }


# The packages whose real modules are imported, without running their `__init__`.
PACKAGES = [
    "sglang",
    "sglang.srt",
    "sglang.srt.utils",
    "sglang.srt.mem_cache",
    "sglang.srt.mem_cache.cpp_utils",
    "sglang.srt.mem_cache.storage",
    "sglang.srt.mem_cache.storage.mooncake_store",
]


def install(site: str, build: str) -> None:
    """Puts the stubs in `sys.modules` and SGLang's packages (from the unpacked wheel `site`)
    in front of their heavy `__init__` files; extensions are built under `build`."""
    os.environ["SGLANG_CONFORMANCE_BUILD"] = build
    for name in PACKAGES:
        package = types.ModuleType(name)
        package.__path__ = [str(Path(site, *name.split(".")))]
        sys.modules[name] = package
    sys.modules.update(_torch())
    sys.modules.update(_mooncake())
    sys.modules.update(_modules())
