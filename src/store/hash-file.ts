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
  /** Byte offset where float32 data starts (stores written by other tools); counted like float16. */
  f32From?: number;
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
  // Elements of 2 or 4 bytes never straddle a chunk when the data starts at a multiple of their size.
  const width = job.f32From !== undefined ? 4 : 2;
  const from = job.f32From ?? job.f16From;
  const statsFrom = from !== undefined && from % width === 0 ? from : undefined;
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
        const count = Math.floor((n - start) / width);
        const s =
          width === 2 ? k.f16Stats(new Uint16Array(buf.buffer, buf.byteOffset + start, count)) : f32Stats(new Float32Array(buf.buffer, buf.byteOffset + start, count));
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

/** The non-finite count and largest finite magnitude of float32 values. */
function f32Stats(src: Float32Array): F16Stats {
  let nonfinite = 0;
  let maxAbs = 0;
  for (let i = 0; i < src.length; i++) {
    const v = Math.abs(src[i]!);
    if (!(v <= Number.MAX_VALUE)) nonfinite++;
    else if (v > maxAbs) maxAbs = v;
  }
  return { nonfinite, maxAbs };
}
