"""hicache-index against SGLang's own code: keys, page hashes and layout documents (issue 28).

Run by `.ci/sglang-conformance`, which fetches SGLang's wheel (no dependencies) and builds the
binary. For every launch configuration of `CONFIGS` this harness

1. builds one `MooncakeStore` per rank (TP x PP x attention CP) with SGLang's real constructor,
   over the recording Mooncake client and host pools of `stubs.py`, and writes the pages of every
   token sequence of `SEQUENCES` through SGLang's own `batch_set_v1` (the KV pool) and
   `batch_set_v2` (the side pools): the keys the fake store records are the keys SGLang writes.
   Every rank writes every pool: the ranks SGLang's controller skips (MLA replicas outside the
   first DCP group) would write keys their writer also writes, so the set is the same;
2. computes each sequence's page hashes with SGLang's own code (`get_storage_hash_str` of
   `mem_cache/utils.py`, over its `RadixKey`, through its C++ binding, compiled here);
3. asks SGLang for the instance's layout document: `describe_l3_object_layout` of each PP stage's
   TP rank 0, merged by `merge_l3_layouts`, as `/get_hicache_l3_cache_layout` answers it
   (under DCP it raises: such launches have no document and are compared through the flags);

and compares with ours: `hicache-index keys` with the launch flags, and with the document
(`keys --layout`: an enabled document must give SGLang's keys exactly, a disabled one must be
refused as disabled), `hicache-index hash` for every sequence, and `serve --workers` against a fake
worker per configuration answering SGLang's document (an enabled one must be learned with
SGLang's objects a page and key prefix, a disabled one reported as no layout with its reason).

Functions too heavy to import are loaded from SGLang's source by name (`load_defs`), so they
run as SGLang wrote them; the two request-level rules that live in modules too heavy for that are
transcribed in `request_namespace`, pinned to their source. Exits 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import ast
import http.server
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).parent))
import stubs  # noqa: E402


# --- the launch configurations --------------------------------------------------------------
@dataclass
class Side:
    """A side pool: SGLang's pool name, the host pool class, and our --pool value."""

    name: str
    host: str  # mha, mla, dsv4, side, mamba
    flag: str
    conv: int = 0
    temporal: bool = True
    # The sidecar spec's index source and policy (None: SGLang's default for the pool).
    spec: Optional[tuple] = None


@dataclass
class Config:
    """One SGLang launch, with the flags that describe it to hicache-index."""

    name: str
    page_size: int = 4
    tp: int = 1
    pp: int = 1
    mla: bool = False
    tp_lcm: Optional[int] = None
    tag: Optional[str] = None
    model: Optional[str] = "org/model"
    dcp: int = 1
    cp: int = 1
    eagle: bool = False
    logical_kv: bool = False
    sides: list = field(default_factory=list)
    swa_window: Optional[int] = None

    def flags(self) -> list:
        out = ["--page-size", str(self.page_size), "--tp", str(self.tp), "--pp", str(self.pp)]
        if self.mla:
            out.append("--mla")
        if self.tp_lcm:
            out += ["--tp-lcm", str(self.tp_lcm)]
        if self.tag is not None:
            out += ["--tag", self.tag]
        if self.model is not None:
            out += ["--model", self.model]
        if self.dcp > 1:
            out += ["--dcp", str(self.dcp)]
        if self.cp > 1:
            out += ["--cp", str(self.cp)]
        for side in self.sides:
            out += ["--pool", side.flag]
        if self.logical_kv:
            out.append("--logical-kv")
        return out

    @property
    def hash_page_size(self) -> int:
        # Under DCP a logical page spans every DCP rank's slice.
        return self.page_size * self.dcp


def mamba(conv=2, temporal=True):
    return Side("mamba", "mamba", f"mamba,conv={conv},temporal={str(temporal).lower()},trailing=1",
                conv=conv, temporal=temporal)


def swa(host, window):
    return Side("swa", host, f"swa,trailing={window}")


