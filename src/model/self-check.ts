/**
 * The batch self-check of every extraction: once all rows are stored, a
 * sample of rows — those with the most left padding in their batches, plus
 * the longest prompt — is run again alone (batch 1, no padding) and compared,
 * layer by layer, with what the store holds. States that change with padding
 * or batch shape are the commonest silent failure of hidden-state tools; the
 * result goes into the manifest (`self_check`), and a deviation above the
 * tolerance fails the run: no row of such a store is kept.
 *
 * Deviations are measured relative to the row's largest magnitude: both sides
 * are the same float32 computation rounded once to float16, so each element
 * may differ by one float16 spacing of its value (at most 2^-10 of the row's
 * largest value) plus the float32 noise of a different batch shape (reduction
 * order), bounded here by another 2^-10 of the row's largest value
 * (docs/extract.md derives it).
 */
import { join } from "node:path";

import { HsmError } from "../errors.js";
import { f16BitsToNumber } from "../kernels/typescript/float16.js";
import { selfCheckFinding, type SelfCheck } from "../store/manifest.js";
import { layerFileName } from "../store/names.js";
import { buildNpyHeader } from "../store/npy.js";
import { fileError, openInput } from "../util/fs.js";
import { forEachSettled } from "../util/settle.js";
import { leftPad, planBatches, type BatchFeeds, type BatchRule } from "./batching.js";
import type { SessionRunner } from "./workers.js";

/** One float16 spacing relative to a value's magnitude, at most (values in [2^e, 2^(e+1)) are spaced 2^(e−10)). */
const F16_SPACING = 2 ** -10;
/** The compute noise of a different batch shape, relative to the row's largest value, per compute dtype. */
const COMPUTE_NOISE: Record<string, number> = { float32: 2 ** -10, float16: 2 ** -6, bfloat16: 2 ** -3 };

/** The largest relative deviation the self-check accepts for a graph computing in `dtype`. */
export function selfCheckTolerance(dtype: string): number {
  return F16_SPACING + (COMPUTE_NOISE[dtype] ?? COMPUTE_NOISE.float16!);
}

/**
 * Test hook: `HSM_TEST_BREAK_BATCHING=mask` lets padded positions be attended
 * to — the classic batching bug — so that tests can show the self-checks
 * catch it. Rows without padding are unaffected.
 */
export function breakBatchingForTest(f: BatchFeeds): BatchFeeds {
  if (process.env.HSM_TEST_BREAK_BATCHING === "mask") f.attentionMask.fill(1n);
  return f;
}

/**
 * The rows to check: the `count − 1` rows with the most left padding in their
 * batches, plus the longest prompt; ascending row indices. Padding is ranked
 * as the share of the row's padded length (ties: more padding, then row
 * order): a padding bug weighs most on rows that are mostly padding, and
 * those rows are short, which keeps the check cheap.
 * Batches are planned as extraction and generation plan them: per window of
 * `window` rows in order, by length. Only rows `eligible` accepts are picked.
 */
export function selfCheckRows(
  lengths: readonly number[],
  rule: BatchRule | number,
  window: number,
  count: number,
  eligible: (row: number) => boolean = () => true,
): number[] {
  if (count <= 0 || !lengths.some((_, i) => eligible(i))) return [];
  const padding = new Array<number>(lengths.length).fill(0);
  for (let start = 0; start < lengths.length; start += window) {
    const block = lengths.slice(start, start + window);
    for (const batch of planBatches(block, rule)) {
      const longest = Math.max(...batch.map((i) => block[i]!));
      for (const i of batch) padding[start + i] = longest - block[i]!;
    }
  }
  const share = (i: number) => padding[i]! / (padding[i]! + lengths[i]! || 1);
  let longest = -1;
  lengths.forEach((n, i) => eligible(i) && (longest < 0 || n > lengths[longest]!) && (longest = i));
  const byPadding = lengths
    .map((_, i) => i)
    .filter((i) => i !== longest && eligible(i))
    .sort((a, b) => share(b) - share(a) || padding[b]! - padding[a]! || a - b);
  return [longest, ...byPadding.slice(0, count - 1)].sort((a, b) => a - b);
}

