#!/usr/bin/env python3
"""A long-lived Mooncake store client that the real-master tests drive over stdin/stdout.

Runs in the client venv (mooncake-transfer-engine-non-cuda 0.3.13.post1). Reads one JSON
command per line on stdin and answers each with exactly one JSON line on stdout
(`{"ok": true, ...}` or `{"ok": false, "error": "..."}`). Anything the native library prints
goes to stderr: stdout is kept for answers alone.

Commands
  {"op":"setup","master":"127.0.0.1:P"}              connect a store client to the master
  {"op":"hostname"}                                  the client's hostname (its segment's name,
                                                     `127.0.0.1:PORT`) and the driver's pid
  {"op":"put","keys":[...]}                          put each key on its own (one event each)
  {"op":"put_batch","keys":[...]}                    one put_batch call (one event batch)
  {"op":"remove","keys":[...]}                       force-remove each key
  {"op":"exists","keys":[...]}                       is_exist for each key
  {"op":"close"}                                     close the client (the master drops its
                                                     keys without any event)
  {"op":"exit"}                                      answer, then exit
  {"op":"page_keys","tokens":[...],"page_size":N,"tp":T,"mla":false,"model":null,"pages":K}
                                                     the SGLang HiCache object keys of the first
                                                     K pages (all pages when K is absent)
  {"op":"put_pages", same fields}                    page_keys, then one put per key
  {"op":"put_requests","requests":[[tokens],...],"page_size":N,"tp":T,"mla":false,
   "model":null,"batch":1000,"remove_after_batch":0} every page of every request, put with
                                                     put_batch calls of `batch` keys, as fast as
                                                     possible; during each call but the first,
                                                     a thread force-removes the first R keys of
                                                     the previous one

put, put_pages, put_batch and put_requests take `"own_segment": true`: every object is placed
on this client's own segment (`ReplicateConfig.preferred_segment` = its hostname; without it the
master spreads objects over all mounted segments), so that a test gives a client an exact share
of the store, which leaves the master's listing when this client closes, crashes or stalls.

The key computation is written here independently of the Rust core (SGLang 0.5.23,
`mem_cache/utils.py` and the Mooncake HiCache backend): page i's hash is
SHA-256(prior || tokens of page i as u32 LE) with prior the digest of page i-1; the logical key
is `{P}_{H}` (P: the served model name with '/' replaced by '-') or `{H}`; MHA objects are
`{L}_{r}_k`, `{L}_{r}_v` for each TP rank r, MLA has the single object `{L}__k`.
"""

import hashlib
import json
import os
import struct
import sys
import threading
import time
import traceback

# Answers go to a private copy of stdout; fd 1 becomes stderr for the native library's prints.
_answers = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr

os.environ.setdefault("MC_TCP_BIND_ADDRESS", "127.0.0.1")

VALUE = b"x" * 64