def dsv4_side(name, trailing=None):
    flag = f"{name},trailing={trailing}" if trailing else name
    spec = ("swa", "trailing_pages") if trailing else ("kv", "all_pages")
    return Side(name, "side", flag, spec=spec)


DSV4_BASE = [
    "deepseek_v4_c4",
    "deepseek_v4_c4_indexer",
    "deepseek_v4_c4_indexer_scale",
    "deepseek_v4_c128",
]
DSV4_STATES = ["deepseek_v4_c4_state", "deepseek_v4_c4_indexer_state", "deepseek_v4_c128_state"]


def dsv4(name, extra=(), pp=1, tp=4, window=2):
    sides = [Side("swa", "dsv4", f"swa,trailing={window}")]
    sides += [dsv4_side(p) for p in list(DSV4_BASE) + list(extra)]
    sides += [dsv4_side(p, trailing=window) for p in DSV4_STATES]
    return Config(name, page_size=4, tp=tp, pp=pp, mla=True, model="deepseek-ai/DeepSeek-V4",
                  logical_kv=True, sides=sides, swa_window=window)


CONFIGS = [
    Config("mha_tp1", tp=1),
    Config("mha_tp2", tp=2),
    Config("mha_tp8", tp=8, page_size=8),
    Config("mha_tp2_pp2", tp=2, pp=2),
    Config("mha_tp2_split4", tp=2, tp_lcm=4),
    Config("mha_tp2_split4_pp2", tp=2, tp_lcm=4, pp=2),
    Config("mha_tag_only", tp=2, model=None, tag="prod"),
    Config("mha_empty_tag", tp=1, model=None, tag=""),
    Config("mha_no_prefix", tp=1, model=None),
    Config("mha_tag_and_model", tp=2, tag="prod", model="Qwen/Qwen3-8B"),
    Config("mha_eagle", tp=2, eagle=True),
    Config("mla_tp1", mla=True),
    Config("mla_tp2", tp=2, mla=True, model="deepseek-ai/DeepSeek-V3"),
    Config("mla_tp8", tp=8, mla=True, page_size=8),
    Config("mla_tp2_pp2", tp=2, pp=2, mla=True),
    Config("mla_tag", tp=2, mla=True, tag="t", model="deepseek-ai/DeepSeek-V3"),
    Config("mla_no_prefix", tp=2, mla=True, model=None),
    Config("mla_attention_cp2", tp=2, mla=True, cp=2),
    Config("mla_dcp2", tp=4, mla=True, dcp=2),
    Config("mla_dcp2_cp2", tp=4, mla=True, dcp=2, cp=2),
    Config("mla_dcp2_pp2", tp=2, mla=True, dcp=2, pp=2),
    Config("mla_dcp2_indexer", tp=2, mla=True, dcp=2, tag="t",
           sides=[Side("indexer", "side", "indexer")]),
    Config("mla_dcp2_mamba", tp=2, mla=True, dcp=2, sides=[mamba()]),
    Config("mha_mamba", tp=2, sides=[mamba()]),
    Config("mha_mamba_conv_only", tp=2, sides=[mamba(conv=1, temporal=False)]),
    Config("mha_mamba_pp2", tp=2, pp=2, sides=[mamba()]),
    Config("mla_mamba", tp=2, mla=True, sides=[mamba()]),
    Config("mha_swa", tp=2, sides=[swa("mha", 3)], swa_window=3),
    Config("mla_swa", tp=2, mla=True, sides=[swa("mla", 2)], swa_window=2),
    Config("mla_swa_pp2", tp=2, pp=2, mla=True, sides=[swa("mla", 2)], swa_window=2),
    Config("mha_draft_mha", tp=2, sides=[Side("draft", "mha", "draft")]),
    Config("mla_draft_mla", tp=2, mla=True, sides=[Side("draft", "mla", "draft,mla=true")]),
    Config("mla_draft_mha", tp=2, mla=True, sides=[Side("draft", "mha", "draft")]),
    Config("mla_draft_swa_mla", tp=2, mla=True,
           sides=[Side("draft_swa", "mla", "draft_swa,mla=true")]),
    Config("mha_draft_swa_mha", tp=2, sides=[Side("draft_swa", "mha", "draft_swa")]),
    Config("dsa_indexer", tp=2, mla=True, model="deepseek-ai/DeepSeek-V3.2",
           sides=[Side("indexer", "side", "indexer"),
                  Side("draft_indexer", "side", "draft_indexer")]),
    Config("dsa_indexer_pp2", tp=2, pp=2, mla=True, sides=[Side("indexer", "side", "indexer")]),
    dsv4("dsv4"),
    dsv4("dsv4_fp8", extra=["deepseek_v4_c4_rope", "deepseek_v4_c128_rope"]),
    dsv4("dsv4_c1_c2", extra=["deepseek_v4_c1", "deepseek_v4_c1_indexer",
                              "deepseek_v4_c1_indexer_scale", "deepseek_v4_c2",
                              "deepseek_v4_c2_indexer", "deepseek_v4_c2_indexer_scale"]),
    dsv4("dsv4_pp2", pp=2, tp=2),
]


