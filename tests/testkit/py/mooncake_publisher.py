"""An independent Mooncake-format publisher (pyzmq + msgpack), driven by JSON lines on stdin.

It binds a PUB socket (on the port given as the first argument, or any free one) and an HTTP
admin side on 127.0.0.1, prints one line
`READY <event endpoint> <http base>`, then answers each command line with `OK` (or `ERR ...`):

  {"op": "store", "keys": [...]}            stored events, at most 64 a batch, seq from 1
  {"op": "store_unpublished", "keys": [...]} stored, but the events are lost (one seq each: a gap)
  {"op": "remove", "keys": [...]}           removed events
  {"op": "remove_silently", "keys": [...]}  removed with no event
  {"op": "skip", "n": N}                    skip N sequence numbers
  {"op": "restart"}                         close, bind the same port again, seq from 1, keys lost
  {"op": "raw", "frames_hex": [...]}        send these frames as one message
  {"op": "quit"}

Event maps follow the upstream Mooncake master field order (20 fields for stored, 17 for removed).
HTTP: GET /get_all_keys, /batch_query_keys?keys=a,b, /kv_events/status, /health.
"""

import json
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import msgpack
import zmq

MAX_BATCH = 64


class Master:
    def __init__(self, port):
        self.lock = threading.Lock()
        self.ctx = zmq.Context()
        self.sock = self._bind(f"tcp://127.0.0.1:{port or '*'}")
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.seq = 1
        self.event_id = 1
        self.keys = set()
        self.batches = 0
        self.events = 0
        self.dropped = 0

    def _bind(self, endpoint):
        sock = self.ctx.socket(zmq.PUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(endpoint)
        return sock

    def _event(self, kind, key, ts):
        stored = kind == "stored"
        ev = {
            "event_id": self.event_id,
            "timestamp": ts,
            "event_type": kind,
            "type": "BlockStored" if stored else "BlockRemoved",
            "model_name": None,
            "block_size": None,
            "additional_salt": None,
            "lora_name": None,
            "tenant_id": "default",
            "backend_id": "python",
            "group_id": None,
            "medium": "cpu",
            "dp_rank": None,
            "object_key": key,
            "seq_hashes": [],
            "block_hashes": [],
            "base_block_idx": 0 if stored else None,
        }
        if stored:
            ev["parent_hash"] = None
            ev["token_ids"] = None
            ev["parent_block_hash"] = None
        self.event_id += 1
        return ev

    def apply(self, kind, keys, publish=True):
        with self.lock:
            for i in range(0, len(keys), MAX_BATCH):
                chunk = keys[i : i + MAX_BATCH]
                for k in chunk:
                    if kind == "stored":
                        self.keys.add(k)
                    else:
                        self.keys.discard(k)
                if not publish:
                    # The master consumes one sequence per event dropped from its queue; event
                    # ids go to published events only, so none is consumed.
                    self.seq += len(chunk)
                    self.dropped += len(chunk)
                    continue
                ts = int(time.time() * 1000)
                events = [self._event(kind, k, ts) for k in chunk]
                seq = self.seq
                self.seq += 1
                payload = msgpack.packb([ts, events, 0], use_bin_type=True)
                self.sock.send_multipart([b"", seq.to_bytes(8, "big"), payload])
                self.batches += 1
                self.events += len(chunk)

    def remove_silently(self, keys):
        with self.lock:
            for k in keys:
                self.keys.discard(k)

    def skip(self, n):
        with self.lock:
            self.seq += n
            self.dropped += n

    def restart(self):
        with self.lock:
            self.sock.close(0)
            deadline = time.time() + 5
            while True:
                try:
                    self.sock = self._bind(self.endpoint)
                    break
                except zmq.ZMQError:
                    if time.time() > deadline:
                        raise
                    time.sleep(0.005)
            self.seq = 1
            self.event_id = 1
            self.keys = set()
            self.batches = self.events = self.dropped = 0

    def raw(self, frames):
        with self.lock:
            self.sock.send_multipart(frames)


def make_handler(master):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, body, ctype):
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            with master.lock:
                if url.path == "/get_all_keys":
                    body = "".join(k + "\n" for k in sorted(master.keys))
                    return self._send(body, "text/plain")
                if url.path == "/batch_query_keys":
                    q = urllib.parse.parse_qs(url.query).get("keys", [""])[0]
                    data = {k: {"ok": k in master.keys} for k in q.split(",") if k}
                    return self._send(json.dumps({"success": True, "data": data}), "application/json")
                if url.path == "/kv_events/status":
                    status = {
                        "enabled": True,
                        "published_batches": master.batches,
                        "published_events": master.events,
                        "dropped_events": master.dropped,
                        "skipped_unparsed_keys": 0,
                    }
                    return self._send(json.dumps(status), "application/json")
                if url.path == "/health":
                    return self._send("OK", "text/plain")
            self.send_error(404)

    return Handler


def main():
    master = Master(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(master))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    print(f"READY {master.endpoint} http://{host}:{port}", flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            cmd = json.loads(line)
            op = cmd["op"]
            if op == "store":
                master.apply("stored", cmd["keys"])
            elif op == "store_unpublished":
                master.apply("stored", cmd["keys"], publish=False)
            elif op == "remove":
                master.apply("removed", cmd["keys"])
            elif op == "remove_silently":
                master.remove_silently(cmd["keys"])
            elif op == "skip":
                master.skip(int(cmd["n"]))
            elif op == "restart":
                master.restart()
            elif op == "raw":
                master.raw([bytes.fromhex(f) for f in cmd["frames_hex"]])
            elif op == "quit":
                print("OK", flush=True)
                break
            else:
                raise ValueError(f"unknown op {op}")
            print("OK", flush=True)
        except Exception as e:  # answer, never die on one bad command
            print(f"ERR {e}", flush=True)
    server.shutdown()
    master.sock.close(0)
    master.ctx.term()


if __name__ == "__main__":
    main()
