/**
 * Batches for the forward pass: rows sorted by token length so that little is
 * padding, padded on the side the graph needs, with `position_ids` counting
 * each row's real tokens from 0 (0 on padding) passed wherever the graph takes them.
 */

/** Which rows may share a batch. */
export interface BatchRule {
  /** Rows per batch, at most. */
  size: number;
  /**
   * Lengths no batch straddles: its rows are all at most `b` tokens long or all longer. A graph that picks its
   * tables by the padded length (LongRoPE's `If` past `original_max_position_embeddings`) then treats every row
   * of a batch as it treats the row alone.
   */
  breaks?: readonly number[];
  /**
   * Only rows of one length share a batch, so none is padded: a graph that counts positions itself, from the
   * cache's length, cannot be padded while it decodes.
   */
  sameLength?: boolean;
}

/** Splits row indices into batches of similar length under `rule` (a number: a plain batch size); ties keep bank order. */
export function planBatches(lengths: readonly number[], rule: BatchRule | number): number[][] {
  const { size, breaks = [], sameLength = false } = typeof rule === "number" ? { size: rule } : rule;
  const group = (n: number) => (sameLength ? n : breaks.filter((b) => n > b).length);
  const order = lengths.map((_, i) => i).sort((a, b) => lengths[a]! - lengths[b]! || a - b);
  const batches: number[][] = [];
  let current: number[] = [];
  for (const i of order) {
    if (current.length === size || (current.length > 0 && group(lengths[current[0]!]!) !== group(lengths[i]!))) {
      batches.push(current);
      current = [];
    }
    current.push(i);
  }
  if (current.length > 0) batches.push(current);
  return batches;
}

/**
 * The lengths a batch must not straddle for a model with this config.json: LongRoPE (`rope_scaling.type`
 * `longrope`, or `su` as Phi-3 first named it) switches its rotary factors once the sequence is longer than
 * `original_max_position_embeddings`.
 */
export function lengthBreaks(config: Record<string, unknown>): number[] {
  const scaling = config.rope_scaling as { type?: unknown; rope_type?: unknown } | null | undefined;
  const type = scaling?.type ?? scaling?.rope_type;
  const original = config.original_max_position_embeddings;
  return (type === "longrope" || type === "su") && typeof original === "number" ? [original] : [];
}

/** The positions a model reads at most, and the config.json key that says so. */
export interface PositionLimit {
  positions: number;
  key: string;
}

/**
 * The longest sequence the model's configuration allows (`max_position_embeddings`, GPT-2's `n_positions`, MPT's
 * `max_seq_len`, at the top or in `text_config`, or an onnxruntime-genai build's `context_length`); undefined where
 * it names none. A learned position table, or a genai build's rotary cache, has that many rows, so a longer prompt
 * fails inside onnxruntime.
 */
export function positionLimit(config: Record<string, unknown>): PositionLimit | undefined {
  const text = config.text_config as Record<string, unknown> | null | undefined;
  for (const key of ["max_position_embeddings", "n_positions", "max_seq_len", "context_length"]) {
    const value = config[key] ?? text?.[key];
    if (typeof value === "number" && Number.isSafeInteger(value) && value > 0) return { positions: value, key };
  }
  return undefined;
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

/**
 * `f` grown to `rows` rows by copies of its last row, for a graph whose inputs fix the batch: each row's states
 * are those of the row alone, so the copies change nothing and their outputs are dropped.
 * Decoding (decodeBatch) fills its prompts out the same way, but before padding: it pads again at every step and
 * keeps each row's tokens, so it needs the copies as prompts. Extraction's runner (its session or worker threads)
 * takes padded batches from three callers (the first run, the blocks, the self-check), so it fills them here, once.
 */
export function fillBatch(f: BatchFeeds, rows: number): BatchFeeds {
  if (f.batch >= rows) return f;
  const T = f.length;
  const grow = (a: BigInt64Array) => {
    const out = new BigInt64Array(rows * T);
    out.set(a);
    for (let b = f.batch; b < rows; b++) out.copyWithin(b * T, (f.batch - 1) * T, f.batch * T);
    return out;
  };
  return {
    batch: rows,
    length: T,
    inputIds: grow(f.inputIds),
    attentionMask: grow(f.attentionMask),
    positionIds: grow(f.positionIds),
  };
}
