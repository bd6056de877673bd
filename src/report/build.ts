/**
 * `hsm report`: one self-contained HTML file for every model of an outputs
 * root (docs/report.md). Everything is computed here, at build time: the
 * accuracy table, each registered metric's small multiples (SVG, drawn by
 * src/util/chart.ts), the paired comparison of every pair of models, and the
 * per-fact drill-down, packed in chunks of facts that the page inflates only
 * when a fact of the chunk is opened. The page itself only looks things up.
 */
import { readdir, realpath, stat } from "node:fs/promises";
import { basename, dirname, join, resolve, sep } from "node:path";
import { deflateRawSync } from "node:zlib";

import { ANCHOR_FAMILY } from "../bank/prompt.js";
import { HsmError, JsonFileError, UsageError } from "../errors.js";
import { ALL_FAMILIES, type Metric, type MetricRegistry, type MetricRow } from "../metrics/metric.js";
import { METRICS } from "../metrics/registry.js";
import { LABELS } from "../score/labels.js";
import { verifyStore } from "../store/verify.js";
import { wilsonInterval } from "../study/stats.js";
import { lineChart, type ChartSeries } from "../util/chart.js";
import { isSameFile, makeDir, writeFileAtomic } from "../util/fs.js";
import { jsonLines } from "../util/jsonl.js";
import { TOOL_VERSION } from "../version.js";
import { compareLoaded, loadModel, type Comparison, type LoadedModel, type LoadOptions } from "./compare.js";
import { normalizedDepth } from "./depth.js";
import { STUDY_RECORD } from "../study/layout.js";
import { describeValue, readJsonObject, readModels, type OutputsModel } from "./outputs.js";
import type { DrillDown, FactChunk } from "./page-data.js";
import { renderPage } from "./page.js";

/** Facts per drill-down chunk: one chunk is inflated and parsed when one of its facts is opened. */
const FACTS_PER_CHUNK = 64;

/** One small multiple's size in pixels: three panels fit side by side in the page's 1200-pixel column. */
const PANEL = { width: 340, height: 230 } as const;

/** A depth range wider than this is ticked every 0.2, not 0.1, so that a panel carries at most seven ticks. */
const FINE_TICK_RANGE = 0.6;

/** Deflate's smallest output: the chunks are packed once per report, and their bytes are the page's bulk. */
const CHUNK_DEFLATE_LEVEL = 9;

export interface ReportOptions extends LoadOptions {
  /** The HTML file (default `<outputs>/report.html`). */
  out?: string;
  /** Paired bootstrap replicates and seed (defaults 1000, 20260101). */
  replicates?: number;
  seed?: number;
  /** Hash every store against its manifest for the provenance section (default true). */
  verify?: boolean;
  /** What is being done, for the user. */
  log?: (message: string) => void;
  /** What the user should know of the report's content (models left out), one line each. */
  warn?: (message: string) => void;
  /** The metrics charted, from each model's `<name>.json` (default: the built-in ones). */
  registry?: MetricRegistry;
}

export interface ReportResult {
  path: string;
  bytes: number;
  models: string[];
  /** Models the study record marks failed, left out of the report. */
  leftOut: string[];
  /** Bytes of the part of the page read at first view (everything but the fact chunks). */
  firstViewBytes: number;
}

type Row = Record<string, unknown>;

/**
 * A model's rows of one metric (its `<name>.json`; none without one), checked
 * before they are charted: a JsonFileError names the file and field of a row
 * whose layer is not one of the store's, whose family is not a string or
 * whose charted values are not numbers or null.
 */
