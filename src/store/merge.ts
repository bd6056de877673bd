/**
 * `hsm merge`: joins shard stores (from `hsm extract --shard K/N`) into one
 * store whose files and checksums equal a single-process run. Every shard is
 * verified first; shards must come from one model and layer set and cover the
 * rows exactly once.
 */
import { isDeepStrictEqual } from "node:util";

import { StoreError, UsageError } from "../errors.js";
import { refuseInputAsOutput } from "../util/fs.js";
import { storedTensors, type Manifest, type SelfCheck } from "./manifest.js";
import { STREAM_BLOCK_ROWS, StoreReader } from "./reader.js";
import { verifyStore } from "./verify.js";
import { EXTRACTION_SETTINGS, StoreWriter } from "./writer.js";

const SAME = [
  "model",
  "model_sha256",
  "num_layers",
  "d_model",
  "layers",
  "layer_rule",
  "last_layer_final_norm",
  "dtype",
  "weights",
  "padding_side",
  "max_prompt_len",
  "extraction",
] as const;

/**
 * The shards' self-checks as one: every row checked, per layer the largest deviation; absent when a shard has
 * none, `off` when any shard's was (some rows went unchecked), a failure when any shard's failed.
 */
function mergeSelfChecks(checks: (SelfCheck | undefined)[]): SelfCheck | undefined {
  if (checks.some((c) => !c)) return undefined;
  const all = checks as SelfCheck[];
  const worst = (a: number | null, b: number | null) => (a === null || b === null ? null : Math.max(a, b));
  const layers = all[0]!.layers.map(({ layer }) => {
    const per = all.map((c) => c.layers.find((l) => l.layer === layer) ?? { max_abs_dev: 0, max_rel_dev: 0 });
    return {
      layer,
      max_abs_dev: per.map((l) => l.max_abs_dev).reduce(worst),
      max_rel_dev: per.map((l) => l.max_rel_dev).reduce(worst),
    };
  });
  const failed = all.find((c) => c.status === "fail" || c.status === "warn");
  const status = failed ? failed.status : all.some((c) => c.status === "off") ? "off" : "pass";
  const seconds = Number(all.reduce((s, c) => s + c.seconds, 0).toFixed(3));
  return {
    rows: all.reduce((s, c) => s + c.rows, 0),
    query_ids: all.flatMap((c) => c.query_ids),
    layers,
    tolerance: all[0]!.tolerance,
    status,
    seconds,
  };
}

/**
 * The first field of SAME (of `extraction`, the one within it) in which manifest `now` differs from `was`: its
 * name, in words too, and both values as JSON ("absent" where one has none); undefined where none does. Values
 * are compared as JSON values, whatever the order of their keys (a tool that rewrites a manifest with its keys
 * sorted keeps its seal, which is computed over sorted keys).
 */
function differingField(
  was: Manifest,
  now: Manifest,
): { words: string; field: string; was: string; now: string } | undefined {
  const show = (v: unknown) => (v === undefined ? "absent" : JSON.stringify(v));
  const [a, b] = [was.extraction, now.extraction] as (Record<string, unknown> | undefined)[];
  for (const key of SAME) {
    if (isDeepStrictEqual(was[key], now[key])) continue;
    if (key === "extraction" && a && b) {
      // The settings hsm records first, then any other key either records.
      const keys = new Set<string>([...EXTRACTION_SETTINGS, ...Object.keys(a), ...Object.keys(b)]);
      const sub = [...keys].find((k) => !isDeepStrictEqual(a[k], b[k]))!;
      return { words: sub.replace(/_/g, " "), field: `extraction.${sub}`, was: show(a[sub]), now: show(b[sub]) };
    }
    return { words: key.replace(/_/g, " "), field: key, was: show(was[key]), now: show(now[key]) };
  }
  return undefined;
}

/** The first of SAME in which the store `was` differs from the shards' `now`, in words; undefined where none does. */
function difference(was: Manifest, now: Manifest): string | undefined {
  const d = differingField(was, now);
  return d && `${d.words} (${d.field} ${d.was}, the shards' ${d.now})`;
}

