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

/** Left-pads `sequences` to their longest, with masks and positions counting only real tokens. */
export function leftPad(sequences: readonly number[][], padId: number): BatchFeeds {
  const B = sequences.length;
  const T = Math.max(1, ...sequences.map((s) => s.length));
  const inputIds = new BigInt64Array(B * T).fill(BigInt(padId));
  const attentionMask = new BigInt64Array(B * T);
  const positionIds = new BigInt64Array(B * T);
  sequences.forEach((s, b) => {
    const offset = T - s.length;
    for (let j = 0; j < s.length; j++) {
      inputIds[b * T + offset + j] = BigInt(s[j]!);
      attentionMask[b * T + offset + j] = 1n;
      positionIds[b * T + offset + j] = BigInt(j);
    }
  });
  return { batch: B, length: T, inputIds, attentionMask, positionIds };
}

/** Right-pads `sequences` to their longest: every row's tokens start at position 0 (GroupQueryAttention graphs). */
export function rightPad(sequences: readonly number[][], padId: number): BatchFeeds {
  const B = sequences.length;
  const T = Math.max(1, ...sequences.map((s) => s.length));
  const inputIds = new BigInt64Array(B * T).fill(BigInt(padId));
  const attentionMask = new BigInt64Array(B * T);
  const positionIds = new BigInt64Array(B * T);
  sequences.forEach((s, b) => {
    for (let j = 0; j < s.length; j++) {
      inputIds[b * T + j] = BigInt(s[j]!);
      attentionMask[b * T + j] = 1n;
      positionIds[b * T + j] = BigInt(j);
    }
  });
  return { batch: B, length: T, inputIds, attentionMask, positionIds };
}
