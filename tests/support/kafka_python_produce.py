"""Produces messages with kafka-python, a third-party Kafka client, the way its users send everything: keyed, to the
partition its default partitioner picks (murmur2 of the key, as the Java client's), no partition and no header given.
Reads {"bootstrap": "host:port", "api_version": [2, 3] or null, "messages": [{"topic", "key", "value_hex"}, ...]} as
JSON on stdin; writes, per message once the broker acknowledged it, {"topic", "key", "partition", "offset"} as a JSON
line. `api_version` skips kafka-python's probe of the broker's version: librdkafka's mock cluster answers ApiVersions
up to v2, and kafka-python 3.0.12 probes with v4 and cannot read the mock's refusal; as (2, 3) it asks with v2. The
version changes which requests kafka-python sends, not where a record goes.

Run it from a directory without a `kafka` folder (not the workspace root, whose `kafka/` crate Python would import
as a namespace package instead of kafka-python)."""

import json
import sys

from kafka import KafkaProducer

request = json.load(sys.stdin)
api_version = tuple(request["api_version"]) if request.get("api_version") else None
producer = KafkaProducer(bootstrap_servers=request["bootstrap"], acks="all", api_version=api_version)
sent = []
for message in request["messages"]:
    key = message["key"].encode()
    future = producer.send(message["topic"], key=key, value=bytes.fromhex(message["value_hex"]))
    sent.append((message, future))
producer.flush(timeout=30)
for message, future in sent:
    metadata = future.get(timeout=30)
    print(json.dumps({"topic": message["topic"], "key": message["key"], "partition": metadata.partition,
                      "offset": metadata.offset}))
producer.close(timeout=30)
