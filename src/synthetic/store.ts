/**
 * Synthetic fixtures with planted structure: a query bank, a complete
 * hidden-state store and a scored file that agree with each other, so that every
 * later stage can be tested and benchmarked without a model.
 *
 * What is planted, per stored layer at relative depth t = (l + 1) / L:
 * - fact identity: each row carries its fact's random direction u_f with weight
 *   a(t)·(1 − w_c), where a rises with depth and each perturbation family c
 *   weakens it by its own w_c (mild families small, strong ones large);
 * - knowledge: a per-fact latent k_f decides the labels (correct when
 *   k_f + noise > threshold), and rows carry k_f along one fixed direction with
 *   weight b(t)·(1 − w_c)², so a probe trained on anchors transfers to mild
 *   families and much less to strong ones;
 * - a per-layer offset with a few large dimensions, as real residual streams
 *   have, plus isotropic noise.
 */
import { createHash } from "node:crypto";
import { rename, rm, stat } from "node:fs/promises";
import { availableParallelism } from "node:os";
import { dirname, join } from "node:path";

import { DEFAULT_LAYER_RULE, DEFAULT_SEED } from "../defaults.js";
import { UsageError } from "../errors.js";
import { selectLayers } from "../store/layers.js";
import type { Manifest } from "../store/manifest.js";
import { StoreWriter } from "../store/writer.js";
import { fileError, makeWorkFolder, syncDir, writeFileAtomic } from "../util/fs.js";
import { Rng } from "../util/random.js";
import { REAL_BANK, type FixtureOptions } from "./store-presets.js";

export type { FixtureOptions };

/** The perturbation families and how much each weakens the planted signals. */
export const FIXTURE_FAMILIES: Readonly<Record<string, number>> = {
  paraphrase: 0.1,
  typo: 0.25,
  reorder: 0.4,
  distractor: 0.6,
  translation: 0.8,
};

export interface FixtureResult {
  dir: string;
  bank: string;
  store: string;
  scored: string;
  rows: number;
  mainForwardRows: number;
  manifest: Manifest;
}

const EXTRA_PER_FACT = REAL_BANK.extraRows / REAL_BANK.facts;
const EXTRA_MAIN_PER_FACT = REAL_BANK.extraMainRows / REAL_BANK.facts;

const QUERY_FORMS: Record<string, (i: number) => string> = {
  anchor: (i) => `What is the capital of Land ${i}?`,
  paraphrase: (i) => `Which city serves as the capital of Land ${i}?`,
  typo: (i) => `Waht is the captial of Lnad ${i}?`,
  reorder: (i) => `The capital of Land ${i} is which city?`,
  distractor: (i) => `Land ${i} borders the sea and grows wheat. What is the capital of Land ${i}?`,
  translation: (i) => `¿Cuál es la capital de Land ${i}?`,
  reverse: (i) => `City ${i} is the capital of which land?`,
};
/** The second paraphrase some facts have. */
const SECOND_PARAPHRASE = (i: number) => `Land ${i} has which city as its capital?`;

export interface PlannedRow {
  query_id: string;
  fact: number;
  family: string;
  main: boolean;
  /** The fact's second row of this family (its own wording). */
  second?: boolean;
}

/**
 * The fixture's bank rows in order: per fact its anchor and one row per family
 * of FIXTURE_FAMILIES, a second paraphrase for the first `extraMain` facts, and a
 * reverse row (outside the main forward pass) for the first `extra` facts, more
 * reverse rows cycling over the facts when `extra` exceeds them.
 */
export function planFixtureBank(facts: number, extraMain: number, extra: number): PlannedRow[] {
  const families = ["anchor", ...Object.keys(FIXTURE_FAMILIES)];
  const plan: PlannedRow[] = [];
  for (let f = 0; f < facts; f++) {
    for (const family of families) plan.push({ query_id: "", fact: f, family, main: true });
    if (f < extraMain) plan.push({ query_id: "", fact: f, family: "paraphrase", main: true, second: true });
    if (f < extra) plan.push({ query_id: "", fact: f, family: "reverse", main: false });
  }
  for (let f = facts; plan.length < facts * families.length + extraMain + extra; f++) {
    plan.push({ query_id: "", fact: f % facts, family: "reverse", main: false });
  }
  plan.forEach((r, i) => (r.query_id = `query_${String(i + 1).padStart(8, "0")}`));
  return plan;
}

