#!/usr/bin/env node
// The `hsm` command: runs the compiled CLI in dist/.
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const main = join(dirname(fileURLToPath(import.meta.url)), "..", "dist", "cli", "main.js");
if (!existsSync(main)) {
  console.error("hsm: the TypeScript sources are not compiled yet (dist/ is missing). Run: npm run build");
  process.exit(1);
}
// `hsm … | head` (or `2>&1 | head`) closes the pipe early: that is the reader's choice, not an error. The command
// still finishes its work, whose files are what counts, and ends with its own status; what it would print to the
// closed pipe goes nowhere.
for (const stream of [process.stdout, process.stderr]) {
  stream.on("error", (err) => {
    if (err.code !== "EPIPE") throw err;
    stream.write = () => true;
  });
}
// A command stopped by Ctrl-C or SIGTERM leaves no store lock or temporary file behind (src/util/stop.ts).
const { cleanUpOnStopSignals } = await import(join(dirname(main), "..", "util", "stop.js"));
cleanUpOnStopSignals();
const { run } = await import(main);
process.exitCode = await run(process.argv);