async function readMetricRows(metric: Metric<MetricRow>, file: string, layers: readonly number[]): Promise<Row[]> {
  const results = await readJsonObject(file);
  if (results === null) return [];
  const rows = results.rows;
  if (!Array.isArray(rows))
    throw new JsonFileError(file, "rows", `expected an array but received ${describeValue(rows)}`);
  const { value, low, high } = metric.columns;
  rows.forEach((r: unknown, i) => {
    const fail = (field: string, expected: string, v: unknown) => {
      throw new JsonFileError(file, `rows[${i}]${field}`, `expected ${expected} but received ${describeValue(v)}`);
    };
    if (r === null || typeof r !== "object" || Array.isArray(r)) fail("", "an object", r);
    const row = r as Row;
    if (!layers.includes(row.layer as number))
      fail(".layer", `one of the store's layers (${layers.join(", ")})`, row.layer);
    if (typeof row.family !== "string") fail(".family", "a string", row.family);
    for (const column of new Set([value, low, high]))
      if (row[column] !== null && typeof row[column] !== "number") fail(`.${column}`, "a number or null", row[column]);
  });
  return rows as Row[];
}

/** Accuracy with its Wilson interval and the label mix, per family (anchor, the others, `all` pooling the non-anchor ones). */
function accuracyTable(m: LoadedModel, families: string[]): Row[] {
  return families.map((family) => {
    const mix = Object.fromEntries(LABELS.map((l) => [l, 0])) as Record<string, number>;
    let n = 0;
    for (const q of m.scored.values()) {
      if (family === ALL_FAMILIES ? q.family === ANCHOR_FAMILY : q.family !== family) continue;
      n++;
      mix[q.label] = (mix[q.label] ?? 0) + 1;
    }
    const [low, high] = wilsonInterval(mix.correct!, n);
    return { family, n, correct: mix.correct, accuracy: n ? mix.correct! / n : null, low, high, mix };
  });
}

/** Depth ticks every 0.1 (0.2 over a wide range) from below the shallowest layer to 1. */
function depthTicks(minDepth: number): { x: number; label: string }[] {
  const lo = Math.floor(minDepth * 10) / 10;
  const step = 1 - lo > FINE_TICK_RANGE ? 0.2 : 0.1;
  const ticks = [];
  // Repeated subtraction of 0.1 drifts below the lowest tick by a rounding error; the 1e-9 keeps that tick.
  for (let t = 1; t >= lo - 1e-9; t -= step) ticks.unshift({ x: Number(t.toFixed(2)), label: t.toFixed(1) });
  return ticks;
}

/** Each model's rows of one metric (its `<name>.json`), with the model's number of blocks. */
type ModelRows = Map<string, { L: number; rows: Row[] }>;

/** One small multiple per family: the metric of every model against normalized depth, with its bootstrap band. */
function smallMultiples(
  metric: Metric<MetricRow>,
  rows: ModelRows,
  families: string[],
): { family: string; svg: string | null }[] {
  const { value, low, high } = metric.columns;
  const depths = [...rows.values()].flatMap((m) => m.rows.map((r) => normalizedDepth(r.layer as number, m.L)));
  const ticks = depthTicks(depths.length ? Math.min(...depths) : 0);
  return families.map((family) => {
    const series: ChartSeries[] = [...rows].map(([name, m]) => ({
      name,
      points: m.rows
        .filter((r) => r.family === family)
        .map((r) => ({
          x: normalizedDepth(r.layer as number, m.L),
          value: r[value] as number | null,
          low: r[low] as number | null,
          high: r[high] as number | null,
        })),
    }));
    const any = series.some((s) => s.points.some((p) => p.value !== null));
    const chart = () => lineChart(series, { xLabel: "depth l/(L−1)", xTicks: ticks, ...PANEL, legend: false });
    return { family, svg: any ? chart() : null };
  });
}

/** The reasons a metric's shown rows have no value, distinct, for the note shown instead of its charts. */
function nullReasons(metric: Metric<MetricRow>, rows: Row[]): string[] {
  const { value, nullReason } = metric.columns;
  if (!nullReason) return [];
  const shown = rows.filter((r) => (metric.shown?.(r as unknown as MetricRow) ?? true) && r[value] === null);
  return [...new Set(shown.map((r) => String(r[nullReason])))];
}

