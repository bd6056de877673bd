import { describe, expect, it } from "vitest";

import { UsageError } from "../../src/errors.js";
import { parseLayerRule, selectLayers } from "../../src/store/layers.js";
import { layerFileName, layerOfFileName } from "../../src/store/names.js";

describe("layer rule", () => {
  it("keeps 18…45 (28 layers) of 46 blocks", () => {
    const layers = selectLayers(46);
    expect(layers).toEqual(Array.from({ length: 28 }, (_, i) => 18 + i));
  });

  it("equals the integer form 5·l ≥ 2·(L−1) for every L up to 400, where floating point would slip", () => {
    // The default rule is computed in integers; the same text parsed and evaluated as fractions must agree.
    const parsed = parseLayerRule("l/(L-1) >= 0.4");
    for (let L = 2; L <= 400; L++) {
      const want = [];
      for (let l = 0; l < L; l++) if (5 * l >= 2 * (L - 1)) want.push(l);
      expect(selectLayers(L)).toEqual(want);
      expect(selectLayers(L, parsed)).toEqual(want);
    }
    // The edge itself: 2/5 of 10 is exactly 4, and 4/10 >= 0.4 holds exactly.
    expect(selectLayers(11)[0]).toBe(4);
    // In doubles, 0.1 * 3 > 0.3; exact arithmetic does not drift.
    expect(parseLayerRule("l * 0.1 <= 0.3").test(3, 10)).toBe(true);
  });

  it("accepts other rules in l and L", () => {
    expect(selectLayers(12, "mod(l, 4) == 3")).toEqual([3, 7, 11]);
    expect(selectLayers(10, "l >= L - 2 or l == 0")).toEqual([0, 8, 9]);
    expect(selectLayers(1)).toEqual([0]);
  });

  it.each([
    ["x > 2", /uses "x"/],
    ["l +", /could not parse/],
    ["l + 1", /must give true or false, but gives 1/],
    ["cos(l) > 0", /uses "cos"/],
    ["f(x) = 1", /not allowed|uses "f"/],
  ])("rejects %s", (rule, message) => {
    expect(() => selectLayers(8, rule)).toThrow(UsageError);
    expect(() => selectLayers(8, rule)).toThrow(message);
  });

  it("names files L###.npy and recognizes nothing else", () => {
    expect(layerFileName(7)).toBe("L007.npy");
    expect(layerOfFileName("L045.npy")).toBe(45);
    for (const name of ["../L045.npy", "/abs/L045.npy", "L45.npy", "L045.npy.tmp", "l045.npy", "L0450.npy"]) {
      expect(layerOfFileName(name)).toBeUndefined();
    }
  });
});
