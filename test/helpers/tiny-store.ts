/** Builds small stores from explicit rows, for hand-computed metric cases. */
import { writeFileSync } from "node:fs";
import { join } from "node:path";

import { StoreWriter } from "../../src/store/writer.js";

export interface TinyRow {
  fact: string;
  family: string;
  h: number[];
  label?: string;
}

/** Writes a one-layer (or several identical layers) store and a scored file. */
export async function tinyStore(
  dir: string,
  rows: TinyRow[],
  layers = [3],
): Promise<{ store: string; scored: string }> {
  const d = rows[0]!.h.length;
  const store = join(dir, "store");
  const w = await StoreWriter.open(store, {
    model: "tiny",
    model_sha256: "0".repeat(64),
    num_layers: Math.max(...layers) + 1,
    d_model: d,
    layers,
    layer_rule: "test",
    last_layer_final_norm: false,
    dtype: "float32",
    query_ids: rows.map((_, i) => `q${i}`),
    fact_ids: rows.map((r) => r.fact),
    condition_families: rows.map((r) => r.family),
  });
  for (const l of layers) await w.writeRowsF32(l, 0, Float32Array.from(rows.flatMap((r) => r.h)));
  await w.finish(1);
  await w.close();
  const scored = join(dir, "scored.jsonl");
  writeFileSync(
    scored,
    rows.map((r, i) => JSON.stringify({ query_id: `q${i}`, label: r.label ?? "correct" })).join("\n") + "\n",
  );
  return { store, scored };
}
