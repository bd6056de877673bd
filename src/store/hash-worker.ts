// Worker-thread entry: hashes the files it is sent, one at a time.
import { parentPort } from "node:worker_threads";

import { hashFileSync, type HashJob } from "./hash-file.js";

parentPort!.on("message", (msg: { id: number; job: HashJob }) => {
  try {
    parentPort!.postMessage({ id: msg.id, result: hashFileSync(msg.job) });
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    parentPort!.postMessage({ id: msg.id, error: { message: e.message, code: e.code } });
  }
});
