/**
 * Where a run's sessions go: how many worker threads (each session a copy of
 * the weights, so no more than fit in half the available memory, and never
 * more than the run has batches) and the intra-op threads each gets.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { affordableWorkers, placeSessions, weightBytes } from "../../src/model/workers.js";
import { computeCores } from "../../src/util/cores.js";
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

describe("placeSessions", () => {
  const quiet = () => {};

  it("starts the workers asked for, no more than there are batches, the cores shared out among them", () => {
    const cores = computeCores();
    expect(placeSessions({ workers: 2 }, 1000, 50, "extracting", quiet)).toEqual({
      device: "cpu",
      workers: 2,
      sessionOptions: { device: "cpu", threads: Math.max(1, Math.floor(cores / 2)), spin: false },
      aloneOptions: { device: "cpu", threads: undefined, spin: false },
    });
    expect(placeSessions({ workers: 4 }, 1000, 3, "extracting", quiet).workers).toBe(3);
    expect(placeSessions({ workers: 4 }, 1000, 0, "extracting", quiet).workers).toBe(1);
    // One session runs with the default threads; threads given are kept, per session.
    expect(placeSessions({ workers: 1 }, 1000, 50, "extracting", quiet).sessionOptions.threads).toBeUndefined();
    expect(placeSessions({ workers: 3, threads: 5 }, 1000, 50, "extracting", quiet).sessionOptions.threads).toBe(5);
  });

  it("by default starts two on the CPU where two cores and the memory allow, and one on a GPU", () => {
    const cpu = placeSessions({}, 1000, 50, "extracting", quiet);
    expect(cpu.workers).toBe(Math.min(2, computeCores()));
    expect(placeSessions({ device: "cuda" }, 1000, 50, "extracting", quiet).workers).toBe(1);
  });

  it("runs one session on WebGPU, whatever was asked, and says so", () => {
    const said: string[] = [];
    const place = placeSessions({ device: "webgpu", workers: 2 }, 1000, 50, "extracting", (m) => said.push(m));
    expect(place.workers).toBe(1);
    expect(said).toEqual(["extracting with one session instead of 2: on WebGPU batches run one at a time"]);
  });

  it("starts fewer than the default where their copies would not fit, and says so", () => {
    if (computeCores() < 2) return;
    const said: string[] = [];
    expect(placeSessions({}, 1e18, 50, "decoding", (m) => said.push(m)).workers).toBe(1);
    expect(said[0]).toMatch(/^decoding with 1 session instead of 2: each holds its own copy of the model's/);
  });
});