export async function mergeShards(
  out: string,
  shardDirs: string[],
  options: { onProgress?: (done: number, total: number) => void } = {},
): Promise<Manifest> {
  if (shardDirs.length === 0) throw new UsageError("Expected at least one shard store to merge but received none");
  await refuseInputAsOutput(
    { name: "<out>", path: out },
    shardDirs.map((path) => ({ name: "a <shards> folder", path })),
  );
  const readers: StoreReader[] = [];
  try {
    for (const dir of shardDirs) {
      const report = await verifyStore(dir);
      if (!report.ok)
        throw new StoreError(
          dir,
          `shard does not verify (${report.problems.map((p) => `${p.file}: ${p.message}`).join("; ")})`,
        );
      readers.push(await StoreReader.open(dir));
    }
    for (const [i, r] of readers.entries()) {
      if (!r.manifest.shard) throw new StoreError(shardDirs[i]!, "is not a shard store (made without --shard)");
      const d = differingField(readers[0]!.manifest, r.manifest);
      if (d) {
        throw new StoreError(
          shardDirs[i]!,
          `${d.field} ${d.now} differs from ${shardDirs[0]}'s ${d.was}; these shards are not of one run`,
        );
      }
      if (storedTensors(r.manifest) !== storedTensors(readers[0]!.manifest)) {
        throw new StoreError(
          shardDirs[i]!,
          `its layers were read from other graph tensors than ${shardDirs[0]}'s (style); these shards are not of one run`,
        );
      }
    }
    readers.sort((a, b) => a.manifest.shard!.index - b.manifest.shard!.index);
    const count = readers[0]!.manifest.shard!.count;
    const total = readers[0]!.manifest.shard!.rows_total;
    let next = 0;
    readers.forEach((r, k) => {
      const s = r.manifest.shard!;
      if (s.count !== count || s.rows_total !== total)
        throw new StoreError(
          r.backend.location,
          `shard of ${s.count} over ${s.rows_total} rows, others say ${count} over ${total}`,
        );
      if (s.index !== k)
        throw new StoreError(
          r.backend.location,
          k < count && s.index > k ? `shard ${k}/${count} is missing` : `shard ${s.index}/${count} is given twice`,
        );
      if (s.row_start !== next)
        throw new StoreError(r.backend.location, `starts at row ${s.row_start}, expected ${next}`);
      next = s.row_end;
    });
    if (readers.length !== count)
      throw new StoreError(
        out,
        `shard ${readers.length}/${count} is missing: ${count} shards are needed, ${readers.length} given`,
      );
    if (next !== total) throw new StoreError(out, `the shards cover rows 0…${next} of ${total}`);

    const m0 = readers[0]!.manifest;
    const writer = await StoreWriter.open(out, {
      model: m0.model,
      model_sha256: m0.model_sha256,
      ...(m0.model_source ? { model_source: m0.model_source } : {}),
      num_layers: m0.num_layers,
      d_model: m0.d_model,
      layers: m0.layers,
      layer_rule: m0.layer_rule,
      last_layer_final_norm: m0.last_layer_final_norm,
      dtype: m0.dtype,
      ...(m0.weights ? { weights: m0.weights } : {}),
      padding_side: m0.padding_side,
      max_prompt_len: m0.max_prompt_len,
      query_ids: readers.flatMap((r) => r.manifest.query_ids),
      fact_ids: readers.flatMap((r) => r.manifest.fact_ids),
      condition_families: readers.flatMap((r) => r.manifest.condition_families),
      ...(m0.style ? { style: m0.style } : {}),
      ...(m0.extraction ? { extraction: m0.extraction } : {}),
    });
    try {
      // Rows OUT already holds are kept: they must be the shards' rows, made as the shards' run makes them.
      if (writer.complete || writer.rowsDone > 0) {
        const differs = difference(writer.manifest, m0);
        if (differs)
          throw new StoreError(
            out,
            `already holds a ${writer.complete ? "complete store" : "store in progress"} made with a different ${differs}; ` +
              "merging would keep it, not the store the shards' run makes. Use another OUT folder or delete this one",
          );
      }
      if (writer.complete) return writer.manifest;
      const selfCheck = mergeSelfChecks(readers.map((r) => r.manifest.self_check));
      if (selfCheck) writer.manifest.self_check = selfCheck;
      let done = 0;
      for (const r of readers) {
        for (const layer of m0.layers) {
          for await (const block of r.blocks(layer, STREAM_BLOCK_ROWS))
            await writer.writeRows(layer, r.manifest.shard!.row_start + block.start, block.data);
        }
        done += r.rows;
        await writer.commit(done);
        options.onProgress?.(done, total);
      }
      return await writer.finish();
    } finally {
      await writer.close();
    }
  } finally {
    await Promise.all(readers.map((r) => r.close()));
  }
}
