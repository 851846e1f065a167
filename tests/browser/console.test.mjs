// The console in a real browser (headless Chromium, driven by Playwright):
// three spellings of one refund make one execution, the page shows it, a
// later near-duplicate is held and released with a click. Run by
// scripts/browser-test, which starts the server and passes its address.
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
  { customer: "Ada@Example.com", amount: "$12.00", currency: "usd", trace_id: "t-a" },
  { trace_id: "t-b", amount: "12.00 USD", customer: "ada@example.com" },
  { currency: "USD", amount: "1200 cents", customer: "ADA@example.com", trace_id: "t-c" },
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
  await page.screenshot({ path: screenshot, fullPage: true });
  assert.deepEqual(problems, [], "no script errors on the page");
  console.log(`console test passed; screenshot ${screenshot}`);
} finally {
  await browser.close();
}
