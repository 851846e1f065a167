"""A delivery recorded by receiver.py, checked by the Standard Webhooks
Python library (`standardwebhooks` from PyPI) as a receiver would: it
verifies as sent, and is refused with one byte of its body changed, and
an hour later (a replay). Arguments: the secret, the recorded file."""

import base64
import json
import sys
from datetime import timedelta

import standardwebhooks.webhooks as library
from standardwebhooks import Webhook, WebhookVerificationError

secret, recorded = sys.argv[1], sys.argv[2]
delivery = json.loads(open(recorded, encoding="utf-8").readline())
headers, body = delivery["headers"], base64.b64decode(delivery["body"])
hook = Webhook(secret)

payload = hook.verify(body, headers)
assert payload["event_id"] == headers["webhook-id"], (payload, headers)
print(f"python: verified event {headers['webhook-id']} ({payload['state']})")

tampered = bytearray(body)
tampered[-2] ^= 1
try:
    hook.verify(bytes(tampered), headers)
    raise SystemExit("python: a tampered body verified")
except WebhookVerificationError as e:
    print(f"python: a tampered body is refused ({e})")

real = library.datetime


class AnHourLater(real):
    @classmethod
    def now(cls, tz=None):
        return real.now(tz) + timedelta(hours=1)


library.datetime = AnHourLater
try:
    hook.verify(body, headers)
    raise SystemExit("python: the delivery verified an hour later")
except WebhookVerificationError as e:
    print(f"python: the same delivery an hour later is refused ({e})")
finally:
    library.datetime = real