/** The deviations of one row: per layer, the largest absolute difference and that divided by the row's largest magnitude. */
export function rowDeviation(stored: Uint16Array, fresh: Uint16Array): { abs: number; rel: number } {
  let abs = 0;
  let scale = 0;
  for (let i = 0; i < fresh.length; i++) {
    const a = f16BitsToNumber(stored[i]!);
    const b = f16BitsToNumber(fresh[i]!);
    if (Number.isFinite(b)) scale = Math.max(scale, Math.abs(b));
    if (a === b || (Number.isNaN(a) && Number.isNaN(b))) continue;
    abs = Math.max(abs, Number.isFinite(a) && Number.isFinite(b) ? Math.abs(a - b) : Infinity);
  }
  return { abs, rel: abs === 0 ? 0 : scale > 0 ? abs / scale : Infinity };
}

export interface SelfCheckInput {
  /** Where extraction runs a padded batch: its states as float16 bits, [batch, layers, d]. */
  runner: Pick<SessionRunner<BatchFeeds, Uint16Array>, "parallel" | "run">;
  /** The store folder, every row written. */
  dir: string;
  layers: readonly number[];
  dModel: number;
  /** Token ids of every row of the store, in row order. */
  tokens: readonly number[][];
  queryIds: readonly string[];
  padId: number;
  /** How extraction batched the rows. */
  rule: BatchRule;
  commitRows: number;
  /** Rows to check; 0 turns the check off. */
  count: number;
  /** The graph's compute dtype, which sets the tolerance. */
  dtype: string;
}

/** Reads row `row` of every stored layer file (float16 bits, one array per layer). */
async function readStoredRow(
  dir: string,
  layers: readonly number[],
  rows: number,
  d: number,
  row: number,
): Promise<Uint16Array[]> {
  const offset = buildNpyHeader("<f2", [rows, d]).length + row * d * 2;
  return Promise.all(
    layers.map(async (layer) => {
      const path = join(dir, layerFileName(layer));
      const out = new Uint16Array(d);
      try {
        const { fh } = await openInput(path);
        try {
          await fh.read(new Uint8Array(out.buffer), 0, d * 2, offset);
        } finally {
          await fh.close();
        }
      } catch (err) {
        throw fileError(err, path);
      }
      return out;
    }),
  );
}

/** Runs the self-check over a store whose rows are all written; the result is the manifest's `self_check`. */
export async function runSelfCheck(c: SelfCheckInput): Promise<SelfCheck> {
  const t0 = performance.now();
  const tolerance = selfCheckTolerance(c.dtype);
  const picked = selfCheckRows(
    c.tokens.map((t) => t.length),
    c.rule,
    c.commitRows,
    c.count,
  );
  const n = c.layers.length;
  const d = c.dModel;
  const abs = new Array<number>(n).fill(0);
  const rel = new Array<number>(n).fill(0);
  // The rows run as the extraction's sessions take them; the maxima do not depend on the order.
  await forEachSettled(picked, c.runner.parallel, async (row) => {
    const fresh = await c.runner.run(leftPad([c.tokens[row]!], c.padId));
    const stored = await readStoredRow(c.dir, c.layers, c.tokens.length, d, row);
    for (let k = 0; k < n; k++) {
      const dev = rowDeviation(stored[k]!, fresh.subarray(k * d, (k + 1) * d));
      abs[k] = Math.max(abs[k]!, dev.abs);
      rel[k] = Math.max(rel[k]!, dev.rel);
    }
  });
  // JSON has no Infinity: a value finite on one side only is recorded as null.
  const finite = (x: number) => (Number.isFinite(x) ? x : null);
  return {
    rows: picked.length,
    query_ids: picked.map((i) => c.queryIds[i]!),
    layers: c.layers.map((layer, k) => ({ layer, max_abs_dev: finite(abs[k]!), max_rel_dev: finite(rel[k]!) })),
    tolerance,
    status: picked.length === 0 ? "off" : rel.every((r) => r <= tolerance) ? "pass" : "fail",
    seconds: Number(((performance.now() - t0) / 1000).toFixed(3)),
  };
}

/** A batch self-check that failed: the stored rows differ from the same rows run alone. Exit status 1. */
export class SelfCheckError extends HsmError {}

/** The error of a failed self-check over the store in `dir`: what it found and what to do. */
export function selfCheckFailure(check: SelfCheck, dir: string): SelfCheckError {
  return new SelfCheckError(
    `${dir}: SELF-CHECK FAILED — ${selfCheckFinding(check)}; no row was kept and the store is not complete. ` +
      `Run again with --batch-size 1, or with --self-check 0 to keep batched states anyway (recorded in the manifest)`,
  );
}
