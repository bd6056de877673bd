/**
 * `hsm compare`: the paired comparison of two models of one outputs root.
 * Per condition family: each model's accuracy (Wilson 95%), McNemar's exact
 * test on the queries both answered, and Benjamini–Hochberg adjusted p-values
 * across the table. Per family and stored layer of A, at matched normalized
 * depth (src/report/depth.ts): the paired bootstrap over facts of the ISS
 * difference and the KTS difference, from each row's margin and out-of-fold
 * probe score (src/report/per-row.ts). docs/report.md has the definitions.
 *
 * These paired statistics are ISS's and KTS's own (they need each row's margin
 * and out-of-fold score, which no registered metric exposes), so they name the
 * two metrics rather than read the registry: a metric added to the registry is
 * charted by the report, and is not compared here.
 */
import { join } from "node:path";

import { ANCHOR_FAMILY } from "../bank/prompt.js";
import { DEFAULT_BOOTSTRAP, DEFAULT_SEED, MAX_FOLDS } from "../defaults.js";
import { HsmError, JsonFileError } from "../errors.js";
import { ALL_FAMILIES } from "../metrics/metric.js";
import type { BackendName } from "../kernels/registry.js";
import type { MetricsOptions } from "../metrics/compute.js";
import {
  benjaminiHochberg,
  pairedCorrectness,
  pairedFactMeanDifference,
  pairedKtsDifference,
  pairedStream,
  wilsonInterval,
  type FactValues,
  type PairedCorrectness,
  type PairedDifference,
  type ScoredRows,
} from "../study/stats.js";
import { matchDepth, type LayerPair } from "./depth.js";
import {
  describeValue,
  findModel,
  readJsonObject,
  readScored,
  type OutputsModel,
  type ScoredQuery,
} from "./outputs.js";
import { storeRowValues, type StoreRowValues } from "./per-row.js";

/** One model's scored queries and per-row metric values, loaded once for any number of comparisons. */
export interface LoadedModel {
  name: string;
  /** The scored file read, for messages. */
  scoredFile: string;
  scored: Map<string, ScoredQuery>;
  values: StoreRowValues;
}

/** How a model's rows are read: the kernels' backend, and KTS's folds and C (by default those kts.json records). */
export interface LoadOptions {
  backend?: BackendName;
  folds?: number;
  probeC?: number;
  onProgress?: (model: string, layer: number, phase: string) => void;
}

/** The settings of a kts.json that decide its rows' labels and scores, so that the per-row values are its own. */
type RecordedSettings = Pick<
  MetricsOptions,
  "folds" | "probeC" | "abstainAsIncorrect" | "allowMissingLabels" | "allowIncomplete"
>;

/** The settings the model's kts.json was computed with, where it records them; a JsonFileError names a bad one. */
async function ktsSettings(metrics: string): Promise<RecordedSettings> {
  const file = join(metrics, "kts.json");
  const results = await readJsonObject(file);
  if (results === null || results.config === undefined) return {};
  const config = results.config as Record<string, unknown>;
  if (config === null || typeof config !== "object" || Array.isArray(config))
    throw new JsonFileError(file, "config", `expected an object but received ${describeValue(config)}`);
  const field = <T>(key: string, ok: (v: unknown) => boolean, expected: string): T | undefined => {
    const v = config[key];
    if (v === undefined || ok(v)) return v as T | undefined;
    throw new JsonFileError(file, `config.${key}`, `expected ${expected} but received ${describeValue(v)}`);
  };
  const flag = (key: string) => field<boolean>(key, (v) => typeof v === "boolean", "true or false");
  return {
    folds: field(
      "folds",
      (v) => Number.isSafeInteger(v) && (v as number) >= 2 && (v as number) <= MAX_FOLDS,
      `an integer from 2 to ${MAX_FOLDS}`,
    ),
    probeC: field("probe_c", (v) => typeof v === "number" && v > 0 && Number.isFinite(v), "a positive number"),
    abstainAsIncorrect: flag("abstain_as_incorrect"),
    allowMissingLabels: flag("allow_missing_labels"),
    allowIncomplete: flag("allow_incomplete"),
  };
}

/**
 * Reads a model's scored file and recomputes its per-row ISS and KTS values
 * from its store, with the settings its kts.json records (folds and C unless
 * given, which abstentions count as incorrect, whether rows without a label or
 * an unfinished store were accepted).
 */
