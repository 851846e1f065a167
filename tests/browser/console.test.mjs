// The console in a real browser (headless Chromium, driven by Playwright):
// three spellings of one refund make one execution, the page shows it, a
// later near-duplicate is held and released with a click; a search by kind;
// the requests chart moves when a refund arrives (server-sent events); an
// ambiguous refund is settled by "Probe now", another by a recorded
// resolution. Run by scripts/browser-test, which starts the server and
// passes its address.
import { chromium } from "playwright-core";
import assert from "node:assert/strict";

const api = process.env.LEDGER_API;
const operator = process.env.LEDGER_OPERATOR_TOKEN;
const device = process.env.LEDGER_DEVICE_TOKEN;
const screenshot = process.env.LEDGER_SCREENSHOT;

async function invoke(runId, args) {
  const response = await fetch(`${api}/v1/invoke`, {
    method: "POST",
    headers: { "Authorization": `Bearer ${device}`, "Content-Type": "application/json", "Prefer": "wait=20" },
    body: JSON.stringify({ tool: "refund", runId, args }),
  });
  return response.json();
}

const spellings = [
  { to: "Ada@Example.com", amount: "$12.00", currency: "usd", trace_id: "t-a" },
  { trace_id: "t-b", amount: "12.00 USD", to: "ada@example.com" },
  { currency: "USD", amount: "1200 cents", to: "ADA@example.com", trace_id: "t-c" },
];
const outcomes = await Promise.all(spellings.map((args, i) => invoke(`worker-${i}`, args)));
const kinds = outcomes.map((o) => o.outcome).sort();
assert.deepEqual(kinds, ["coalesced", "coalesced", "executed"], JSON.stringify(outcomes));

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  const problems = [];
  page.on("pageerror", (e) => problems.push(e.message));
  page.on("console", (m) => { if (m.type() === "error") problems.push(m.text()); });
  await page.goto(`${api}/console`);
  await page.fill("#token", operator);
  await page.click("#connect");
  // Requests went up three times; the effect ran once.
  await page.waitForFunction(() => document.querySelector("#requests").textContent === "3");
  assert.equal(await page.textContent("#executions"), "1");
  assert.equal(await page.textContent("#coalesced"), "2");

  // After the coalescing window, the same refund from another run is held.
  await new Promise((r) => setTimeout(r, 6000));
  const held = await invoke("worker-late", spellings[1]);
  assert.equal(held.outcome, "held", JSON.stringify(held));
  const row = `tr[data-hold="${held.hold_id}"]`;
  await page.waitForSelector(row, { timeout: 10000 });
  await page.click(`${row} button.release`);
  await page.waitForSelector(row, { state: "detached", timeout: 10000 });
  // Released: the command runs, the executions counter moves to 2.
  await page.waitForFunction(() => document.querySelector("#executions").textContent === "2",
                             null, { timeout: 20000 });
  // Drill down: the applied refund's history, as the page shows it.
  await page.click('#states button[data-state="applied"]');
  await page.waitForSelector("#commands tr.clickable");
  await page.click("#commands tr.clickable");
  await page.waitForSelector("#history tbody tr");
  const history = await page.textContent("#history tbody");
  assert.match(history, /effect_started/);
  assert.match(history, /applied/);

  // Search: refunds by kind, with the command page one click away.
  await page.fill("#q-kind", "refund");
  await page.click("#search-go");
  await page.waitForSelector("#commands tr.clickable");
  const found = await page.$$eval("#commands tr.clickable td:nth-child(3)", (tds) => tds.map((td) => td.textContent));
  assert.ok(found.length >= 2 && found.every((k) => k === "refund"), JSON.stringify(found));

  // The headline chart moves when a request arrives, pushed by the server.
  const total = () => page.$eval("#chart-requests", (svg) => Number(svg.dataset.total));
  const before = await total();
  const fresh = await invoke("worker-chart", { to: "bob@example.com", amount: "USD 3" });
  assert.equal(fresh.outcome, "executed", JSON.stringify(fresh));
  await page.waitForFunction((b) => Number(document.querySelector("#chart-requests").dataset.total) > b,
                             before, { timeout: 15000 });

  // Two refunds end ambiguous: the provider applied one and went silent
  // (hang), and sat on the other without applying it (stall).
  const [applied, stalled] = await Promise.all([
    invoke("worker-hang", { to: "cy@example.com", amount: "USD 7", mode: "hang" }),
    invoke("worker-stall", { to: "di@example.com", amount: "USD 8", mode: "stall" }),
  ]);
  assert.equal(applied.state, "ambiguous", JSON.stringify(applied));
  assert.equal(stalled.state, "ambiguous", JSON.stringify(stalled));

  // Probe now: the provider says the first one ran; that is recorded.
  const open = async (id) => {
    await page.click(`#ambiguous tr[data-id="${id}"] td:first-child`);
    await page.waitForFunction((i) => document.querySelector("#history-id").textContent === i, id);
  };
  await open(applied.command_id);
  await page.click("#probe-now");
  await page.waitForSelector("#resolution", { timeout: 10000 });
  assert.match(await page.textContent("#resolution"), /^Resolved applied \(probe/);
  assert.equal(await page.textContent("#d-state"), "ambiguous");
  // Resolved, it is settled: the list of the unresolved no longer shows it.
  await page.waitForFunction((i) => !document.querySelector(`#ambiguous tr[data-id="${i}"]`),
                             applied.command_id, { timeout: 10000 });

  // The second: an operator records what the provider said.
  await open(stalled.command_id);
  await page.selectOption("#r-outcome", "not_applied");
  await page.fill("#r-evidence", "provider says it never ran");
  await page.fill("#r-reference", "ticket-4411");
  await page.click("#r-record");
  await page.waitForSelector("#resolution", { timeout: 10000 });
  const recorded = await page.textContent("#resolution");
  assert.match(recorded, /^Resolved not_applied \(operator/);
  assert.match(recorded, /ticket-4411/);
  await page.screenshot({ path: screenshot, fullPage: true });
  assert.deepEqual(problems, [], "no script errors on the page");
  console.log(`console test passed; screenshot ${screenshot}`);
} finally {
  await browser.close();
}