def page_hashes(tokens, page_size):
    """SGLang's page hash chain: only full pages count."""
    prior = b""
    out = []
    for start in range(0, len(tokens) // page_size * page_size, page_size):
        page = tokens[start:start + page_size]
        digest = hashlib.sha256(prior + struct.pack("<%dI" % len(page), *page)).digest()
        out.append(digest.hex())
        prior = digest
    return out


def page_object_keys(page_hash, tp, mla, model):
    """The physical keys of one logical page (PP 1, no DCP, no head split)."""
    prefix = model.replace("/", "-") if model else None
    logical = f"{prefix}_{page_hash}" if prefix else page_hash
    if mla:
        return [f"{logical}__k"]
    keys = []
    for rank in range(tp):
        keys.append(f"{logical}_{rank}_k")
        keys.append(f"{logical}_{rank}_v")
    return keys


def request_keys(cmd, tokens):
    hashes = page_hashes(tokens, int(cmd["page_size"]))
    pages = cmd.get("pages")
    if pages is not None:
        hashes = hashes[: int(pages)]
    keys = []
    for h in hashes:
        keys.extend(page_object_keys(h, int(cmd.get("tp", 1)), bool(cmd.get("mla")), cmd.get("model")))
    return hashes, keys


class Driver:
    def __init__(self):
        self.store = None

    def need_store(self):
        if self.store is None:
            raise RuntimeError("no store: send setup first")
        return self.store

    def op_setup(self, cmd):
        from mooncake.store import MooncakeDistributedStore

        store = MooncakeDistributedStore()
        rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 64 << 20, 16 << 20, "tcp", "", cmd["master"])
        if rc != 0:
            raise RuntimeError(f"setup returned {rc}")
        self.store = store
        return {}

    def config(self, cmd):
        """The ReplicateConfig a put of `cmd` uses: the client's own segment when asked."""
        from mooncake.store import ReplicateConfig

        config = ReplicateConfig()
        if cmd.get("own_segment"):
            config.preferred_segment = self.need_store().get_hostname()
        return config

    def op_hostname(self, cmd):
        return {"hostname": self.need_store().get_hostname(), "pid": os.getpid()}

    def put_each(self, keys, config):
        store = self.need_store()
        codes = [store.put(k, VALUE, config) for k in keys]
        failed = [(k, c) for k, c in zip(keys, codes) if c != 0]
        if failed:
            raise RuntimeError(f"{len(failed)} puts failed, first {failed[0]}")
        return {"count": len(keys)}

    def op_put(self, cmd):
        return self.put_each(cmd["keys"], self.config(cmd))

    def op_put_batch(self, cmd):
        keys = cmd["keys"]
        rc = self.need_store().put_batch(keys, [VALUE] * len(keys), self.config(cmd))
        if rc != 0:
            raise RuntimeError(f"put_batch returned {rc}")
        return {"count": len(keys)}

    def op_remove(self, cmd):
        store = self.need_store()
        codes = [store.remove(k, True) for k in cmd["keys"]]
        failed = [(k, c) for k, c in zip(cmd["keys"], codes) if c != 0]
        if failed:
            raise RuntimeError(f"{len(failed)} removes failed, first {failed[0]}")
        return {"count": len(codes)}

    def op_exists(self, cmd):
        store = self.need_store()
        return {"exists": [store.is_exist(k) == 1 for k in cmd["keys"]]}

    def op_close(self, cmd):
        store = self.need_store()
        rc = store.close()
        self.store = None
        return {"rc": rc}

    def op_page_keys(self, cmd):
        hashes, keys = request_keys(cmd, cmd["tokens"])
        return {"hashes": hashes, "keys": keys}

    def op_put_pages(self, cmd):
        hashes, keys = request_keys(cmd, cmd["tokens"])
        self.put_each(keys, self.config(cmd))
        return {"hashes": hashes, "keys": keys}

    def op_put_requests(self, cmd):
        keys = []
        for tokens in cmd["requests"]:
            keys.extend(request_keys(cmd, tokens)[1])
        store = self.need_store()
        config = self.config(cmd)
        batch = int(cmd.get("batch", 1000))
        remove_after = int(cmd.get("remove_after_batch", 0))
        removed = []
        errors = []

        def remove_all(victims):
            for k in victims:
                rc = store.remove(k, True)
                if rc != 0:
                    errors.append(f"remove {k} returned {rc}")
                else:
                    removed.append(k)

        started = time.monotonic()
        previous = []
        for i in range(0, len(keys), batch):
            chunk = keys[i : i + batch]
            # Single removes of the previous batch's first keys run during this batch's burst,
            # where a small master queue may drop their events.
            remover = threading.Thread(target=remove_all, args=(previous[:remove_after],))
            remover.start()
            rc = store.put_batch(chunk, [VALUE] * len(chunk), config)
            remover.join()
            if rc != 0:
                raise RuntimeError(f"put_batch of keys {i}.. returned {rc}")
            previous = chunk
        seconds = time.monotonic() - started
        if errors:
            raise RuntimeError(f"{len(errors)} removes failed, first: {errors[0]}")
        return {"keys": keys, "removed": removed, "seconds": seconds}


def main():
    driver = Driver()
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        cmd = {}
        try:
            cmd = json.loads(line)
            op = cmd["op"]
            if op == "exit":
                _answers.write(json.dumps({"ok": True}) + "\n")
                _answers.flush()
                break
            handler = getattr(driver, "op_" + op, None)
            if handler is None:
                raise RuntimeError(f"unknown op {op!r}")
            answer = handler(cmd)
            answer["ok"] = True
        except Exception as e:  # answer every command, whatever happens
            traceback.print_exc(file=sys.stderr)
            answer = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        _answers.write(json.dumps(answer) + "\n")
        _answers.flush()
    # Exit without running the native library's teardown, which can hang without a master.
    _answers.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
