#!/usr/bin/env python3
"""A worker of the lease test (tests/serve.rs): it takes a slot of the `jobs` CONCURRENT policy, renews it, works,
releases it, ROUNDS times, printing each lease as a JSON line before it works under it. With ROUNDS 0 it takes one
lease and hangs on to it without renewing, as a worker that crashed while holding one: the test SIGKILLs it.

usage: lease_worker.py BASE_URL SECRET WORKER ROUNDS TTL_MS
"""
import json
import sys
import time
import urllib.error
import urllib.request

base, secret, worker, rounds, ttl_ms = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])


def post(path, body):
    request = urllib.request.Request(
        base + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": "Bearer " + secret, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def fail(what, status, body):
    print(json.dumps({"worker": worker, "failed": what, "status": status, "body": body}), flush=True)
    sys.exit(1)


def acquire(attempt):
    body = {"tenant": "org-1", "metric": "jobs", "ttl_ms": ttl_ms, "idempotency_key": f"{worker}-{attempt}"}
    return post("/v1/leases", body)


attempt, done, denied = 0, 0, 0
while done < max(rounds, 1):
    status, body = acquire(attempt)
    attempt += 1
    if status == 429:
        denied += 1
        time.sleep(0.02)
        continue
    if status != 200:
        fail("acquire", status, body)
    lease = {"worker": worker, "lease_id": body["lease_id"], "fencing_token": body["fencing_token"]}
    print(json.dumps(lease), flush=True)
    if rounds == 0:
        time.sleep(3600)
    time.sleep(0.03)
    renew = {"fencing_token": lease["fencing_token"], "ttl_ms": ttl_ms}
    status, body = post(f"/v1/leases/{lease['lease_id']}/renew", renew)
    if status != 200:
        fail("renew", status, body)
    time.sleep(0.03)
    status, body = post(f"/v1/leases/{lease['lease_id']}/release", {"fencing_token": lease["fencing_token"]})
    if status != 200:
        fail("release", status, body)
    done += 1
print(json.dumps({"worker": worker, "done": done, "denied": denied}), flush=True)