/**
 * Writes `bank.jsonl`, `store/` and `scored.jsonl` (and `fixture.json`, the
 * planted parameters) into `out`. Everything is built in a sibling temporary
 * folder and renamed into place, so a failure leaves nothing half-written.
 */
export async function writeFixture(out: string, options: FixtureOptions = {}): Promise<FixtureResult> {
  const facts = options.facts ?? 60;
  const d = options.d ?? 64;
  const L = options.layersTotal ?? 6;
  const seed = options.seed ?? DEFAULT_SEED;
  const extra = options.extraRows ?? Math.round(facts * EXTRA_PER_FACT);
  const extraMain = options.extraMainRows ?? Math.round(facts * EXTRA_MAIN_PER_FACT);
  const nonfiniteRows = options.nonfiniteRows ?? 0;
  for (const [name, v, min] of [
    ["--facts", facts, 2],
    ["--d", d, 2],
    ["--layers-total", L, 1],
    ["--extra-rows", extra, 0],
    ["--extra-main-rows", extraMain, 0],
    ["--nonfinite-rows", nonfiniteRows, 0],
  ] as const) {
    if (!Number.isSafeInteger(v) || v < min)
      throw new UsageError(`Expected an integer of at least ${min} for ${name} but received ${v}`);
  }
  if (extraMain > facts)
    throw new UsageError(
      `Expected at most one second paraphrase per fact, so --extra-main-rows of at most --facts (${facts}), but received ${extraMain}`,
    );
  if (!Number.isSafeInteger(seed) || seed < 0)
    throw new UsageError(`Expected a non-negative integer for --seed but received ${seed}`);
  if (await exists(out)) throw new UsageError(`${out} already exists; choose a new folder for the fixture`);

  const { dir: temp, forget } = await makeWorkFolder(out, "partial");
  try {
    const result = await build(temp, {
      facts,
      d,
      L,
      seed,
      extra,
      extraMain,
      nonfiniteRows,
      onProgress: options.onProgress,
    });
    try {
      await rename(temp, out);
      await syncDir(dirname(out));
    } catch (err) {
      throw fileError(err, out, "write");
    }
    return {
      ...result,
      dir: out,
      bank: join(out, "bank.jsonl"),
      store: join(out, "store"),
      scored: join(out, "scored.jsonl"),
    };
  } catch (err) {
    await rm(temp, { recursive: true, force: true });
    throw err;
  } finally {
    forget();
  }
}

/** What {@link build} plants, as writeFixture checked it. */
interface BuildOptions {
  facts: number;
  d: number;
  L: number;
  seed: number;
  extra: number;
  extraMain: number;
  nonfiniteRows: number;
  onProgress?: FixtureOptions["onProgress"];
}

/** Spread of the noise on a row's knowledge score: labels follow the latent, not exactly. */
const LABEL_NOISE = 0.6;
/** How far a family's weakening w_c lowers the knowledge score, so strong perturbations are answered worse. */
const FAMILY_PENALTY = 0.8;
/** Cumulative shares of the rare labels (2 % abstain, 1 % ambiguous, 0.5 % unparseable), so every label occurs. */
const ABSTAIN_BELOW = 0.02;
const AMBIGUOUS_BELOW = 0.03;
const UNPARSEABLE_BELOW = 0.035;
/** Floats per store write (4 MiB of float32), whatever d is. */
const BLOCK_FLOATS = 1 << 20;
/** Large offset dimensions per layer, as real residual streams have a few. */
const MASSIVE_DIMS = 4;
/** The knowledge direction's length as a share of √d, the length of the fact directions. */
const KNOWLEDGE_GAIN = 0.25;

/** Each planned row's label: correct when its fact's knowledge plus noise, less its family's weakening, is positive. */
function plantLabels(plan: PlannedRow[], knowledge: Float64Array, rng: Rng): string[] {
  return plan.map((r) => {
    const w = r.family === "anchor" ? 0 : (FIXTURE_FAMILIES[r.family] ?? 0.5);
    const score = knowledge[r.fact]! + LABEL_NOISE * rng.normal() - FAMILY_PENALTY * w;
    const u = rng.uniform();
    if (u < ABSTAIN_BELOW) return "abstain";
    if (u < AMBIGUOUS_BELOW) return "ambiguous";
    if (u < UNPARSEABLE_BELOW) return "unparseable";
    return score > 0 ? "correct" : "incorrect";
  });
}

