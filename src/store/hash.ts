/**
 * Hashes many files at once: one worker thread per core (or `concurrency`), each
 * streaming whole files through sha256. Node hashes on the calling thread, so
 * parallel hashing needs threads, not just parallel reads.
 */
import { existsSync } from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";

import { hashFileSync, type HashJob, type HashResult } from "./hash-file.js";

export type { HashJob, HashResult };

/** The result for one job, or the error that stopped it (a file that vanished, say). */
export type HashOutcome = { ok: true; result: HashResult } | { ok: false; message: string; code?: string };

/**
 * The compiled worker beside this module. Run from the TypeScript sources (as
 * the tests do) there is none, and files are hashed on the calling thread: a
 * worker from some earlier build could compute with code older than the
 * sources.
 */
function workerScript(): string | undefined {
  const p = join(dirname(fileURLToPath(import.meta.url)), "hash-worker.js");
  return existsSync(p) ? p : undefined;
}

/** Hashes `jobs`, `concurrency` at a time (default: the core count); results in job order. */
export async function hashFiles(jobs: readonly HashJob[], concurrency = availableParallelism()): Promise<HashOutcome[]> {
  const outcomes: HashOutcome[] = new Array(jobs.length);
  const threads = Math.max(1, Math.min(concurrency, jobs.length));
  const script = workerScript();
  if (threads <= 1 || !script) {
    jobs.forEach((job, i) => {
      try {
        outcomes[i] = { ok: true, result: hashFileSync(job) };
      } catch (err) {
        const e = err as NodeJS.ErrnoException;
        outcomes[i] = { ok: false, message: e.message, ...(e.code ? { code: e.code } : {}) };
      }
    });
    return outcomes;
  }
  let next = 0;
  const runWorker = () =>
    new Promise<void>((resolve, reject) => {
      const worker = new Worker(script);
      const feed = () => {
        if (next >= jobs.length) {
          void worker.terminate().then(() => resolve());
          return;
        }
        const id = next++;
        worker.postMessage({ id, job: jobs[id] });
      };
      worker.on("message", (msg: { id: number; result?: HashResult; error?: { message: string; code?: string } }) => {
        outcomes[msg.id] = msg.result ? { ok: true, result: msg.result } : { ok: false, ...msg.error! };
        feed();
      });
      worker.on("error", reject);
      feed();
    });
  await Promise.all(Array.from({ length: threads }, runWorker));
  return outcomes;
}
