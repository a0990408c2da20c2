// Fails when src/api.ts is not what `npm run generate` makes of
// server/openapi.json now: regenerates into a temporary file and compares.

import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const dir = mkdtempSync(join(tmpdir(), "weft-api-"));
try {
  const fresh = join(dir, "api.ts");
  execFileSync(join("node_modules", ".bin", "openapi-typescript"), ["../../server/openapi.json", "-o", fresh], { stdio: "pipe" });
  if (readFileSync(fresh, "utf8") !== readFileSync(join("src", "api.ts"), "utf8")) {
    console.error("src/api.ts is stale: run npm run generate");
    process.exit(1);
  }
  console.log("src/api.ts matches server/openapi.json");
} finally {
  rmSync(dir, { recursive: true, force: true });
}