@dataclass
class Sequence:
    """A request: its tokens and namespace fields as the client sends them."""

    name: str
    tokens: list
    extra_key: Optional[str] = None
    cache_salt: Optional[str] = None
    lora_id: Optional[str] = None


def _tokens(seed, count):
    return [(seed * 7919 + i * 104729) % 151_000 for i in range(count)]


# Enough tokens for 3 full pages of 8 (and more of 4), plus a partial page.
SEQUENCES = [
    Sequence("plain", list(range(1, 27))),
    Sequence("wide_token", _tokens(3, 10) + [2**32 + 5] + _tokens(4, 15)),
    Sequence("cache_salt", _tokens(5, 26), cache_salt="tenant-a"),
    Sequence("extra_key_and_lora", _tokens(6, 26), extra_key="user-1", lora_id="lora-7"),
    Sequence("lora_only", _tokens(7, 26), lora_id="lora-9"),
    Sequence("both_fields", _tokens(8, 26), extra_key="k", cache_salt="s"),
    Sequence("empty_fields", _tokens(9, 26), extra_key="", cache_salt=""),
    Sequence("empty_key_with_salt", _tokens(10, 26), extra_key="", cache_salt="s"),
]


def request_namespace(seq: Sequence):
    """The (extra_key, cache_salt) SGLang hashes a request with.

    Transcribed from SGLang 0.5.23 (the modules are too heavy to import):
    `managers/io_struct.py`, `GenerateReqInput._normalize_single_inputs`: `""` becomes None for
    `extra_key` and `cache_salt`; `managers/schedule_batch.py`, `Req.__init__`: with a LoRA id,
    `extra_key = (extra_key or "") + lora_id`, and `cache_salt = cache_salt or None`.
    """
    extra_key = None if seq.extra_key == "" else seq.extra_key
    cache_salt = None if seq.cache_salt == "" else seq.cache_salt
    if seq.lora_id is not None:
        extra_key = (extra_key or "") + seq.lora_id
    return extra_key, cache_salt or None


# --- SGLang's code --------------------------------------------------------------------------
def load_defs(path: Path, names, namespace: dict) -> dict:
    """Runs the top-level definitions `names` of SGLang's source file `path` in `namespace`."""
    tree = ast.parse(path.read_text(), str(path))
    wanted = [
        node for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names
    ]
    missing = set(names) - {node.name for node in wanted}
    if missing:
        raise SystemExit(f"{path}: no {sorted(missing)} (another SGLang version?)")
    module = ast.Module(body=wanted, type_ignores=[])
    exec(compile(module, str(path), "exec"), namespace)
    return namespace


