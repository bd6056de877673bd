/**
 * Batches for the forward pass: rows sorted by token length so that little is
 * padding, left-padded, with `position_ids = cumsum(attention_mask) − 1` (0 on
 * padding) always passed explicitly.
 */

/** Splits row indices into batches of similar length; ties keep bank order. */
export function planBatches(lengths: readonly number[], batchSize: number): number[][] {
  const order = lengths.map((_, i) => i).sort((a, b) => lengths[a]! - lengths[b]! || a - b);
  const batches: number[][] = [];
  for (let i = 0; i < order.length; i += batchSize) batches.push(order.slice(i, i + batchSize));
  return batches;
}

export interface BatchFeeds {
  batch: number;
  length: number;
  inputIds: BigInt64Array;
  attentionMask: BigInt64Array;
  positionIds: BigInt64Array;
}

/**
 * Pads `sequences` to their longest, with masks and positions counting only
 * real tokens: on the left (the default), or on the right, where every row's
 * tokens start at position 0 (GroupQueryAttention graphs).
 */
function padBatch(sequences: readonly number[][], padId: number, side: "left" | "right"): BatchFeeds {
  const B = sequences.length;
  const T = Math.max(1, ...sequences.map((s) => s.length));
  const inputIds = new BigInt64Array(B * T).fill(BigInt(padId));
  const attentionMask = new BigInt64Array(B * T);
  const positionIds = new BigInt64Array(B * T);
  sequences.forEach((s, b) => {
    const start = b * T + (side === "left" ? T - s.length : 0);
    for (let j = 0; j < s.length; j++) {
      inputIds[start + j] = BigInt(s[j]!);
      attentionMask[start + j] = 1n;
      positionIds[start + j] = BigInt(j);
    }
  });
  return { batch: B, length: T, inputIds, attentionMask, positionIds };
}

export const leftPad = (sequences: readonly number[][], padId: number): BatchFeeds =>
  padBatch(sequences, padId, "left");
export const rightPad = (sequences: readonly number[][], padId: number): BatchFeeds =>
  padBatch(sequences, padId, "right");
