/**
 * The self-check of generation: once a run has written its answers, a sample
 * of them — the rows with the most left padding in their batches, plus the
 * longest prompt — is generated again alone (batch 1, no padding) and must
 * give the same text. The result is written beside the generations as
 * `<out>.check.json` (docs/formats.md#generation-check) and a difference is warned about.
 */
import { writeFileAtomic } from "../util/fs.js";
import type { BatchRule } from "../model/batching.js";
import { selfCheckRows } from "../model/self-check.js";

/** The sidecar `<out>.check.json`. */
export interface GenerationCheck {
  /** Rows regenerated alone, and their query ids. */
  rows: number;
  query_ids: string[];
  /** The batch size of the run checked. */
  batch_size: number;
  /** Every row whose text differs: the text written (batched) and the text alone. */
  differences: { query_id: string; batched: string; alone: string }[];
  status: "pass" | "warn";
  seconds: number;
}

export interface GenerationCheckInput {
  /** Generates one prompt alone; the text of its answer. */
  generateAlone: (tokens: number[]) => Promise<string>;
  tokens: readonly number[][];
  queryIds: readonly string[];
  /** The texts this run wrote, by row index; only these rows are checked. */
  written: ReadonlyMap<number, string>;
  batchSize: number;
  /** How the run batched its rows. */
  rule: BatchRule;
  /** Rows sorted by length together (the run's batch-planning window). */
  window: number;
  /** Rows to check; 0 turns the check off. */
  count: number;
  /** Rows regenerated at once (the batches the run decodes at once); 1 where absent. */
  parallel?: number;
  out: string;
}

/** Where the check of generations file `out` is written. */
export function generationCheckPath(out: string): string {
  return `${out}.check.json`;
}

/**
 * Regenerates the sample alone and writes the sidecar; undefined (and nothing
 * written) when the check is off or the run wrote no answer.
 */
export async function checkGenerations(c: GenerationCheckInput): Promise<GenerationCheck | undefined> {
  const t0 = performance.now();
  const picked = selfCheckRows(
    c.tokens.map((t) => t.length),
    c.rule,
    c.window,
    c.count,
    (i) => c.written.has(i),
  );
  if (picked.length === 0) return undefined;
  // Each of `parallel` lanes takes the next row not taken yet; the texts land by row, so the sidecar is the same.
  const texts: string[] = new Array(picked.length);
  let next = 0;
  const lane = async () => {
    for (let k = next++; k < picked.length; k = next++) texts[k] = await c.generateAlone([...c.tokens[picked[k]!]!]);
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(c.parallel ?? 1, picked.length)) }, lane));
  const differences: GenerationCheck["differences"] = [];
  for (const [k, i] of picked.entries()) {
    const batched = c.written.get(i)!;
    if (texts[k] !== batched) differences.push({ query_id: c.queryIds[i]!, batched, alone: texts[k]! });
  }
  const check: GenerationCheck = {
    rows: picked.length,
    query_ids: picked.map((i) => c.queryIds[i]!),
    batch_size: c.batchSize,
    differences,
    status: differences.length ? "warn" : "pass",
    seconds: Number(((performance.now() - t0) / 1000).toFixed(3)),
  };
  await writeFileAtomic(generationCheckPath(c.out), JSON.stringify(check, null, 2) + "\n");
  return check;
}

/** The warning for a failed check; undefined when it passed. */
export function generationCheckWarning(check: GenerationCheck, out: string): string | undefined {
  if (check.status !== "warn") return undefined;
  const n = check.differences.length;
  return (
    `warning: SELF-CHECK FAILED — ${n} of ${check.rows} answers regenerated alone at batch 1 differ from the batched ones ` +
    `(first: ${check.differences[0]!.query_id}); see ${generationCheckPath(out)}. Answers depend on padding or batch size: try --batch-size 1`
  );
}