class Sglang:
    """SGLang's key builders, page-hash code and layout-document code, loaded from the wheel."""

    def __init__(self, site: str, build: str):
        stubs.install(site, build)
        from sglang.srt.mem_cache import hicache_storage
        from sglang.srt.mem_cache.cpp_utils import native_hash
        from sglang.srt.mem_cache.storage.mooncake_store import mooncake_store

        self.storage = hicache_storage
        self.store_module = mooncake_store
        mem_cache = Path(site, "sglang", "srt", "mem_cache")
        ns = {"__name__": "sglang_conformance", "get_native_hash": native_hash.get_native_hash}
        exec("from __future__ import annotations\nimport hashlib\nfrom array import array\n"
             "from typing import Any, Iterator, List, Optional, Tuple, Union", ns)
        load_defs(mem_cache / "utils.py",
                  ["get_hash_str", "storage_namespace_seed", "get_storage_hash_str"], ns)
        load_defs(mem_cache / "radix_cache.py", ["RadixKey"], ns)
        self.hash_ns = ns

    def page_hashes(self, seq: Sequence, page_size: int, eagle: bool) -> list:
        """The storage page hashes of the sequence's full pages, as SGLang computes them."""
        extra_key, cache_salt = request_namespace(seq)
        key = self.hash_ns["RadixKey"](array("q", seq.tokens), extra_key, is_bigram=eagle,
                                       cache_salt=cache_salt)
        key = key.page_aligned(page_size)
        if len(key) == 0:
            return []
        return list(self.hash_ns["get_storage_hash_str"](key, None, page_size=page_size))

    def _host(self, kind: str, page_size: int, side: Optional[Side] = None, kv=True):
        if kind == "mha":
            return stubs.MHATokenToKVPoolHost(page_size, kv)
        if kind == "mla":
            return stubs.MLATokenToKVPoolHost(page_size, kv)
        if kind == "dsv4":
            return stubs.DeepSeekV4PagedHostPool(page_size, kv)
        if kind == "mamba":
            return stubs.MambaPoolHost(page_size, side.conv, side.temporal)
        return stubs.SidePoolHost(page_size)

    def stores(self, cfg: Config):
        """One MooncakeStore per rank, with the launch's host pools: [(tp, pp, cp, store)]."""
        HiCacheStorageConfig = self.storage.HiCacheStorageConfig
        PoolName = self.storage.PoolName
        out = []
        extra = {"master_server_address": "127.0.0.1:1", "check_server": False}
        if cfg.tag is not None:
            extra["extra_backend_tag"] = cfg.tag
        for pp_rank in range(cfg.pp):
            for tp_rank in range(cfg.tp):
                for cp_rank in range(cfg.cp):
                    storage_config = HiCacheStorageConfig(
                        tp_rank=tp_rank, tp_size=cfg.tp, pp_rank=pp_rank, pp_size=cfg.pp,
                        attn_cp_rank=cp_rank, attn_cp_size=cfg.cp, is_mla_model=cfg.mla,
                        enable_storage_metrics=False, is_page_first_layout=True,
                        model_name=cfg.model, tp_lcm_size=cfg.tp_lcm,
                        should_split_heads=bool(cfg.tp_lcm and cfg.tp_lcm > cfg.tp),
                        extra_config=dict(extra), dcp_size=cfg.dcp, dcp_rank=tp_rank % cfg.dcp,
                        logical_page_size=cfg.hash_page_size if cfg.dcp > 1 else None,
                    )
                    store = self.store_module.MooncakeStore(storage_config)
                    kv_kind = "mla" if cfg.mla else "mha"
                    store.register_mem_pool_host(
                        self._host(kv_kind, cfg.page_size, kv=not cfg.logical_kv))
                    for side in cfg.sides:
                        store.register_mem_host_pool_v2(
                            self._host(side.host, cfg.page_size, side), PoolName(side.name))
                    out.append((tp_rank, pp_rank, cp_rank, store))
        return out

    def written_keys(self, cfg: Config, stores, hashes: list) -> list:
        """Writes the pages through every rank's batch_set_v1 and batch_set_v2; returns what the
        store recorded."""
        PoolName = self.storage.PoolName
        PoolTransfer = self.storage.PoolTransfer
        stubs.Store.reset()
        if not hashes:
            return []
        kv_page = cfg.hash_page_size
        for _, _, _, store in stores:
            done = store.batch_set_v1(hashes, stubs.Tensor(range(len(hashes) * kv_page)))
            assert all(done), (cfg.name, done)
            transfers = [
                PoolTransfer(name=PoolName(side.name),
                             host_indices=stubs.Tensor(range(len(hashes) * cfg.page_size)),
                             keys=list(hashes))
                for side in cfg.sides
            ]
            if transfers:
                results = store.batch_set_v2(transfers)
                assert all(all(r) for r in results.values()), (cfg.name, results)
        return list(stubs.Store.puts)

    def document(self, cfg: Config, stores):
        """The instance's layout document as the worker's endpoint answers it, or why none."""
        SidecarPoolSpec = self.storage.SidecarPoolSpec
        PoolName = self.storage.PoolName
        PoolHitPolicy = self.storage.PoolHitPolicy
        specs = [
            SidecarPoolSpec(pool_name=PoolName(s.name), indices_from_pool=PoolName(s.spec[0]),
                            hit_policy=PoolHitPolicy(s.spec[1]))
            for s in cfg.sides if s.spec
        ]
        per_stage = []
        try:
            for tp_rank, pp_rank, cp_rank, store in stores:
                if tp_rank == 0 and cp_rank == 0:
                    per_stage.append(store.describe_l3_object_layout(
                        sidecar_pool_specs=specs, swa_trailing_pages=cfg.swa_window,
                        page_size=cfg.page_size))
        except Exception as e:  # SGLang's builder raises under DCP
            return None, f"{type(e).__name__}: {e}"
        merged = self.storage.merge_l3_layouts(per_stage)
        # What FastAPI sends: the document as JSON.
        return json.loads(json.dumps(merged)), None


