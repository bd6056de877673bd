import { freemem } from "node:os";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

/**
 * Runs a full garbage collection now. A model file read for inspection is as
 * large as the weights onnxruntime is about to map; V8 would free it only at
 * some later collection, so both would be resident at once and the peak
 * memory would nearly double.
 */
export function collectGarbage(): void {
  setFlagsFromString("--expose-gc");
  (runInNewContext("gc") as () => void)();
}

/**
 * Bytes this process may still take: the memory the system has available,
 * or less where a control group (a container, a batch job) caps the process.
 */
export function availableMemory(): number {
  const limit = process.constrainedMemory?.() ?? 0;
  // No cap reads as 0, or as a huge number (2^64 here).
  const capped = limit > 0 && limit < 2 ** 60 ? Math.max(0, limit - process.memoryUsage().rss) : Infinity;
  return Math.min(freemem(), capped);
}
