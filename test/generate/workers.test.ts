/**
 * How many decoding sessions generation starts by default: each holds a copy
 * of the weights, so no more than fit in half the available memory.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { affordableWorkers, weightBytes } from "../../src/generate/workers.js";
import { tempDir } from "../helpers/tmp.js";

const GB = 1e9;

describe("affordableWorkers", () => {
  it("keeps the wanted workers while their copies take at most half the available memory", () => {
    expect(affordableWorkers(2, 1 * GB, 16 * GB)).toEqual({ workers: 2 });
    expect(affordableWorkers(2, 4 * GB, 16 * GB)).toEqual({ workers: 2 });
    expect(affordableWorkers(4, 2 * GB, 16 * GB)).toEqual({ workers: 4 });
  });

  it("starts fewer, at least one, and says why", () => {
    expect(affordableWorkers(2, 4.1 * GB, 16 * GB)).toEqual({
      workers: 1,
      reason:
        "decoding with 1 session instead of 2: each holds its own copy of the model's 4.1 GB of weights and 16.0 GB of memory is available (--workers overrides)",
    });
    expect(affordableWorkers(4, 2.5 * GB, 16 * GB).workers).toBe(3);
    expect(affordableWorkers(2, 28 * GB, 24 * GB).workers).toBe(1);
    expect(affordableWorkers(2, 0, 0).workers).toBe(1);
  });
});

describe("weightBytes", () => {
  it("adds each external-data file the initializers name once to the graph file", () => {
    const dir = tempDir();
    writeFileSync(join(dir, "model.onnx"), Buffer.alloc(1000));
    writeFileSync(join(dir, "model.onnx_data"), Buffer.alloc(5000));
    writeFileSync(join(dir, "unused.bin"), Buffer.alloc(7000));
    const at = (location: string) => ({
      externalData: [
        { key: "location", value: location },
        { key: "offset", value: "0" },
      ],
    });
    const graph = {
      initializer: [at("model.onnx_data"), at("model.onnx_data"), { rawData: new Uint8Array(8) }, at("missing.bin")],
    };
    expect(weightBytes(join(dir, "model.onnx"), graph)).toBe(6000);
    expect(weightBytes(join(dir, "model.onnx"), { initializer: [] })).toBe(1000);
  });
});
