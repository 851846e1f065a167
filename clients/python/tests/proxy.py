"""A loopback HTTP proxy that misbehaves on purpose, in front of a live `serve`.

Each request is read whole, then handled by the first rule whose method and
path prefix match it (a rule is used `times` times, then dropped):

- `drop`: forward it, read the server's whole answer (so the server has
  committed), then close the connection without a byte: an answer lost on
  the way back;
- `status`: answer it here with that status (and `Retry-After`, if given),
  never forwarding it;
- otherwise it is forwarded and the answer relayed.

`seen` records every request (method, path, headers, body) for assertions.
"""

from __future__ import annotations

import http.client
import socket
import threading
import urllib.parse
from dataclasses import dataclass, field
from typing import Optional


@dataclass
class Rule:
    method: str
    path: str
    action: str  # "drop" or "status"
    times: int = 1
    status: int = 503
    retry_after: Optional[str] = None


@dataclass
class Seen:
    method: str
    path: str
    headers: dict
    body: bytes
    action: str


@dataclass
class Proxy:
    upstream: str
    rules: list = field(default_factory=list)
    seen: list = field(default_factory=list)

    def __post_init__(self):
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._up = urllib.parse.urlsplit(self.upstream)
        threading.Thread(target=self._serve, daemon=True).start()

    def add(self, rule: Rule) -> "Proxy":
        with self._lock:
            self.rules.append(rule)
        return self

    def requests(self, method: str, path: str) -> list:
        return [s for s in self.seen if s.method == method and s.path.startswith(path)]

    def close(self) -> None:
        self._sock.close()

    def _serve(self):
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _rule(self, method: str, path: str) -> Optional[Rule]:
        with self._lock:
            for r in self.rules:
                if r.method == method and path.startswith(r.path):
                    r.times -= 1
                    if r.times <= 0:
                        self.rules.remove(r)
                    return r
        return None

    def _handle(self, conn: socket.socket):
        with conn:
            f = conn.makefile("rb")
            while True:
                line = f.readline()
                if not line:
                    return
                method, path, _ = line.decode("latin-1").split(" ", 2)
                headers = {}
                while True:
                    h = f.readline().decode("latin-1").rstrip("\r\n")
                    if not h:
                        break
                    name, _, value = h.partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = f.read(int(headers.get("content-length", "0") or 0))
                rule = self._rule(method, path)
                action = rule.action if rule else "forward"
                with self._lock:
                    self.seen.append(Seen(method, path, headers, body, action))
                if rule and rule.action == "status":
                    extra = f"Retry-After: {rule.retry_after}\r\n" if rule.retry_after else ""
                    payload = b'{"type":"/problems/unavailable","title":"injected","status":%d,"detail":"injected by the test proxy"}' % rule.status
                    conn.sendall(
                        (f"HTTP/1.1 {rule.status} Injected\r\ncontent-type: application/problem+json\r\n{extra}"
                         f"content-length: {len(payload)}\r\nconnection: close\r\n\r\n").encode() + payload
                    )
                    return
                up = http.client.HTTPConnection(self._up.hostname, self._up.port, timeout=120)
                try:
                    fwd = {k: v for k, v in headers.items() if k not in ("host", "connection", "keep-alive")}
                    up.request(method, path, body=body or None, headers=fwd)
                    resp = up.getresponse()
                    data = resp.read()
                finally:
                    up.close()
                if rule and rule.action == "drop":
                    # The server answered (and so committed); the answer never arrives.
                    conn.shutdown(socket.SHUT_RDWR)
                    return
                head = f"HTTP/1.1 {resp.status} {resp.reason}\r\n"
                for k, v in resp.getheaders():
                    if k.lower() not in ("content-length", "connection", "transfer-encoding", "keep-alive"):
                        head += f"{k}: {v}\r\n"
                head += f"content-length: {len(data)}\r\nconnection: close\r\n\r\n"
                conn.sendall(head.encode("latin-1") + data)
                return