/** The generations' prompts by query id (the first model's file that has them). */
async function promptsOf(models: OutputsModel[]): Promise<Map<string, string>> {
  const prompts = new Map<string, string>();
  for (const m of models) {
    const exists = await stat(m.paths.generations).catch(() => undefined);
    if (!exists) continue;
    for await (const { value } of jsonLines(
      m.paths.generations,
      (line, problem) => new UsageError(`${m.paths.generations}:${line}: ${problem}`),
    )) {
      if (typeof value.query_id === "string" && typeof value.prompt === "string" && !prompts.has(value.query_id))
        prompts.set(value.query_id, value.prompt);
    }
    if (prompts.size) break;
  }
  return prompts;
}

/** Each model's ISS rank of every query row at its deepest stored layer, by query id. */
function deepestRanks(m: LoadedModel): Map<string, number> {
  const layer = Math.max(...m.values.layers);
  const v = m.values.iss.get(layer);
  const out = new Map<string, number>();
  if (v) v.rows.forEach((row, i) => out.set(m.values.queryIds[row]!, v.rank[i]!));
  return out;
}

/**
 * The drill-down: facts in code-unit order, in chunks of {@link FACTS_PER_CHUNK};
 * each chunk is column arrays (query ids, family and label as indices into
 * string tables, prompts, and per model answers, labels, aliases, ranks),
 * deflated and base64-encoded.
 */
function factChunks(models: LoadedModel[], prompts: Map<string, string>, families: string[]): DrillDown {
  const byFact = new Map<string, Set<string>>();
  for (const m of models) {
    for (const q of m.scored.values()) {
      if (!byFact.has(q.fact)) byFact.set(q.fact, new Set());
      byFact.get(q.fact)!.add(q.queryId);
    }
  }
  const facts = [...byFact.keys()].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));
  const ranks = models.map(deepestRanks);
  const any = (qid: string) => models.map((m) => m.scored.get(qid)).find((q) => q !== undefined)!;
  const anchors = facts.map(
    (f) => prompts.get([...byFact.get(f)!].find((q) => any(q).family === ANCHOR_FAMILY) ?? "") ?? "",
  );
  const chunks: string[] = [];
  for (let start = 0; start < facts.length; start += FACTS_PER_CHUNK) {
    const chunkFacts = facts.slice(start, start + FACTS_PER_CHUNK);
    const queries = chunkFacts.map((f) => [...byFact.get(f)!].sort());
    const flat = queries.flat();
    const chunk: FactChunk = {
      sizes: queries.map((q) => q.length),
      q: flat,
      family: flat.map((qid) => families.indexOf(any(qid).family)),
      prompt: flat.map((qid) => prompts.get(qid) ?? ""),
      models: models.map((m, i) => ({
        answer: flat.map((qid) => m.scored.get(qid)?.answer ?? null),
        label: flat.map((qid) =>
          m.scored.has(qid) ? LABELS.indexOf(m.scored.get(qid)!.label as (typeof LABELS)[number]) : -1,
        ),
        alias: flat.map((qid) => m.scored.get(qid)?.matchedAlias ?? null),
        rank: flat.map((qid) => ranks[i]!.get(qid) ?? null),
      })),
    };
    chunks.push(deflateRawSync(Buffer.from(JSON.stringify(chunk)), { level: CHUNK_DEFLATE_LEVEL }).toString("base64"));
  }
  return {
    facts,
    anchors,
    chunks,
    perChunk: FACTS_PER_CHUNK,
    deepest: models.map((m) => Math.max(...m.values.layers)),
  };
}

