/**
 * Batch planning: rows sorted by length into batches of at most the batch
 * size, batches that never straddle a length break, batches of one length
 * only where rows may not be padded, and the breaks and position limit a config implies.
 */
import { describe, expect, it } from "vitest";

import { lengthBreaks, planBatches, positionLimit } from "../../src/model/batching.js";

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

describe("positionLimit", () => {
  it("reads each family's name for the context, at the top or in text_config, and nothing else", () => {
    expect(positionLimit({ max_position_embeddings: 2048 })).toEqual({
      positions: 2048,
      key: "max_position_embeddings",
    });
    expect(positionLimit({ n_positions: 1024, n_ctx: 1024 })).toEqual({ positions: 1024, key: "n_positions" });
    expect(positionLimit({ max_seq_len: 64 })).toEqual({ positions: 64, key: "max_seq_len" });
    expect(positionLimit({ context_length: 48 })).toEqual({ positions: 48, key: "context_length" });
    expect(positionLimit({ text_config: { max_position_embeddings: 8192 } })).toEqual({
      positions: 8192,
      key: "max_position_embeddings",
    });
    // BLOOM's ALiBi names no limit; a value that is no positive integer is no limit either.
    expect(positionLimit({ n_head: 8 })).toBeUndefined();
    expect(positionLimit({ max_position_embeddings: "2048", context_length: null })).toBeUndefined();
  });
});