export async function loadModel(model: OutputsModel, o: LoadOptions = {}): Promise<LoadedModel> {
  const scored = await readScored(model.paths.scored);
  const recorded = await ktsSettings(model.paths.metrics);
  const values = await storeRowValues(model.paths.store, {
    ...recorded,
    scored: model.paths.scored,
    backend: o.backend,
    folds: o.folds ?? recorded.folds,
    probeC: o.probeC ?? recorded.probeC,
    onProgress: (layer, phase) => o.onProgress?.(model.name, layer, phase),
  });
  const { queryIds, facts, families } = values;
  for (let i = 0; i < queryIds.length; i++) {
    const q = scored.get(queryIds[i]!);
    if (q && (q.fact !== facts[i] || q.family !== families[i]))
      throw new HsmError(
        `${model.paths.scored}: query "${q.queryId}" is ${whatQuery(q)}, but ${whatQuery({ fact: facts[i]!, family: families[i]! })} in the store ${model.paths.store}`,
      );
  }
  return { name: model.name, scoredFile: model.paths.scored, scored, values };
}

const whatQuery = (q: { fact: string; family: string }) => `${q.family} of fact "${q.fact}"`;

/**
 * Refuses two models whose scored rows disagree on a query both hold (its fact or its family), or share no query
 * at all: they answered different banks, and pairing their rows would compare different questions, or nothing.
 */
function checkSameQueries(a: LoadedModel, b: LoadedModel): void {
  let shared = 0;
  for (const [id, qa] of a.scored) {
    const qb = b.scored.get(id);
    if (qb === undefined) continue;
    shared++;
    if (qa.fact !== qb.fact || qa.family !== qb.family)
      throw new HsmError(
        `query "${id}" is ${whatQuery(qa)} in ${a.scoredFile} but ${whatQuery(qb)} in ${b.scoredFile}: the two models answered different banks`,
      );
  }
  if (shared === 0)
    throw new HsmError(
      `${a.scoredFile} and ${b.scoredFile} share no query_id: the two models answered different banks, and no row pairs`,
    );
}

/** One model's accuracy on a family: correct of n, with its Wilson 95% interval. */
export interface Accuracy {
  n: number;
  correct: number;
  accuracy: number | null;
  low: number;
  high: number;
}

export interface FamilyComparison {
  family: string;
  a: Accuracy;
  b: Accuracy;
  paired: PairedCorrectness;
  /** McNemar's p adjusted with Benjamini–Hochberg across the families of the table that have a test; null for one without. */
  pAdjusted: number | null;
}

export interface DepthComparison extends LayerPair {
  family: string;
  /** A − B of ISS over the facts both have, with its 95% interval. */
  iss: PairedDifference;
  /** A − B of KTS; null where either model has no trained probe (no scored file, or one label class among the anchors). */
  kts: PairedDifference | null;
}

export interface Comparison {
  a: string;
  b: string;
  replicates: number;
  seed: number;
  families: FamilyComparison[];
  pairs: LayerPair[];
  depth: DepthComparison[];
}

export interface CompareOptions {
  /** Bootstrap replicates (default 1000) and seed (default 20260101). */
  replicates?: number;
  seed?: number;
}

function accuracyOf(rows: ScoredQuery[]): Accuracy {
  const correct = rows.filter((r) => r.label === "correct").length;
  const [low, high] = wilsonInterval(correct, rows.length);
  return { n: rows.length, correct, accuracy: rows.length ? correct / rows.length : null, low, high };
}

/** Whether a row of `family` belongs to the group `group` (`all` pools every non-anchor family). */
function inGroup(group: string, family: string): boolean {
  return group === ALL_FAMILIES ? family !== ANCHOR_FAMILY : family === group;
}

/** Anchor, the non-anchor families of either model (sorted), then `all`. */
function familiesOf(a: Iterable<string>, b: Iterable<string>): string[] {
  const seen = new Set<string>();
  for (const m of [a, b]) for (const f of m) if (f !== ANCHOR_FAMILY) seen.add(f);
  return [ANCHOR_FAMILY, ...[...seen].sort(), ALL_FAMILIES];
}

const scoredFamilies = (m: LoadedModel) => Array.from(m.scored.values(), (q) => q.family);

