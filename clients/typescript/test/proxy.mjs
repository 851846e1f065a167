// A loopback HTTP proxy that misbehaves on purpose, in front of a live
// `serve`. Each request is handled by the first rule whose method and path
// prefix match it (a rule is used `times` times, then dropped):
// - "drop": forward it, read the server's whole answer (so the server has
//   committed), then destroy the connection without a byte: an answer lost
//   on the way back;
// - "status": answer it here with that status (and Retry-After, if given);
// - otherwise forward it and relay the answer.
// `seen` records every request (method, path, headers, body, action).
import { createServer } from "node:http";

export class Proxy {
  constructor(upstream) {
    this.upstream = upstream.replace(/\/+$/, "");
    this.rules = [];
    this.seen = [];
    this.server = createServer((req, res) => this.handle(req, res));
  }

  async start() {
    await new Promise((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${this.server.address().port}`;
    return this;
  }

  add(rule) {
    this.rules.push({ times: 1, status: 503, ...rule });
    return this;
  }

  requests(method, path) {
    return this.seen.filter((s) => s.method === method && s.path.startsWith(path));
  }

  async close() {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }

  rule(method, path) {
    const i = this.rules.findIndex((r) => r.method === method && path.startsWith(r.path));
    if (i < 0) return undefined;
    const r = this.rules[i];
    if (--r.times <= 0) this.rules.splice(i, 1);
    return r;
  }

  async handle(req, res) {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const body = Buffer.concat(chunks);
    const rule = this.rule(req.method, req.url);
    const action = rule?.action ?? "forward";
    this.seen.push({ method: req.method, path: req.url, headers: req.headers, body: body.toString(), action });
    if (action === "status") {
      const headers = { "content-type": "application/problem+json", connection: "close" };
      if (rule.retryAfter) headers["retry-after"] = rule.retryAfter;
      res.writeHead(rule.status, headers);
      res.end(JSON.stringify({ type: "/problems/unavailable", title: "injected", status: rule.status, detail: "injected by the test proxy" }));
      return;
    }
    const headers = { ...req.headers };
    delete headers.host;
    delete headers.connection;
    const upstream = await fetch(this.upstream + req.url, {
      method: req.method,
      headers,
      body: body.length ? body : undefined,
    });
    const text = await upstream.text();
    if (action === "drop") {
      // The server answered (and so committed); the answer never arrives.
      req.socket.destroy();
      return;
    }
    const out = { connection: "close" };
    upstream.headers.forEach((v, k) => {
      if (!["content-length", "connection", "transfer-encoding", "keep-alive", "content-encoding"].includes(k)) out[k] = v;
    });
    res.writeHead(upstream.status, out);
    res.end(text);
  }
}
