/**
 * The TypeScript twin of the native hash kernel: node:crypto's sha256 and the
 * float statistics counted over the same chunks, one after the other.
 */
import { createRequire } from "node:module";

import type { F16Stats, Sha256Stream } from "../types.js";
import { f16Stats } from "./float16.js";

/** Counts non-finite float32 values and finds the largest finite magnitude. */
function f32Stats(src: Float32Array): F16Stats {
  let nonfinite = 0;
  let maxAbs = 0;
  for (let i = 0; i < src.length; i++) {
    const v = Math.abs(src[i]!);
    if (!(v <= 3.4028234663852886e38)) nonfinite++;
    else if (v > maxAbs) maxAbs = v;
  }
  return { nonfinite, maxAbs };
}

// node:crypto is loaded on the first hash, not with this module: loading it
// costs a few milliseconds of start-up that a run with the native core, which
// imports this module only as its fallback, never needs.
const require = createRequire(import.meta.url);
let crypto: typeof import("node:crypto") | undefined;

export function sha256StatsTs(width: 0 | 2 | 4): Sha256Stream {
  const hash = (crypto ??= require("node:crypto") as typeof import("node:crypto")).createHash("sha256");
  let nonfinite = 0;
  let maxAbs = 0;
  return {
    updateWith(chunk, statsFrom, other, otherChunk, otherFrom) {
      this.update(chunk, statsFrom);
      other.update(otherChunk, otherFrom);
    },
    update(chunk, statsFrom = 0) {
      hash.update(chunk);
      if (width === 0 || statsFrom >= chunk.length) return;
      const count = Math.floor((chunk.length - statsFrom) / width);
      let at = chunk.byteOffset + statsFrom;
      let buffer = chunk.buffer;
      // Typed views need their element alignment; copy a misaligned run.
      if (at % width !== 0) {
        buffer = chunk.slice(statsFrom, statsFrom + count * width).buffer;
        at = 0;
      }
      const s =
        width === 2 ? f16Stats(new Uint16Array(buffer, at, count)) : f32Stats(new Float32Array(buffer, at, count));
      nonfinite += s.nonfinite;
      if (s.maxAbs > maxAbs) maxAbs = s.maxAbs;
    },
    digest() {
      const sha256 = hash.digest("hex");
      return width === 0 ? { sha256 } : { sha256, stats: { nonfinite, maxAbs } };
    },
  };
}
