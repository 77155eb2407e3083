"""Checks two scrapes of `serve`'s /metrics against Prometheus' conventions, with the official
Python parser (prometheus_client).

Usage: python check_metrics.py FIRST SECOND   (two files of exposition text)
Prints one JSON object: {"problems": [...], "families": N, "order_stable": bool, ...}.
"""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families

first, second = (open(p).read() for p in sys.argv[1:3])
problems = []


def raw_families(text):
    """The family names in order of their # TYPE lines, and their declared types."""
    out = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            out.append((name, kind))
    return out


families = list(text_string_to_metric_families(first))
declared = raw_families(first)
names = [n for n, _ in declared]
for name, kind in declared:
    if kind == "counter" and not name.endswith("_total"):
        problems.append(f"counter {name} does not end in _total")
    for unit in ("_ms", "_milliseconds", "_millis", "_us", "_kb", "_mb"):
        if name.endswith(unit) or (unit + "_") in name:
            problems.append(f"{name} is not in base units")
helps = {}
for line in first.splitlines():
    if line.startswith("# HELP "):
        parts = line.split(" ", 3)
        helps[parts[2]] = parts[3] if len(parts) > 3 else ""
for family in families:
    if family.type == "unknown":
        problems.append(f"{family.name} has no TYPE")
    if not family.documentation.strip():
        problems.append(f"{family.name} has no HELP")
    if not family.samples:
        problems.append(f"{family.name} has no sample")
for name, _ in declared:
    if not helps.get(name, "").strip():
        problems.append(f"{name} has no HELP line")
sample_names = {s.name for f in families for s in f.samples}
labels = {}
for f in families:
    for s in f.samples:
        labels.setdefault(s.name, []).append(s.labels)
for required in (
    "hicache_index_build_info",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_open_fds",
    "hicache_index_http_requests_total",
    "hicache_index_http_request_duration_seconds_bucket",
    "hicache_index_http_connections_open",
    "hicache_index_unconfirmed_seconds",
):
    if required not in sample_names:
        problems.append(f"no {required}")
build = labels.get("hicache_index_build_info", [{}])[0]
if not build.get("version"):
    problems.append(f"build_info without a version: {build}")
if "features" not in build:
    problems.append(f"build_info without features: {build}")
requests = labels.get("hicache_index_http_requests_total", [])
if not any(l.get("route") == "/v1/query" and l.get("status") == "400" for l in requests):
    problems.append(f"no 400 of /v1/query counted: {requests}")
if names != sorted(names):
    problems.append("families are not sorted by name")
order_stable = names == [n for n, _ in raw_families(second)]
if not order_stable:
    problems.append("the order of families changed between two scrapes")
print(json.dumps({
    "problems": problems,
    "families": len(families),
    "order_stable": order_stable,
    "build_info": build,
}))
