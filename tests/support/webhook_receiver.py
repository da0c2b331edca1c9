"""A tenant's webhook receiver, as a third party writes one: it verifies each delivery with the Standard Webhooks
specification's own Python library (standardwebhooks, from PyPI), not the server's code.

Usage: webhook_receiver.py SECRET FAILURES LOG. Prints `listening on PORT` (127.0.0.1) on its first line, then answers
every POST: 500 to the first FAILURES requests, 204 to the others. Appends one JSON line per request to LOG, once
answered: {"id", "timestamp", "signature", "verified", "error", "status", "body"} (body parsed as JSON).
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from standardwebhooks.webhooks import Webhook

SECRET, FAILURES, LOG = sys.argv[1], int(sys.argv[2]), sys.argv[3]
seen = {"requests": 0}


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            Webhook(SECRET).verify(body, headers)
            verified, error = True, None
        except Exception as e:  # the library's WebhookVerificationError, or a malformed header
            verified, error = False, repr(e)
        seen["requests"] += 1
        status = 500 if seen["requests"] <= FAILURES else 204
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()
        line = {
            "id": headers.get("webhook-id"),
            "timestamp": headers.get("webhook-timestamp"),
            "signature": headers.get("webhook-signature"),
            "verified": verified,
            "error": error,
            "status": status,
            "body": json.loads(body),
        }
        with open(LOG, "a") as log:
            log.write(json.dumps(line) + "\n")

    def log_message(self, *args):
        pass


# One request at a time: the count of answers is the order they were asked in.
server = HTTPServer(("127.0.0.1", 0), Receiver)
print(f"listening on {server.server_address[1]}", flush=True)
server.serve_forever()
