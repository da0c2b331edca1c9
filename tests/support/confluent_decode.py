"""Decodes messages in the Confluent wire format with fastavro, a third-party Avro decoder: a zero byte, the schema id
(4 bytes, big-endian), then the schemaless Avro body, read with the schema text registered under that id. Reads
{"schemas": {"<id>": "<schema JSON>"}, "messages": ["<hex>", ...]} as JSON on stdin; writes each record as a JSON line
(timestamps as their text), or fails on a message that is not in the format, names an id it was not given, or leaves
bytes of its body unread."""

import io
import json
import struct
import sys

import fastavro

request = json.load(sys.stdin)
schemas = {int(id): fastavro.parse_schema(json.loads(text)) for id, text in request["schemas"].items()}
for text in request["messages"]:
    message = bytes.fromhex(text)
    if message[0] != 0:
        sys.exit(f"not the Confluent wire format: it starts {message[:5].hex()}")
    (id,) = struct.unpack(">I", message[1:5])
    body = io.BytesIO(message[5:])
    record = fastavro.schemaless_reader(body, schemas[id])
    if body.tell() != len(message) - 5:
        sys.exit(f"schema id {id} left {len(message) - 5 - body.tell()} bytes of the body unread")
    print(json.dumps(record, default=str))
