// A worker process for the signal tests: serves ts.sig in the namespace
// $WEFT_NS until SIGINT/SIGTERM, and prints what happens, one line each.
// The handler waits $WEFT_HOLD_MS (ignoring its signal when $WEFT_STUBBORN
// is set) and returns whether its signal was aborted.

import { Worker } from "../src/index.js";

const say = (line: string) => process.stdout.write(`${line}\n`);
const env = (name: string) => process.env[name] ?? "";

const worker = new Worker(env("WEFT_SERVER"), {
  token: env("WEFT_TOKEN"),
  name: env("WEFT_NS"),
  namespaces: [env("WEFT_NS")],
  drainTimeoutMs: 20_000,
  heartbeatIntervalMs: 500,
  logger: { debug() {}, info: (m) => say(`info: ${m}`), warn: (m) => say(`warn: ${m}`), error: (m) => say(`error: ${m}`) },
});
worker.handle("ts.sig", async (step) => {
  say("handler started");
  const hold = Number(env("WEFT_HOLD_MS"));
  if (env("WEFT_STUBBORN")) await new Promise((r) => setTimeout(r, hold));
  else await step.wait(hold);
  say(`handler returns, aborted=${step.signal.aborted}`);
  return { aborted: step.signal.aborted };
});
worker.run().then(
  () => say("run returned"),
  (err: unknown) => {
    say(`run failed: ${String(err)}`);
    process.exitCode = 1;
  },
);
