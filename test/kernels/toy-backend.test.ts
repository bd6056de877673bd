/**
 * The walk-through "Adding a kernel backend" (docs/contributing.md),
 * done in a test: a toy backend implements two kernels, is completed from
 * its fallback exactly as openKernels completes a registered backend, and
 * passes the kernel suite every backend passes.
 */
import { describe, expect, it } from "vitest";

import { completeKernels } from "../../src/kernels/registry.js";
import type { Kernels } from "../../src/kernels/types.js";
import { typescriptKernels } from "../../src/kernels/typescript/index.js";
import { kernelSuite } from "../helpers/kernel-suite.js";
import { importWalk } from "../helpers/walks.js";

// Step 1, the backend's file, as docs/contributing.md writes it.
const { toyKernels } = await importWalk<{ toyKernels: () => Promise<Partial<Kernels>> }>("src/kernels/toy.ts");

// Step 2, registration: openKernels completes a registered backend from its fallback chain this way.
const toy = completeKernels([
  { name: "toy", kernels: await toyKernels() },
  { name: "typescript", kernels: typescriptKernels },
]);

describe("a toy kernel backend", () => {
  it("serves the kernels it implements and takes the others from its fallback", () => {
    expect(toy.implementations.f16Stats).toBe("toy");
    expect(toy.implementations.rowsTimes).toBe("toy");
    expect(toy.implementations.rank).toBe("typescript");
    expect(toy.kernels.rank).toBe(typescriptKernels.rank);
  });

  it("gives the reference's float16 statistics on every half", () => {
    const all = Uint16Array.from({ length: 65536 }, (_, i) => i);
    expect(toy.kernels.f16Stats(all)).toEqual(typescriptKernels.f16Stats(all));
    expect(toy.kernels.f16Stats(all.subarray(0, 100))).toEqual(typescriptKernels.f16Stats(all.subarray(0, 100)));
  });

  it("is refused where no backend in the chain implements a kernel", () => {
    expect(() => completeKernels([{ name: "toy", kernels: {} }])).toThrow(/Expected a backend in toy to implement/);
  });
});

// Step 3, tests: the kernel suite every backend runs.
kernelSuite([["toy", toy]], typescriptKernels);
