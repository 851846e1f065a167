// Fails when src/openapi.ts is not what the pinned openapi-typescript makes of
// docs/openapi.json: regenerate with `npm run generate-types` and commit.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const dir = mkdtempSync(join(tmpdir(), "openapi-types-"));
try {
  const out = join(dir, "openapi.ts");
  execFileSync("npx", ["--no-install", "openapi-typescript", "../../docs/openapi.json", "-o", out], { stdio: ["ignore", "ignore", "inherit"] });
  if (readFileSync(out, "utf8") !== readFileSync("src/openapi.ts", "utf8")) {
    console.error("src/openapi.ts is out of date with docs/openapi.json: run `npm run generate-types` in clients/typescript and commit it");
    process.exit(1);
  }
  console.log("src/openapi.ts is current with docs/openapi.json");
} finally {
  rmSync(dir, { recursive: true, force: true });
}
