/**
 * One streamed pass over a file: its sha256 and, for float16 data, the
 * non-finite count and largest finite magnitude. Synchronous on purpose: it runs
 * inside a worker thread, one file per worker (see hash.ts).
 */
import { createHash } from "node:crypto";
import { closeSync, openSync, readSync } from "node:fs";

import { storeKernels } from "../kernels/registry.js";
import type { F16Stats } from "../kernels/types.js";

export interface HashJob {
  path: string;
  /** Byte offset where float16 data starts; omit to skip the statistics. */
  f16From?: number;
}

export interface HashResult {
  sha256: string;
  bytes: number;
  stats?: F16Stats;
}

const CHUNK = 4 << 20;

export function hashFileSync(job: HashJob): HashResult {
  const hash = createHash("sha256");
  // allocUnsafeSlow gives a buffer of its own at offset 0, so 16-bit views are aligned.
  const buf = Buffer.allocUnsafeSlow(CHUNK);
  const fd = openSync(job.path, "r");
  const k = storeKernels({ quiet: true });
  const statsFrom = job.f16From !== undefined && job.f16From % 2 === 0 ? job.f16From : undefined;
  let nonfinite = 0;
  let maxAbs = 0;
  let pos = 0;
  try {
    for (;;) {
      const n = readSync(fd, buf, 0, CHUNK, pos);
      if (n === 0) break;
      hash.update(n === CHUNK ? buf : buf.subarray(0, n));
      if (statsFrom !== undefined && pos + n > statsFrom) {
        const start = Math.max(statsFrom - pos, 0);
        const halves = Math.floor((n - start) / 2);
        const s = k.f16Stats(new Uint16Array(buf.buffer, buf.byteOffset + start, halves));
        nonfinite += s.nonfinite;
        if (s.maxAbs > maxAbs) maxAbs = s.maxAbs;
      }
      pos += n;
    }
  } finally {
    closeSync(fd);
  }
  const result: HashResult = { sha256: hash.digest("hex"), bytes: pos };
  if (statsFrom !== undefined) result.stats = { nonfinite, maxAbs };
  return result;
}
