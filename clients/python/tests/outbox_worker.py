"""A device's flush, in a process of its own, that can die like a power loss.

    outbox_worker.py DB BATCH [STEP]

Flushes the outbox at DB to COMMAND_LEDGER_URL with COMMAND_LEDGER_TOKEN,
BATCH commands per request; with STEP (before_send, after_answer,
after_record) the process kills itself with SIGKILL the first time the
flush gets there. Prints the report as JSON.
"""

import json
import os
import signal
import sys

from command_ledger import Client, FlushStep, Outbox

db, batch = sys.argv[1], int(sys.argv[2])
crash = FlushStep(sys.argv[3]) if len(sys.argv) > 3 else None


def observe(step, key):
    if step is crash:
        os.kill(os.getpid(), signal.SIGKILL)


client = Client(os.environ["COMMAND_LEDGER_URL"], os.environ["COMMAND_LEDGER_TOKEN"])
report = Outbox(db).flush(client, batch=batch, observe=observe)
print(json.dumps(report.__dict__))
