"""The schema registry's REST API as Confluent Schema Registry and Karapace document it, for the schema ids of the
Confluent wire format: GET /schemas/ids/{id} answers {"schema": "<the schema's JSON>"} (200), or
{"error_code": 40403, "message": ...} (404) for an id it does not hold, behind HTTP basic authentication. Its schemas
are the files DIR/{id}.avsc, read at each request, so a test registers one by writing its file.
POST /subjects/{subject}/versions with {"schema": "<JSON>"} (content type application/vnd.schemaregistry.v1+json)
registers a schema as the outbox does: the id of the same text if it holds it, else the next free one, written to
DIR/{id}.avsc and answered {"id": N}; while the file DIR/refuse exists, it answers its content as the HTTP status
instead (409, 422, 500), with Confluent's error body, and registers nothing. Each registration is appended to
DIR/subjects.log as "subject id" lines. Usage:
schema_registry.py DIR USER:PASSWORD [CERT.pem KEY.pem]; prints the port it listens on (loopback), then serves until
killed, over TLS with the certificate and key when given."""

import base64
import json
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

directory, credentials = sys.argv[1], sys.argv[2]
expected = "Basic " + base64.b64encode(credentials.encode()).decode()
registering = threading.Lock()


def register(subject, text):
    """The id of schema `text` under `subject`: the one of the same text, or the next free one."""
    with registering:
        held = {}
        for name in os.listdir(directory):
            if name.endswith(".avsc"):
                with open(os.path.join(directory, name)) as schema:
                    held[schema.read()] = int(name[: -len(".avsc")])
        id = held.get(text, max(held.values(), default=0) + 1)
        with open(os.path.join(directory, f"{id}.avsc"), "w") as schema:
            schema.write(text)
        with open(os.path.join(directory, "subjects.log"), "a") as log:
            log.write(f"{subject} {id}\n")
        return id


class Registry(BaseHTTPRequestHandler):
    def answer(self, status, body):
        text = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def do_GET(self):
        if self.headers.get("Authorization") != expected:
            return self.answer(401, {"error_code": 401, "message": "Unauthorized"})
        found = re.fullmatch(r"/schemas/ids/(\d+)", self.path)
        if not found:
            return self.answer(404, {"error_code": 404, "message": "HTTP 404 Not Found"})
        path = os.path.join(directory, found.group(1) + ".avsc")
        if not os.path.exists(path):
            return self.answer(404, {"error_code": 40403, "message": f"Schema {found.group(1)} not found"})
        with open(path) as schema:
            self.answer(200, {"schema": schema.read()})

    def do_POST(self):
        if self.headers.get("Authorization") != expected:
            return self.answer(401, {"error_code": 401, "message": "Unauthorized"})
        found = re.fullmatch(r"/subjects/([^/]+)/versions", self.path)
        if not found:
            return self.answer(404, {"error_code": 404, "message": "HTTP 404 Not Found"})
        if self.headers.get("Content-Type") != "application/vnd.schemaregistry.v1+json":
            return self.answer(415, {"error_code": 415, "message": "HTTP 415 Unsupported Media Type"})
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        refuse = os.path.join(directory, "refuse")
        if os.path.exists(refuse):
            with open(refuse) as status:
                code = int(status.read())
            return self.answer(code, {"error_code": code, "message": f"refused by the test registry ({code})"})
        self.answer(200, {"id": register(found.group(1), body["schema"])})

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Registry)
if len(sys.argv) > 3:
    import ssl

    # A client that refuses the certificate fails the handshake in accept(), an OSError the server ignores.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[3], sys.argv[4])
    server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
