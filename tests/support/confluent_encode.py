"""Encodes events in the Confluent wire format with fastavro, a third-party Avro encoder: a zero byte, the schema id
(4 bytes, big-endian), then the schemaless Avro body. Reads {"schema": ..., "id": N, "records": [...]} as JSON on
stdin; writes one hex-encoded message per line."""

import io
import json
import struct
import sys

import fastavro

request = json.load(sys.stdin)
schema = fastavro.parse_schema(request["schema"])
for record in request["records"]:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, schema, record)
    print((b"\x00" + struct.pack(">I", request["id"]) + body.getvalue()).hex())