/** The fixture's fact id of fact `f`. */
const factId = (f: number) => `fact_${String(f).padStart(6, "0")}`;

/** The lines of bank.jsonl and of scored.jsonl, one per planned row, each scored row agreeing with its label. */
function bankAndScoredLines(plan: PlannedRow[], labels: string[], facts: number): { bank: string[]; scored: string[] } {
  const bankLines: string[] = [];
  const scoredLines: string[] = [];
  plan.forEach((r, i) => {
    const n = r.fact;
    const bankRow = {
      query_id: r.query_id,
      fact_id: factId(n),
      condition_family: r.family,
      query: r.second ? SECOND_PARAPHRASE(n) : QUERY_FORMS[r.family]!(n),
      relation: "capital_of",
      language: r.family === "translation" ? "es" : "en",
      target_slot: r.family === "reverse" ? "subject" : "object",
      answer_type: "place",
      answer_granularity: "entity",
      answer_in_subject_surface: false,
      use_for_main_forward: r.main,
      use_for_reverse_analysis: r.family === "reverse",
      use_for_recognition_analysis: false,
      answers: r.family === "reverse" ? [`Land ${n}`] : [`City ${n}`, `City-${n}`],
    };
    bankLines.push(JSON.stringify(bankRow));
    const label = labels[i]!;
    const gold = bankRow.answers[0]!;
    const raw = {
      correct: ` ${gold}\nExplanation: it has been the capital for years.`,
      incorrect: ` City ${(n + 7) % facts}\n`,
      abstain: " I don't know.",
      ambiguous: ` ${gold} or City ${(n + 3) % facts}`,
      unparseable: "\n",
    }[label]!;
    const span = {
      correct: gold,
      incorrect: `City ${(n + 7) % facts}`,
      abstain: "I don't know",
      ambiguous: raw.trim(),
      unparseable: "",
    }[label]!;
    const { query_id: _id, query: _q, answers: _a, ...carried } = bankRow;
    scoredLines.push(
      JSON.stringify({
        query_id: r.query_id,
        model: "synthetic-fixture",
        ...carried,
        raw_response: raw,
        span,
        flags: [],
        label,
        matched_alias: label === "correct" || label === "ambiguous" ? gold : null,
        scorer: {
          correct: "exact_alias",
          incorrect: "no_alias_match",
          abstain: "abstain_phrase",
          ambiguous: "multiple_candidates",
          unparseable: "empty_span",
        }[label],
        needs_manual_review: false,
      }),
    );
  });
  return { bank: bankLines, scored: scoredLines };
}

/** What every layer's rows are planted from: the fact and knowledge directions, the latents, the non-finite rows. */
interface Planting {
  main: PlannedRow[];
  knowledge: Float64Array;
  factDirs: Float32Array;
  knowDir: Float32Array;
  infRows: Set<number>;
  block: Float32Array;
  blockRows: number;
  /** Rows over all layers, for progress. */
  progressTotal: number;
}

/**
 * Writes one stored layer's rows: identity a(t)·(1 − w_c) along the fact's
 * direction, knowledge b(t)·(1 − w_c)²·k_f along one direction, noise, all
 * scaled and shifted by the layer's offset; on the last layer the chosen rows start with +Infinity.
 */
async function writeLayer(
  writer: StoreWriter,
  o: BuildOptions,
  p: Planting,
  li: number,
  layer: number,
  last: boolean,
): Promise<void> {
  const { main, knowledge, factDirs, knowDir, infRows, block, blockRows } = p;
  const t = (layer + 1) / o.L;
  const a = 0.3 + 1.7 * t;
  const b = 0.5 + 2.5 * t;
  const lr = new Rng(o.seed, 100 + layer);
  const offset = lr.fillNormal(new Float32Array(o.d), 0.5);
  for (let k = 0; k < Math.min(MASSIVE_DIMS, o.d); k++)
    offset[lr.int(o.d)] = (lr.uniform() < 0.5 ? -1 : 1) * (40 + 80 * t);
  const scale = 4 + 8 * t;
  for (let start = 0; start < main.length; start += blockRows) {
    const count = Math.min(blockRows, main.length - start);
    for (let i = 0; i < count; i++) {
      const r = main[start + i]!;
      const w = r.family === "anchor" ? 0 : FIXTURE_FAMILIES[r.family]!;
      const ident = a * (1 - w);
      const know = b * (1 - w) ** 2 * knowledge[r.fact]!;
      const base = i * o.d;
      const fd = r.fact * o.d;
      for (let j = 0; j < o.d; j++) {
        block[base + j] =
          offset[j]! +
          scale * (ident * factDirs[fd + j]! + know * knowDir[j]! * Math.sqrt(o.d) * KNOWLEDGE_GAIN + lr.normal());
      }
      if (last && infRows.has(start + i)) block[base] = Infinity;
    }
    await writer.writeRowsF32(layer, start, block.subarray(0, count * o.d));
    o.onProgress?.("store", li * main.length + start + count, p.progressTotal);
  }
}

