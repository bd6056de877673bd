/** forEachSettled: one call after another on one lane; all at once on more, every call settled before a failure is thrown. */
import { describe, expect, it } from "vitest";

import { forEachSettled } from "../../src/util/settle.js";

const tick = () => new Promise<void>((resolve) => setImmediate(resolve));

describe("forEachSettled", () => {
  it("runs the calls one after another where parallel is 1", async () => {
    const log: string[] = [];
    await forEachSettled([1, 2, 3], 1, async (x) => {
      log.push(`start ${x}`);
      await tick();
      log.push(`end ${x}`);
    });
    expect(log).toEqual(["start 1", "end 1", "start 2", "end 2", "start 3", "end 3"]);
  });

  it("starts every call at once on more lanes", async () => {
    const log: string[] = [];
    await forEachSettled([1, 2, 3], 2, async (x) => {
      log.push(`start ${x}`);
      await tick();
      log.push(`end ${x}`);
    });
    expect(log.slice(0, 3)).toEqual(["start 1", "start 2", "start 3"]);
    expect(log.slice(3).sort()).toEqual(["end 1", "end 2", "end 3"]);
  });

  it("throws the first failure only once every call has settled", async () => {
    const ended: number[] = [];
    const first = new Error("first");
    const run = forEachSettled([1, 2, 3], 2, async (x) => {
      if (x === 1) throw first;
      for (let k = 0; k < x; k++) await tick();
      if (x === 2) throw new Error("second");
      ended.push(x);
    });
    await expect(run).rejects.toBe(first);
    expect(ended).toEqual([3]);
  });

  it("stops at the first failure on one lane, the calls after it never started", async () => {
    const started: number[] = [];
    const run = forEachSettled([1, 2, 3], 1, async (x) => {
      started.push(x);
      if (x === 2) throw new Error("two");
    });
    await expect(run).rejects.toThrow("two");
    expect(started).toEqual([1, 2]);
  });
});
