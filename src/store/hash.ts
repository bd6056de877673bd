/**
 * Hashes many files at once. With the native core, its own threads read and
 * hash whole files (up to sixteen at a time per thread, see native/hash_files.h) and
 * JavaScript never touches the bytes. Without it, the calling thread and one
 * worker thread per further core (or `concurrency` threads in all) take files
 * two at a time from one shared counter and stream each pair through the hash
 * kernel together. Node hashes on the calling thread, so parallel hashing
 * needs threads, not just parallel reads; the calling thread works too rather
 * than wait, so no thread start delays the first files.
 */
import { existsSync, realpathSync } from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { storeKernels } from "../kernels/default.js";
import type { FileHashJob } from "../kernels/types.js";
import { fileError } from "../util/fs.js";
import { hashFilesSync, type HashJob, type HashOutcome, type HashResult } from "./hash-file.js";

export type { HashJob, HashOutcome, HashResult };

/** What a worker posts: the outcomes of each pair it took, then `done`. */
export type HashMessage = { ids: number[]; outcomes: HashOutcome[] } | { done: true };

/** Files a thread takes at a time (see hash-file.ts). */
const TAKE = 2;

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

/** Takes jobs from `next` until none is left, `TAKE` at a time; `report` gets each batch's outcomes. */
export function hashTaken(
  jobs: readonly HashJob[],
  next: Int32Array,
  report: (ids: number[], outcomes: HashOutcome[]) => void,
): void {
  for (let id = Atomics.add(next, 0, TAKE); id < jobs.length; id = Atomics.add(next, 0, TAKE)) {
    const ids = Array.from({ length: Math.min(TAKE, jobs.length - id) }, (_, i) => id + i);
    report(ids, hashFilesSync(ids.map((i) => jobs[i]!)));
  }
}

/** What the native core is asked for a job: values counted only when they start on a value boundary (as in hash-file.ts). */
function fileJob(job: HashJob): FileHashJob {
  const width = job.f32From !== undefined ? 4 : 2;
  const from = job.f32From ?? job.f16From;
  return from !== undefined && from % width === 0
    ? { path: job.path, statsFrom: from, width }
    : { path: job.path, statsFrom: 0, width: 0 };
}

/** Hashes `jobs`, on `concurrency` threads (default: the core count); results in job order. */
export async function hashFiles(
  jobs: readonly HashJob[],
  concurrency = availableParallelism(),
): Promise<HashOutcome[]> {
  const { sha256Files } = storeKernels({ quiet: true });
  if (sha256Files) {
    const hashed = await sha256Files(jobs.map(fileJob), Math.max(1, concurrency));
    // A file the native core could not read is read again here, so that its error is Node's, word for word.
    return hashed.map((result, i) => (result ? { ok: true, result } : hashFilesSync([jobs[i]!])[0]!));
  }
  return hashInWorkers(jobs, concurrency);
}

/**
 * One file's sha256 (hex), hashed in a thread of its own (the native core's, or a worker) while the calling one
 * works. The file itself is hashed: a link to it (as a model folder in the Hugging Face cache holds) is resolved
 * first, and hashing never follows links.
 */
export async function fileSha256(path: string): Promise<string> {
  let real: string;
  try {
    real = realpathSync(path);
  } catch (err) {
    throw fileError(err, path);
  }
  const [outcome] = await hashFiles([{ path: real }], 1);
  if (!outcome!.ok) throw fileError(outcome, path);
  return outcome!.result.sha256;
}

async function hashInWorkers(jobs: readonly HashJob[], concurrency: number): Promise<HashOutcome[]> {
  const outcomes: HashOutcome[] = new Array(jobs.length);
  const threads = Math.max(1, Math.min(concurrency, Math.ceil(jobs.length / TAKE)));
  const script = threads > 1 ? workerScript() : undefined;
  const next = new Int32Array(new SharedArrayBuffer(4));
  const keep = (ids: number[], got: HashOutcome[]) => ids.forEach((id, i) => (outcomes[id] = got[i]!));
  const workers = script ? await startWorkers(script, threads - 1, jobs, next, keep) : [];
  hashTaken(jobs, next, keep);
  await Promise.all(workers);
  return outcomes;
}

/** `count` worker threads taking jobs from `next`; each promise settles when its thread is done. */
async function startWorkers(
  script: string,
  count: number,
  jobs: readonly HashJob[],
  next: Int32Array,
  keep: (ids: number[], got: HashOutcome[]) => void,
): Promise<Promise<void>[]> {
  // Loaded here: with the native core, the usual case, no worker thread is ever started.
  const { Worker } = await import("node:worker_threads");
  return Array.from(
    { length: count },
    () =>
      new Promise<void>((resolve, reject) => {
        const worker = new Worker(script, { workerData: { jobs, next } });
        let done = false;
        worker.on("message", (msg: HashMessage) => {
          if ("done" in msg) done = true;
          else keep(msg.ids, msg.outcomes);
        });
        worker.on("error", reject);
        worker.on("exit", (code) =>
          done ? resolve() : reject(new Error(`a hashing thread stopped with exit code ${code}`)),
        );
      }),
  );
}
