#!/usr/bin/env python3
"""Captures what a real 0.3.14 master publishes for an object with a disk replica.

Run in the client venv (pyzmq, msgpack, mooncake 0.3.13.post1), inside a private network
namespace, with MOONCAKE_MASTER pointing at the 0.3.14 `mooncake_master`:

    flock /tmp/mooncake.lock unshare --net -- bash -c 'ip link set lo up &&
      MOONCAKE_MASTER=.../master/bin/mooncake_master .../client/bin/python \
      tests/mooncake/capture_disk_replica.py > out.jsonl'

The master runs with `--root_fs_dir`: a store client then persists every put to a file and
commits a DISK replica (`PutEnd(key, ReplicaType::DISK)`, Mooncake `client_service.cpp`
`PutToLocalFile`). Steps, each printed as a `{"step": ...}` line before its batches:
  1. put 4 keys of 64 bytes (one page of TP 2);
  2. force-remove the first key;
  3. put 40 values of 1 MiB into a 16 MiB segment (memory eviction while the files remain).
Every batch received is one line `{"frames_hex": [...], "decoded": [...]}`.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import msgpack
import zmq

os.environ.setdefault("MC_TCP_BIND_ADDRESS", "127.0.0.1")
from mooncake.store import MooncakeDistributedStore  # noqa: E402

RPC, METRICS, EVENTS = 50551, 50552, 50557
H = "cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72"


def drain(sub, wait=1.0):
    deadline = time.time() + wait
    while time.time() < deadline:
        if sub.poll(100):
            frames = sub.recv_multipart()
            decoded = msgpack.unpackb(frames[2], raw=False)
            print(json.dumps({"frames_hex": [f.hex() for f in frames], "decoded": decoded}),
                  flush=True)
            deadline = time.time() + wait


def main():
    root = tempfile.mkdtemp(prefix="mooncake-disk-")
    master = subprocess.Popen([
        os.environ["MOONCAKE_MASTER"], f"--rpc_port={RPC}", "--rpc_address=127.0.0.1",
        f"--metrics_port={METRICS}", "--metrics_host=127.0.0.1", "--enable_kv_events=true",
        f"--kv_events_bind_endpoint=tcp://127.0.0.1:{EVENTS}",
        "--kv_events_backend_id=capture-node", f"--root_fs_dir={root}",
    ], stdout=sys.stderr, stderr=sys.stderr)
    try:
        time.sleep(1.0)
        ctx = zmq.Context()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(f"tcp://127.0.0.1:{EVENTS}")
        time.sleep(0.5)
        store = MooncakeDistributedStore()
        rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "",
                         f"127.0.0.1:{RPC}")
        print(json.dumps({"step": "setup", "rc": rc, "root_fs_dir": root}), flush=True)
        keys = [f"{H}_{r}_{kv}" for r in range(2) for kv in "kv"]
        print(json.dumps({"step": "put 4 keys"}), flush=True)
        for k in keys:
            print(json.dumps({"put": k, "rc": store.put(k, b"x" * 64)}), flush=True)
        drain(sub, 3.0)
        files = sorted(os.path.relpath(os.path.join(d, f), root)
                       for d, _, fs in os.walk(root) for f in fs)
        print(json.dumps({"step": "files under root_fs_dir", "files": files}), flush=True)
        print(json.dumps({"step": "force-remove the first key"}), flush=True)
        print(json.dumps({"remove": keys[0], "rc": store.remove(keys[0], True)}), flush=True)
        drain(sub, 2.0)
        print(json.dumps({"step": "put 40 x 1 MiB into a 16 MiB segment"}), flush=True)
        for i in range(40):
            store.put(f"big_{i}_0_k", b"y" * (1 << 20))
        drain(sub, 3.0)
        exist = {k: store.is_exist(k) for k in ["big_0_0_k", "big_39_0_k"]}
        print(json.dumps({"step": "exists after eviction", "exists": exist}), flush=True)
        store.close()
        drain(sub, 1.0)
    finally:
        master.kill()
        master.wait()


if __name__ == "__main__":
    main()
