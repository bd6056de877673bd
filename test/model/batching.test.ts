/**
 * Batch planning: rows sorted by length into batches of at most the batch
 * size, batches that never straddle a length break, batches of one length
 * only where rows may not be padded, and the breaks a config implies.
 */
import { describe, expect, it } from "vitest";

import { lengthBreaks, planBatches } from "../../src/model/batching.js";

describe("planBatches", () => {
  const lengths = [5, 3, 9, 3, 7, 5, 5, 1];

  it("sorts by length (ties in row order) and cuts batches of the batch size", () => {
    expect(planBatches(lengths, 3)).toEqual([
      [7, 1, 3],
      [0, 5, 6],
      [4, 2],
    ]);
  });

  it("starts a new batch at each break: no batch holds rows on both sides", () => {
    // Rows of length ≤ 5: 7, 1, 3, 0, 5, 6; longer: 4, 2.
    expect(planBatches(lengths, { size: 4, breaks: [5] })).toEqual([
      [7, 1, 3, 0],
      [5, 6],
      [4, 2],
    ]);
    expect(planBatches(lengths, { size: 8, breaks: [2, 6] })).toEqual([[7], [1, 3, 0, 5, 6], [4, 2]]);
  });

  it("batches rows of one length only where rows may not be padded", () => {
    expect(planBatches(lengths, { size: 2, sameLength: true })).toEqual([[7], [1, 3], [0, 5], [6], [4], [2]]);
  });
});

describe("lengthBreaks", () => {
  it("is original_max_position_embeddings for LongRoPE (either name), none otherwise", () => {
    const longrope = { original_max_position_embeddings: 4096, rope_scaling: { type: "longrope" } };
    expect(lengthBreaks(longrope)).toEqual([4096]);
    expect(lengthBreaks({ ...longrope, rope_scaling: { type: "su" } })).toEqual([4096]);
    expect(lengthBreaks({ ...longrope, rope_scaling: { rope_type: "longrope" } })).toEqual([4096]);
    expect(lengthBreaks({ ...longrope, rope_scaling: { type: "linear", factor: 2 } })).toEqual([]);
    expect(lengthBreaks({ rope_scaling: null })).toEqual([]);
  });
});
