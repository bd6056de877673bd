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
