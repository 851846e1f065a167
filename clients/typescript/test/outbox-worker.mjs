// A device's flush, in a process of its own, that can die like a power loss:
//   node outbox-worker.mjs DB BATCH [STEP]
// Flushes the outbox at DB to COMMAND_LEDGER_URL with COMMAND_LEDGER_TOKEN;
// with STEP (before_send, after_answer, after_record) the process kills
// itself with SIGKILL the first time the flush gets there. Prints the report.
import { Client, Outbox } from "../dist/index.js";

const [db, batch, crash] = process.argv.slice(2);
const client = new Client(process.env.COMMAND_LEDGER_URL, process.env.COMMAND_LEDGER_TOKEN);
const outbox = await Outbox.open(db);
const report = await outbox.flush(client, {
  batch: Number(batch),
  observe: (step) => {
    if (step === crash) process.kill(process.pid, "SIGKILL");
  },
});
console.log(JSON.stringify(report));
