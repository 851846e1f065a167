// A delivery recorded by receiver.py, checked by the Standard Webhooks
// TypeScript library (`standardwebhooks` from npm, compiled) as a receiver
// would: it verifies as sent, and is refused with one byte of its body
// changed, and an hour later (a replay). Arguments: the secret, the file.
"use strict";
const fs = require("fs");
const { Webhook, WebhookVerificationError } = require("standardwebhooks");

const [secret, recorded] = process.argv.slice(2);
const delivery = JSON.parse(fs.readFileSync(recorded, "utf8").split("\n")[0]);
const headers = delivery.headers;
const body = Buffer.from(delivery.body, "base64").toString("utf8");
const hook = new Webhook(secret);

const payload = hook.verify(body, headers);
if (payload.event_id !== headers["webhook-id"]) throw new Error("another event's payload");
console.log(`typescript: verified event ${headers["webhook-id"]} (${payload.state})`);

function refused(what, check) {
  try {
    check();
  } catch (e) {
    if (e instanceof WebhookVerificationError) {
      console.log(`typescript: ${what} is refused (${e.message})`);
      return;
    }
    throw e;
  }
  throw new Error(`typescript: ${what} verified`);
}

const tampered = body.slice(0, -2) + String.fromCharCode(body.charCodeAt(body.length - 2) ^ 1) + body.slice(-1);
refused("a tampered body", () => hook.verify(tampered, headers));
const now = Date.now;
Date.now = () => now() + 3600 * 1000;
try {
  refused("the same delivery an hour later", () => hook.verify(body, headers));
} finally {
  Date.now = now;
}
