"""A webhook receiver for scripts/webhooks-test: records every request it is
sent (its headers, lowercased, and its raw body in base64) as one JSON line
in the file named by its second argument, and answers 204. Listens on
127.0.0.1 at the port named by its first argument."""

import base64
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, out = int(sys.argv[1]), sys.argv[2]


class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        record = {
            "path": self.path,
            "headers": {name.lower(): value for name, value in self.headers.items()},
            "body": base64.b64encode(body).decode(),
        }
        with open(out, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", port), Hook).serve_forever()
