/**
 * The kernel suite (test/helpers/kernel-suite.ts) over every backend available
 * here (test/helpers/backends.ts), the native core once per SIMD level this CPU
 * has; the float16 kernels have their own, longer suite (float16.test.ts) over
 * the same backends.
 */
import { describe, expect, it } from "vitest";

import { KERNEL_NAMES } from "../../src/kernels/types.js";
import { typescriptKernels } from "../../src/kernels/typescript/index.js";
import { AVAILABLE } from "../helpers/backends.js";
import { kernelSuite } from "../helpers/kernel-suite.js";

const CASES = AVAILABLE.map((r) => [r.label, r] as const);

describe("every backend resolves every kernel", () => {
  it.each(CASES)("%s", (_label, r) => {
    expect(Object.keys(r.implementations).sort()).toEqual([...KERNEL_NAMES].sort());
    for (const k of KERNEL_NAMES) expect(typeof r.kernels[k]).toBe("function");
    if (r.backend === "typescript") expect(new Set(Object.values(r.implementations))).toEqual(new Set(["typescript"]));
    else expect(Object.values(r.implementations)).toContain(r.backend);
  });
});

kernelSuite(CASES, typescriptKernels);
