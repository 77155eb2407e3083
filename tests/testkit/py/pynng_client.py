"""A router's side of the hicache-index nng service, through pynng.

Usage: python pynng_client.py URL < requests.json
Reads a JSON list of requests (maps, sent as msgpack maps; {"raw_hex": "..."} sends those bytes
as they are), prints each answer as one JSON line, then one line {"round_trip_us": mean} timing
2,000 round trips of the first request.
"""
import json
import sys
import time

import msgpack
import pynng

url = sys.argv[1]
requests = json.load(sys.stdin)
with pynng.Req0(dial=url, recv_timeout=5000, send_timeout=5000) as socket:
    for request in requests:
        if "raw_hex" in request:
            socket.send(bytes.fromhex(request["raw_hex"]))
        else:
            socket.send(msgpack.packb(request))
        print(json.dumps(msgpack.unpackb(socket.recv())), flush=True)
    body = msgpack.packb(requests[0])
    rounds = 2000
    start = time.perf_counter()
    for _ in range(rounds):
        socket.send(body)
        socket.recv()
    elapsed = time.perf_counter() - start
    print(json.dumps({"round_trip_us": elapsed / rounds * 1e6}), flush=True)