# --- ours -----------------------------------------------------------------------------------
class Ours:
    """The hicache-index binary."""

    def __init__(self, binary: str):
        self.binary = binary

    def run(self, args):
        return subprocess.run([self.binary, *args], capture_output=True, text=True, timeout=60)

    def keys(self, page_hash: str, layout_args) -> tuple:
        out = self.run(["keys", "--page-hash", page_hash, *layout_args])
        return out.returncode, out.stdout.split(), out.stderr.strip()

    def hashes(self, seq: Sequence, page_size: int, eagle: bool) -> tuple:
        args = ["hash", "--page-size", str(page_size)]
        if eagle:
            args.append("--eagle")
        # The request's fields as a router passes them on; the binary applies SGLang's rules.
        extra_key = seq.extra_key
        if seq.lora_id is not None:
            extra_key = (extra_key or "") + seq.lora_id
        if extra_key is not None:
            args += ["--extra-key", extra_key]
        if seq.cache_salt is not None:
            args += ["--cache-salt", seq.cache_salt]
        args.append(",".join(str(t) for t in seq.tokens))
        out = self.run(args)
        return out.returncode, out.stdout.split(), out.stderr.strip()


class Workers(http.server.ThreadingHTTPServer):
    """SGLang workers played on 127.0.0.1, one per configuration under /<name>/."""

    daemon_threads = True

    def __init__(self, answers: dict):
        self.answers = answers  # name -> (served model, document)
        super().__init__(("127.0.0.1", 0), WorkerHandler)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{name}"


class WorkerHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        _, name, path = (self.path.split("/", 2) + ["", ""])[:3]
        answer = self.server.answers.get(name)
        if answer is None:
            return self.reply(404, {"detail": "Not Found"})
        model, document = answer
        if path == "v1/models":
            return self.reply(200, {"object": "list", "data": [
                {"id": model, "object": "model", "owned_by": "sglang", "root": model}]})
        if path == "get_hicache_l3_cache_layout":
            return self.reply(200, document)
        self.reply(404, {"detail": "Not Found"})

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_readyz(ours: Ours, urls: list, expected_models: int, deadline_s: float) -> dict:
    """Starts `serve --workers` on the fake workers and returns /readyz once every worker has
    been polled twice."""
    # serve logs to stderr, the address too ("http listening on http://..."): into a file read
    # here, so that a full pipe never blocks it.
    log = tempfile.NamedTemporaryFile(mode="w+", prefix="sglang-conformance-serve-", suffix=".log")
    proc = subprocess.Popen(
        [ours.binary, "serve", "--events", f"tcp://127.0.0.1:{free_port()}",
         "--listen", "127.0.0.1:0", "--workers", ",".join(urls),
         "--worker-poll-interval", "200ms"],
        stdout=subprocess.DEVNULL, stderr=log, text=True,
        env={**os.environ, "RUST_LOG": "warn,hicache_index_serve=info"})
    try:
        addr = None
        until = time.monotonic() + deadline_s
        while addr is None:
            if proc.poll() is not None:
                log.seek(0)
                raise SystemExit(f"serve exited with {proc.returncode}: {log.read()}")
            if time.monotonic() > until:
                raise SystemExit(f"serve did not say where it listens within {deadline_s} s")
            log.seek(0)
            for line in log.read().splitlines():
                if "http listening on http://" in line:
                    addr = line.split("http listening on http://", 1)[1].split()[0].strip()
            time.sleep(0.02)
        start = time.monotonic()
        seen_all = None
        while time.monotonic() - start < deadline_s:
            try:
                with urllib.request.urlopen(f"http://{addr}/readyz", timeout=5) as r:
                    body = json.loads(r.read())
            except urllib.error.HTTPError as e:  # 503 while not live: the body is the same
                body = json.loads(e.read())
            workers = body.get("workers", {})
            polled = sum(1 for w in workers.values() if w.get("layout") != "pending")
            if polled == len(urls) and len(body.get("models", {})) >= expected_models:
                seen_all = seen_all or time.monotonic()
                if time.monotonic() - seen_all > 0.5:  # one more poll round
                    return body
            time.sleep(0.05)
        raise SystemExit(f"serve did not poll every worker within {deadline_s} s: {body}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


# --- the comparison -------------------------------------------------------------------------
class Tally:
    """Counts of what was compared, and every mismatch."""

    def __init__(self):
        self.checked = {}
        self.failed = {}
        self.mismatches = []

    def check(self, what: str, ok: bool, detail: str, count: int = 1):
        self.checked[what] = self.checked.get(what, 0) + count
        if not ok:
            self.failed[what] = self.failed.get(what, 0) + count
            self.mismatches.append(f"{what}: {detail}")


def keys_of_page(written: list, page_hash: str) -> list:
    return sorted(k for k in written if k.startswith(page_hash) or f"_{page_hash}_" in k)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sglang", required=True, help="the unpacked sglang wheel")
    parser.add_argument("--version", required=True, help="its version (for the report)")
    parser.add_argument("--bin", required=True, help="the hicache-index binary")
    parser.add_argument("--build", required=True, help="where to compile SGLang's binding")
    parser.add_argument("--only", help="configurations whose name contains this")
    parser.add_argument("--dump", help="write every document and key to this JSON file")
    args = parser.parse_args()

    started = time.monotonic()
    sglang = Sglang(args.sglang, args.build)
    ours = Ours(args.bin)
    tally = Tally()
    configs = [c for c in CONFIGS if not args.only or args.only in c.name]
    dump = {}
    workers = {}
    hash_checked = set()
    tmp = tempfile.TemporaryDirectory(prefix="sglang-conformance-")

    for cfg in configs:
        stores = sglang.stores(cfg)
        document, no_document = sglang.document(cfg, stores)
        doc_path = None
        if document is not None:
            doc_path = os.path.join(tmp.name, f"{cfg.name}.json")
            Path(doc_path).write_text(json.dumps(document))
        dump[cfg.name] = {"flags": cfg.flags(), "document": document, "no_document": no_document,
                          "keys": {}}
        for seq in SEQUENCES:
            hashes = sglang.page_hashes(seq, cfg.hash_page_size, cfg.eagle)
            shape = (seq.name, cfg.hash_page_size, cfg.eagle)
            if shape not in hash_checked:
                hash_checked.add(shape)
                code, got, err = ours.hashes(seq, cfg.hash_page_size, cfg.eagle)
                tally.check("page hashes", code == 0 and got == hashes,
                            f"{shape}: SGLang {hashes}, ours {got} {err}", max(len(hashes), 1))
            written = sglang.written_keys(cfg, stores, hashes)
            for page_hash in hashes:
                expected = keys_of_page(written, page_hash)
                dump[cfg.name]["keys"][page_hash] = expected
                code, got, err = ours.keys(page_hash, cfg.flags())
                tally.check("keys (launch flags)", code == 0 and sorted(got) == expected,
                            f"{cfg.name} {seq.name}: SGLang {expected}, ours {sorted(got)} {err}",
                            len(expected))
                if doc_path is None or not document.get("enabled"):
                    continue
                code, got, err = ours.keys(page_hash, ["--layout", doc_path])
                tally.check("keys (SGLang's document)", code == 0 and sorted(got) == expected,
                            f"{cfg.name} {seq.name}: SGLang {expected}, ours {sorted(got)} {err}",
                            len(expected))
            if not written and hashes:
                tally.check("keys (launch flags)", False, f"{cfg.name}: SGLang wrote nothing")
        if doc_path is not None and not document.get("enabled"):
            # It may list one TP rank's objects only: used, it would claim too much.
            code, got, err = ours.keys("0" * 64, ["--layout", doc_path])
            tally.check("disabled documents refused", code != 0 and "disabled" in err,
                        f"{cfg.name}: a disabled document was used: {got} {err}")
        if document is not None:
            some_page = next(iter(dump[cfg.name]["keys"].values()), [])
            workers[cfg.name] = (f"conformance/{cfg.name}", document, len(some_page))
        elif cfg.dcp == 1:
            tally.check("documents", False, f"{cfg.name}: SGLang gave no document: {no_document}")
        else:
            # DCP: SGLang's layout builder raises; compared through the flags above.
            tally.check("no document under DCP", no_document is not None,
                        f"{cfg.name}: a DCP launch described itself: {document}")

    # Every document to serve --workers, one fake worker each.
    server = Workers({name: (model, doc) for name, (model, doc, _) in workers.items()})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        urls = [server.url(name) for name in workers]
        ready = serve_readyz(ours, urls, len(workers), deadline_s=60)
    finally:
        server.shutdown()
    for name, (model, document, objects) in workers.items():
        w = ready.get("workers", {}).get(server.url(name), {})
        m = ready.get("models", {}).get(model, {})
        if document.get("enabled"):
            ok = (w.get("layout") == "advertised" and w.get("objects") == objects
                  and w.get("key_prefix") == document["hicache_object_layout"].get("key_prefix")
                  and m.get("layout") == "agreed" and m.get("ready") is True)
        else:
            reason = document.get("reason") or ""
            mla = document["hicache_object_layout"].get("is_mla_backend")
            says = ("MHA workers do not in SGLang 0.5.23" if mla is False
                    else f"disabled: {reason}")
            ok = (w.get("layout") == "no_layout" and says in w.get("reason", "")
                  and m.get("layout") == "none" and m.get("ready") is False)
        tally.check("documents through serve --workers", ok,
                    f"{name}: worker {w}, model {m}, document {json.dumps(document)}")

    if args.dump:
        Path(args.dump).write_text(json.dumps(dump, indent=1))
    disabled = sum(1 for (_, d, _) in workers.values() if not d.get("enabled"))
    print(f"SGLang {args.version}: {len(configs)} launch configurations, {len(SEQUENCES)} token "
          f"sequences, {len(workers)} documents ({disabled} disabled), "
          f"{time.monotonic() - started:.1f} s")
    for what, count in tally.checked.items():
        print(f"  {what:34} {count - tally.failed.get(what, 0):5} of {count:5} match")
    for line in tally.mismatches[:40]:
        print(f"MISMATCH {line}")
    if len(tally.mismatches) > 40:
        print(f"... and {len(tally.mismatches) - 40} more")
    failed = sum(tally.failed.values())
    checked = sum(tally.checked.values())
    print(f"conformance: {checked - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