/** Provenance of one model: its store's checksums and verification, and what produced its files. */
async function provenance(m: OutputsModel, o: ReportOptions, registry: MetricRegistry): Promise<Row> {
  const manifest = (await readJsonObject(join(m.paths.store, "index.json"))) ?? {};
  // Every metric of a run records the same settings: the first one written tells them.
  let results: Row | null = null;
  for (const metric of registry)
    if ((results = await readJsonObject(join(m.paths.metrics, `${metric.name}.json`)))) break;
  const report = o.verify === false ? null : await verifyStore(m.paths.store);
  const files = (manifest.files ?? {}) as Record<string, { sha256?: string; bytes?: number }>;
  const selfCheck = Object.entries(manifest).filter(([k]) => /self.?check/i.test(k));
  return {
    store: resolve(m.paths.store),
    verify:
      report === null
        ? "not checked (--no-verify)"
        : report.ok
          ? `OK — ${report.files.length} files, ${report.rows} rows, checksums match`
          : `${report.problems.length} problem(s): ${report.problems.map((p) => `${p.file}: ${p.message}`).join("; ")}`,
    verifyOk: report?.ok ?? null,
    files: Object.entries(files).map(([name, f]) => [name, f.sha256 ?? "", f.bytes ?? null]),
    tool_version: manifest.tool_version ?? null,
    model_sha256: manifest.model_sha256 ?? null,
    model_source: manifest.model_source ?? null,
    settings: {
      num_layers: manifest.num_layers,
      d_model: manifest.d_model,
      layers: manifest.layers,
      layer_rule: manifest.layer_rule,
      dtype: manifest.dtype,
      max_prompt_len: manifest.max_prompt_len,
      padding_side: manifest.padding_side,
      truncation_side: manifest.truncation_side,
      prompt: manifest.prompt,
    },
    metrics: results ? results.config : null,
    selfCheck: selfCheck.length ? Object.fromEntries(selfCheck) : null,
  };
}

/** `path`'s real path; where it does not exist yet, its nearest existing folder's with the rest of `path` after it. */
async function realPathToBe(path: string): Promise<string> {
  try {
    return await realpath(path);
  } catch {
    const parent = dirname(path);
    return parent === path ? path : join(await realPathToBe(parent), basename(path));
  }
}

/**
 * Refuses an `out` that is one of the files the report reads (a study record,
 * a model's scored rows, generations or metric results, anything in a store):
 * the same file as one ({@link isSameFile}), or a path inside a store by real path, a new one too.
 */
async function refuseInputAsOut(out: string, outputs: string, models: OutputsModel[], registry: MetricRegistry) {
  const realOf = (path: string) => realpath(path).catch(() => undefined);
  const [real, st] = await Promise.all([realPathToBe(resolve(out)), stat(out).catch(() => undefined)]);
  const refuse = (what: string) => {
    throw new UsageError(`--out ${out}: is ${what}, which the report reads; choose another file`);
  };
  const inputs: [path: string, what: string][] = [[join(outputs, STUDY_RECORD), "the study record"]];
  for (const m of models) {
    inputs.push([m.paths.scored, `${m.name}'s scored rows`], [m.paths.generations, `${m.name}'s generations`]);
    for (const metric of registry)
      inputs.push([join(m.paths.metrics, `${metric.name}.json`), `${m.name}'s ${metric.name}.json`]);
  }
  // The same file by device and inode, so a hard link of one counts too; every input exists, so a new file is none.
  for (const [path, what] of inputs) if (st && (await isSameFile(st, path))) refuse(`${what} (${path})`);
  for (const m of models) {
    const store = await realOf(m.paths.store);
    if (store !== undefined && (real === store || real.startsWith(store + sep)))
      refuse(`in ${m.name}'s store (${m.paths.store})`);
    if (st === undefined) continue;
    // A hard link of a store's file is elsewhere by path.
    for (const name of await readdir(m.paths.store).catch(() => [])) {
      const path = join(m.paths.store, name);
      if (await isSameFile(st, path)) refuse(`a file of ${m.name}'s store (${path})`);
    }
  }
}

/** Every pair i < j of models compared; the page flips a pair's signs when B is chosen before A. */
function allPairs(models: LoadedModel[], o: ReportOptions): Record<string, Comparison> {
  const pairs: Record<string, Comparison> = {};
  for (let i = 0; i < models.length; i++) {
    for (let j = i + 1; j < models.length; j++) {
      o.log?.(`comparing ${models[i]!.name} with ${models[j]!.name}`);
      pairs[`${i}:${j}`] = compareLoaded(models[i]!, models[j]!, { replicates: o.replicates, seed: o.seed });
    }
  }
  return pairs;
}