function familyComparisons(a: LoadedModel, b: LoadedModel, families: string[]): FamilyComparison[] {
  const rows = families.map((family) => {
    const of = (m: LoadedModel) => [...m.scored.values()].filter((q) => inGroup(family, q.family));
    const ra = of(a);
    const rb = of(b);
    const right = (qs: ScoredQuery[]) => new Map(qs.map((q) => [q.queryId, q.label === "correct"]));
    return {
      family,
      a: accuracyOf(ra),
      b: accuracyOf(rb),
      paired: pairedCorrectness(right(ra), right(rb)),
      pAdjusted: null as number | null,
    };
  });
  benjaminiHochberg(rows.map((r) => r.paired.p)).forEach((p, i) => (rows[i]!.pAdjusted = p));
  return rows;
}

/** A model's ISS margins of one family at one layer, with the fact of each row. */
export function issFactValues(m: LoadedModel, layer: number, family: string): FactValues {
  const v = m.values.iss.get(layer)!;
  const keep = Array.from(v.rows.keys()).filter((i) => inGroup(family, m.values.families[v.rows[i]!]!));
  return { fact: keep.map((i) => m.values.facts[v.rows[i]!]!), value: Float64Array.from(keep, (i) => v.margin[i]!) };
}

function ktsScoredRows(m: LoadedModel, layer: number, family: string): ScoredRows | null {
  const v = m.values.kts.get(layer);
  if (!v || v.rows.length === 0) return null;
  const keep = Array.from(v.rows.keys()).filter((i) => inGroup(family, m.values.families[v.rows[i]!]!));
  return {
    fact: keep.map((i) => m.values.facts[v.rows[i]!]!),
    score: Float64Array.from(keep, (i) => v.score[i]!),
    label: Uint8Array.from(keep, (i) => v.label[i]!),
  };
}

function ktsDifference(
  a: LoadedModel,
  b: LoadedModel,
  p: LayerPair,
  family: string,
  o: Required<CompareOptions>,
): PairedDifference | null {
  const rows = [
    ktsScoredRows(a, p.layerA, family),
    ktsScoredRows(a, p.layerA, ANCHOR_FAMILY),
    ktsScoredRows(b, p.layerB, family),
    ktsScoredRows(b, p.layerB, ANCHOR_FAMILY),
  ];
  if (rows.some((r) => r === null)) return null;
  const [fa, aa, fb, ab] = rows as ScoredRows[];
  const stream = pairedStream(o.seed, `kts/${p.layerA}:${p.layerB}/${family}`);
  return pairedKtsDifference(
    { family: fa!, anchor: aa! },
    { family: fb!, anchor: ab! },
    { replicates: o.replicates, stream },
  );
}

/** The paired comparison of two loaded models; see the module's description. */
export function compareLoaded(a: LoadedModel, b: LoadedModel, options: CompareOptions = {}): Comparison {
  checkSameQueries(a, b);
  const o = { replicates: options.replicates ?? DEFAULT_BOOTSTRAP, seed: options.seed ?? DEFAULT_SEED };
  // Correctness over every scored query; ISS and KTS over the families the stores hold (main-forward rows).
  const families = familiesOf(scoredFamilies(a), scoredFamilies(b));
  const stored = familiesOf(a.values.families, b.values.families).filter((f) => f !== ANCHOR_FAMILY);
  const pairs = matchDepth(a.values.layers, a.values.numLayers, b.values.layers, b.values.numLayers);
  const depth: DepthComparison[] = [];
  for (const p of pairs) {
    for (const family of stored) {
      const stream = pairedStream(o.seed, `iss/${p.layerA}:${p.layerB}/${family}`);
      const iss = pairedFactMeanDifference(issFactValues(a, p.layerA, family), issFactValues(b, p.layerB, family), {
        replicates: o.replicates,
        stream,
      });
      depth.push({ ...p, family, iss, kts: ktsDifference(a, b, p, family, o) });
    }
  }
  return { a: a.name, b: b.name, ...o, families: familyComparisons(a, b, families), pairs, depth };
}

/** `hsm compare`: loads both models of `outputs` and compares them. */
export async function compareModels(
  outputs: string,
  a: string,
  b: string,
  o: CompareOptions & LoadOptions = {},
): Promise<Comparison> {
  const [ma, mb] = await Promise.all([findModel(outputs, a), findModel(outputs, b)]);
  const la = await loadModel(ma, o);
  const lb = await loadModel(mb, o);
  return compareLoaded(la, lb, o);
}
