"""Checks `serve`'s /openapi.json: a valid OpenAPI document (openapi-spec-validator), and real
answers of every kind valid against the schemas it names (jsonschema).

Usage: python check_openapi.py DOCUMENT EXCHANGES
EXCHANGES is a JSON list of {"method", "path", "status", "request"?: body, "answer": body}.
Prints one JSON object: {"problems": [...], "checked": N}.
"""
import json
import sys

import jsonschema
from openapi_spec_validator import validate

doc = json.load(open(sys.argv[1]))
exchanges = json.load(open(sys.argv[2]))
problems = []
try:
    validate(doc)
except Exception as e:  # noqa: BLE001 - any validation failure is a problem to report
    problems.append(f"invalid OpenAPI document: {str(e)[:500]}")


def validator(schema):
    root = {"components": doc.get("components", {})}
    root.update(schema)
    return jsonschema.Draft202012Validator(root)


checked = 0
for x in exchanges:
    op = doc["paths"].get(x["path"], {}).get(x["method"].lower())
    if op is None:
        problems.append(f"{x['method']} {x['path']} is not in the document")
        continue
    if "request" in x:
        body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
        if "schema" not in body:
            problems.append(f"{x['path']}: no request schema")
        else:
            for error in validator(body["schema"]).iter_errors(x["request"]):
                problems.append(f"{x['path']} request {x['request']}: {error.message}")
    response = op.get("responses", {}).get(str(x["status"]))
    if response is None:
        problems.append(f"{x['path']}: status {x['status']} is not documented")
        continue
    content = response.get("content", {})
    schema = (content.get("application/json") or {}).get("schema")
    if schema is None:
        problems.append(f"{x['path']} {x['status']}: no JSON schema")
        continue
    for error in validator(schema).iter_errors(x["answer"]):
        problems.append(f"{x['path']} {x['status']} answer {json.dumps(x['answer'])[:200]}: {error.message}")
    checked += 1
print(json.dumps({"problems": problems, "checked": checked}))
