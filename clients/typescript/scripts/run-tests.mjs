// Runs the compiled tests (node --test dist/test/) against one weft binary
// for the whole run: $WEFT_BIN if set, else built here from the checkout.

import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

let dir;
const env = { ...process.env };
if (!env.WEFT_BIN) {
  dir = mkdtempSync(join(tmpdir(), "weft-ts-bin-"));
  env.WEFT_BIN = join(dir, "weft");
  console.log("building weft from the checkout (go build ./cmd/weft)");
  try {
    execFileSync("go", ["build", "-o", env.WEFT_BIN, "./cmd/weft"], { cwd: resolve("..", ".."), stdio: "inherit" });
  } catch (err) {
    console.error(`cannot build the weft server the tests run (${err.message}): install Go or set WEFT_BIN`);
    process.exit(1);
  }
}
const res = spawnSync(process.execPath, ["--test", "dist/test/"], { env, stdio: "inherit" });
if (dir) rmSync(dir, { recursive: true, force: true });
process.exit(res.status ?? 1);
