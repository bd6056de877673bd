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
// Whatever standard output or error cannot take, the command still finishes its work, whose files are what
// counts; what it would print there goes nowhere. `hsm … | head` (or `2>&1 | head`) closes the pipe early: that is
// the reader's choice, not an error. Results that could not be written anywhere else (a full disk behind
// `> results.txt`) are named on stderr, and the command does not end as a success.
const { osReason } = await import(join(dirname(main), "..", "util", "fs.js"));
let resultsLost = false;
for (const stream of [process.stdout, process.stderr]) {
  const write = stream.write.bind(stream);
  const failed = (err) => {
    if (stream.write !== guarded) return;
    stream.write = () => true;
    if (err.code === "EPIPE" || stream !== process.stdout) return;
    resultsLost = true;
    // The command may have ended already: the stream reports its error after the write that failed.
    if (!process.exitCode) process.exitCode = 1;
    process.stderr.write(`hsm: standard output: cannot be written: ${osReason(err)}\n`);
  };
  // Node reports a failed write as the stream's error, or (Node 20.0, a file) by throwing from the write itself.
  const guarded = (...args) => {
    try {
      return write(...args);
    } catch (err) {
      failed(err);
      return true;
    }
  };
  stream.write = guarded;
  stream.on("error", failed);
}
// A command stopped by Ctrl-C or SIGTERM leaves no store lock or temporary file behind (src/util/stop.ts).
const { cleanUpOnStopSignals } = await import(join(dirname(main), "..", "util", "stop.js"));
cleanUpOnStopSignals();
const { run } = await import(main);
const status = await run(process.argv);
process.exitCode = status === 0 && resultsLost ? 1 : status;