/** Opens the store of the main-forward rows at the selected layers. */
function openFixtureStore(dir: string, o: BuildOptions, main: PlannedRow[], layers: number[]): Promise<StoreWriter> {
  const modelHash = createHash("sha256").update(`synthetic-fixture:${o.seed}:${o.facts}:${o.d}:${o.L}`).digest("hex");
  return StoreWriter.open(join(dir, "store"), {
    model: "synthetic-fixture",
    model_sha256: modelHash,
    num_layers: o.L,
    d_model: o.d,
    layers,
    layer_rule: DEFAULT_LAYER_RULE,
    last_layer_final_norm: true,
    dtype: "float32",
    query_ids: main.map((r) => r.query_id),
    fact_ids: main.map((r) => factId(r.fact)),
    condition_families: main.map((r) => r.family),
  });
}

/** fixture.json: the parameters the fixture was planted with. */
function fixtureJson(o: BuildOptions): string {
  const params = {
    generator: "hsm fixture",
    facts: o.facts,
    d: o.d,
    layers_total: o.L,
    seed: o.seed,
    extra_rows: o.extra,
    extra_main_rows: o.extraMain,
    nonfinite_rows: o.nonfiniteRows,
    family_weakening: FIXTURE_FAMILIES,
  };
  return JSON.stringify(params, null, 2) + "\n";
}

async function build(dir: string, o: BuildOptions): Promise<Omit<FixtureResult, "dir" | "bank" | "store" | "scored">> {
  const rng = new Rng(o.seed, 0);
  const plan = planFixtureBank(o.facts, o.extraMain, o.extra);
  // The latent knowledge per fact and the labels it implies.
  const knowledge = Float64Array.from({ length: o.facts }, () => rng.normal());
  const labels = plantLabels(plan, knowledge, rng);
  const lines = bankAndScoredLines(plan, labels, o.facts);
  await writeFileAtomic(join(dir, "bank.jsonl"), lines.bank.join("\n") + "\n");
  await writeFileAtomic(join(dir, "scored.jsonl"), lines.scored.join("\n") + "\n");

  const main = plan.filter((r) => r.main);
  const layers = selectLayers(o.L, DEFAULT_LAYER_RULE);
  const writer = await openFixtureStore(dir, o, main, layers);
  try {
    const factDirs = new Rng(o.seed, 1).fillNormal(new Float32Array(o.facts * o.d));
    const knowDir = unit(new Rng(o.seed, 2).fillNormal(new Float32Array(o.d)));
    const blockRows = Math.max(1, Math.floor(BLOCK_FLOATS / o.d));
    const block = new Float32Array(blockRows * o.d);
    const infRows = new Set<number>();
    const pick = new Rng(o.seed, 3);
    while (infRows.size < Math.min(o.nonfiniteRows, main.length)) infRows.add(pick.int(main.length));
    const progressTotal = layers.length * main.length;
    const planting: Planting = { main, knowledge, factDirs, knowDir, infRows, block, blockRows, progressTotal };
    for (const [li, layer] of layers.entries())
      await writeLayer(writer, o, planting, li, layer, li === layers.length - 1);
    const manifest = await writer.finish(availableParallelism());
    return { rows: plan.length, mainForwardRows: main.length, manifest };
  } finally {
    await writer.close();
    await writeFileAtomic(join(dir, "fixture.json"), fixtureJson(o));
  }
}

function unit(v: Float32Array): Float32Array {
  let s = 0;
  for (const x of v) s += x * x;
  const n = Math.sqrt(s);
  for (let i = 0; i < v.length; i++) v[i]! /= n;
  return v;
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch (err) {
    // ENOTDIR: a parent is a file, so nothing is there either (creating it will say why it cannot be).
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT" || code === "ENOTDIR") return false;
    throw fileError(err, path);
  }
}
