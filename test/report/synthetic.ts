/** Synthetic models laid out under an outputs root as hsm run writes them (store, scored rows, metrics), for the report's tests. */
import { cpSync } from "node:fs";
import { join } from "node:path";

import { runMetrics, writeFixture, type MetricsOptions } from "../../src/index.js";

/** Writes fixture `name` (40 facts, d 16, `layersTotal` blocks) into `outputs` with its iss.json and kts.json (computed with `settings`). */
export async function syntheticModel(
  outputs: string,
  work: string,
  name: string,
  seed: number,
  layersTotal: number,
  settings: Pick<MetricsOptions, "folds" | "abstainAsIncorrect"> = {},
): Promise<void> {
  const fx = await writeFixture(join(work, `fx-${name}`), { facts: 40, d: 16, seed, layersTotal });
  cpSync(fx.store, join(outputs, "hidden", name), { recursive: true });
  cpSync(fx.scored, join(outputs, "evaluation", `${name}.scored.jsonl`));
  await runMetrics(join(outputs, "hidden", name), {
    scored: join(outputs, "evaluation", `${name}.scored.jsonl`),
    out: join(outputs, "metrics", name),
    bootstrap: 20,
    ...settings,
  });
}