/** Builds the report of every model under `outputs` and writes it as one HTML file. */
export async function writeReport(outputs: string, o: ReportOptions = {}): Promise<ReportResult> {
  const { models: found, failed, record: study } = await readModels(outputs);
  const record = join(outputs, STUDY_RECORD);
  if (found.length === 0 && failed.length)
    throw new HsmError(`${outputs}: every model failed in the study (see ${record}); nothing to report`);
  if (found.length === 0)
    throw new UsageError(
      `${outputs}: no model with scored rows (evaluation/<model>.scored.jsonl); run hsm run or hsm study first`,
    );
  const notes: string[] = [];
  if (failed.length) {
    const names = failed.map((m) => m.name);
    o.warn?.(`left out ${names.join(", ")}, which failed in the study (see ${record})`);
    for (const m of failed) notes.push(`${m.name} is left out: it failed in the study${m.error ? `: ${m.error}` : ""}`);
  }
  const registry = o.registry ?? METRICS;
  const path = o.out ?? join(outputs, "report.html");
  await refuseInputAsOut(path, outputs, found, registry);
  const loaded: LoadedModel[] = [];
  for (const m of found) {
    o.log?.(`reading ${m.name}`);
    loaded.push(await loadModel(m, o));
  }
  const families = [
    ANCHOR_FAMILY,
    ...[...new Set(loaded.flatMap((m) => [...m.scored.values()].map((q) => q.family)))]
      .filter((f) => f !== ANCHOR_FAMILY)
      .sort(),
    ALL_FAMILIES,
  ];
  const metricRows = async (metric: Metric<MetricRow>): Promise<ModelRows> =>
    new Map(
      await Promise.all(
        found.map(async (m, i) => {
          const file = join(m.paths.metrics, `${metric.name}.json`);
          const { numLayers, layers } = loaded[i]!.values;
          return [m.name, { L: numLayers, rows: await readMetricRows(metric, file, layers) }] as const;
        }),
      ),
    );
  const rows: ModelRows[] = [];
  for (const metric of registry) rows.push(await metricRows(metric));
  const charted = (f: string) =>
    rows.some((byModel) => [...byModel.values()].some((m) => m.rows.some((r) => r.family === f)));
  const chartFamilies = families.filter((f) => f !== ANCHOR_FAMILY && charted(f));
  const data = {
    title: `hsm report — ${found.map((m) => m.name).join(", ")}`,
    notes,
    outputs: resolve(outputs),
    tool_version: TOOL_VERSION,
    written_at: new Date().toISOString(),
    generation: study?.generation ?? null,
    bank: study?.bank ?? null,
    families,
    labels: LABELS,
    models: found.map((m, i) => ({
      name: m.name,
      L: loaded[i]!.values.numLayers,
      layers: loaded[i]!.values.layers,
      accuracy: accuracyTable(loaded[i]!, families),
    })),
    charts: registry.map((metric, i) => ({
      id: metric.name,
      title: metric.title,
      charts: smallMultiples(metric, rows[i]!, chartFamilies),
      notes: [...new Set([...rows[i]!.values()].flatMap((m) => nullReasons(metric, m.rows)))],
    })),
    pairs: allPairs(loaded, o),
    provenance: await Promise.all(found.map((m) => provenance(m, o, registry))),
  };
  o.log?.("packing the facts");
  const drill = factChunks(loaded, await promptsOf(found), families);
  const { html, firstViewBytes } = renderPage(data, drill);
  await makeDir(dirname(resolve(path)));
  await writeFileAtomic(path, html);
  return {
    path,
    bytes: Buffer.byteLength(html),
    models: found.map((m) => m.name),
    leftOut: failed.map((m) => m.name),
    firstViewBytes,
  };
}
