/**
 * Streamed passes over files: each file's sha256 and, for float16 or float32
 * data, its non-finite count and largest finite magnitude, computed by one
 * kernel call per chunk (the native core hashes and counts each piece while
 * it is in cache). Two files go through together, their chunks interleaved in
 * one kernel call, which keeps the CPU's SHA unit busy. Synchronous on
 * purpose: it runs inside worker threads (see hash.ts).
 */
import { closeSync, constants, openSync, readSync } from "node:fs";

import { storeKernels } from "../kernels/default.js";
import type { F16Stats, Sha256Stream } from "../kernels/types.js";

export interface HashJob {
  path: string;
  /** Byte offset where float16 data starts; omit to skip the statistics. */
  f16From?: number;
  /** Byte offset where float32 data starts (stores written by other tools); counted like float16. */
  f32From?: number;
}

export interface HashResult {
  sha256: string;
  bytes: number;
  stats?: F16Stats;
}

/** The result for one job, or the error that stopped it (a file that vanished, say). */
export type HashOutcome = { ok: true; result: HashResult } | { ok: false; message: string; code?: string };

/** Bytes read per call: large enough that system calls cost nothing, small enough to stay in the L2/L3 caches. */
const CHUNK = 1 << 20;

// allocUnsafeSlow gives buffers of their own at offset 0, reused for every file of this thread.
const buffers: Buffer[] = [];

interface Pass {
  job: HashJob;
  fd: number;
  hash: Sha256Stream;
  /** Where the counted values start in the file; undefined: nothing is counted. */
  statsFrom: number | undefined;
  pos: number;
  buf: Buffer;
  /** Bytes in `buf` from the last read. */
  n: number;
}

function failure(err: unknown): HashOutcome {
  const e = err as NodeJS.ErrnoException;
  return { ok: false, message: e.message, ...(e.code ? { code: e.code } : {}) };
}

/** Hashes one or two files together; one outcome per job, in order. */
export function hashFilesSync(jobs: readonly HashJob[]): HashOutcome[] {
  const outcomes: HashOutcome[] = new Array(jobs.length);
  const passes: (Pass & { index: number })[] = [];
  const k = storeKernels({ quiet: true });
  try {
    jobs.forEach((job, index) => {
      let fd: number;
      try {
        // As the native core opens them (native/hash_files.cc): never through a symbolic link, never waiting on a FIFO.
        fd = openSync(job.path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
      } catch (err) {
        outcomes[index] = failure(err);
        return;
      }
      // Values of 2 or 4 bytes never straddle a chunk when the data starts at a multiple of their size.
      const width = job.f32From !== undefined ? 4 : 2;
      const from = job.f32From ?? job.f16From;
      const statsFrom = from !== undefined && from % width === 0 ? from : undefined;
      const buf = (buffers[passes.length] ??= Buffer.allocUnsafeSlow(CHUNK));
      passes.push({
        index,
        job,
        fd,
        hash: k.sha256Stats(statsFrom === undefined ? 0 : width),
        statsFrom,
        pos: 0,
        buf,
        n: 0,
      });
    });
    let active = passes.slice();
    while (active.length > 0) {
      for (const p of active) {
        try {
          p.n = readSync(p.fd, p.buf, 0, CHUNK, p.pos);
        } catch (err) {
          outcomes[p.index] = failure(err);
          p.n = -1;
        }
        if (p.n === 0) {
          const { sha256, stats } = p.hash.digest();
          outcomes[p.index] = { ok: true, result: stats ? { sha256, bytes: p.pos, stats } : { sha256, bytes: p.pos } };
        }
      }
      active = active.filter((p) => p.n > 0);
      const [a, b] = active;
      if (a && b) a.hash.updateWith(chunkOf(a), statsOffset(a), b.hash, chunkOf(b), statsOffset(b));
      else if (a) a.hash.update(chunkOf(a), statsOffset(a));
      for (const p of active) p.pos += p.n;
    }
  } finally {
    for (const p of passes) closeSync(p.fd);
  }
  return outcomes;
}

function chunkOf(p: Pass): Uint8Array {
  return p.n === CHUNK ? p.buf : p.buf.subarray(0, p.n);
}

/** Where in the chunk just read the counted values start (its length: none). */
function statsOffset(p: Pass): number {
  return p.statsFrom === undefined ? p.n : Math.max(p.statsFrom - p.pos, 0);
}
