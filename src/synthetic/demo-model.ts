/**
 * The demo's model: a Llama-shaped decoder whose weights are set in closed
 * form from a bank's anchor questions (docs/demo.md), so that it knows most of
 * their facts and its hidden states show it. Nothing is trained or random but
 * a little seeded texture; the same bank gives the same bytes.
 *
 * - Embeddings record a token's spelling against the names the model knows:
 *   for each known fact, how much of its subject (the word only that anchor
 *   names, "France") and of its object (the first answer, "Paris") the token
 *   spells, as the name's first or last three letters or more.
 * - Block 0 attends to the most name-like tokens of the prompt (one head) and
 *   averages every token (another), at each position.
 * - Block 3's MLP recalls, at the answer cue (the prompt's last token): one
 *   neuron per known fact fires when the subject is spelled well enough and
 *   writes the answer's first token and a recall strength; another per fact
 *   answers the reverse question from the object; with neither, a guess.
 * - Blocks 4 and 5 fade the question's names; the answer stays.
 * - Each answer token's embedding names the token after it, so greedy
 *   decoding spells the answer out and then stops.
 *
 * One fact in {@link DEMO_FORGET_EVERY} is left out of the memory, so the
 * model is wrong on some anchors, as a correctness probe needs.
 */
import { dirname } from "node:path";

import { InternalError } from "../errors.js";
import { readBank, type BankRow } from "../bank/bank.js";
import { ANCHOR_FAMILY, buildPrompt } from "../bank/prompt.js";
import { PromptTokenizer } from "../model/tokenizer.js";
import { Rng } from "../util/random.js";
import {
  buildLlamaOnnx,
  hfConfigJson,
  tinyConfig,
  TOKENIZERS,
  tokenizerFiles,
  writeModelFolder,
  type LlamaConfig,
  type LlamaWeights,
} from "./llama.js";

/** Facts the model leaves out of its memory: those whose anchor index i has i mod this = 4. */
export const DEMO_FORGET_EVERY = 6;
/** What the model answers when it recognises no name. */
const GUESS = " London";
const LAYERS = 6;
const HIDDEN = 96;
const HEADS = 2;
const INTERMEDIATE = 48;
/** The block whose MLP recalls; the ones after it fade the names. */
const RECALL_BLOCK = 3;
const SEED = 20260101;

/** Scales of the stream (see docs/demo.md): the constant, the cue, an answer token's link to the next. */
const BIAS = 4;
const CUE = 4;
const LINK = 2;
const NOISE_DIMS = 8;
const NOISE_SD = 0.25;
/** Attention logit per unit of salience: the name-like tokens take nearly all the weight. */
const SALIENCE_LOGIT = 20;
/** A name spelled at least this well (share of its letters) is recognised. */
const THRESHOLD = 0.45;
/** Recall neurons' sharpness, and what they write per unit of activation. */
const SHARPNESS = 40;
const ANSWER_WEIGHT = 0.1;
const RECALL_WEIGHT = 0.3;
const GUESS_WEIGHT = 0.1;
/** Share of the names each fading block removes. */
const FADE = 0.5;
const LOGIT_SCALE = 10;

/** A fact the model is built from: its anchor's subject, its answer, and whether it is remembered. */
export interface DemoFact {
  factId: string;
  subject: string;
  object: string;
  known: boolean;
}

/** Letters only, accents dropped, lower case: the form names are compared in. */
function letters(s: string): string {
  return s
    .normalize("NFD")
    .replace(/\p{M}/gu, "")
    .toLowerCase()
    .replace(/[^\p{L}\p{N}]/gu, "");
}

/** The share of `name` a token spells: its letters, when three or more, as the name's beginning or end. */
function spells(piece: string, name: string): number {
  return piece.length >= 3 && (name.startsWith(piece) || name.endsWith(piece)) ? piece.length / name.length : 0;
}

/** The bank's facts as the model sees them: each anchor's words found in no other anchor, and its first answer. */
export function demoFacts(rows: readonly BankRow[]): DemoFact[] {
  const anchors = rows.filter((r) => r.condition_family === ANCHOR_FAMILY);
  const wordsOf = (q: string) => new Set(q.split(/\s+/).map(letters).filter(Boolean));
  const counts = new Map<string, number>();
  for (const a of anchors) for (const w of wordsOf(a.query)) counts.set(w, (counts.get(w) ?? 0) + 1);
  return anchors.flatMap((a, i) => {
    const own = a.query
      .split(/\s+/)
      .filter((w) => letters(w) && counts.get(letters(w)) === 1)
      .map((w) => w.replace(/^[^\p{L}\p{N}]+|[^\p{L}\p{N}]+$/gu, ""));
    if (own.length === 0 || a.answers.length === 0) return [];
    return [{ factId: a.fact_id, subject: own.join(" "), object: a.answers[0]!, known: i % DEMO_FORGET_EVERY !== 4 }];
  });
}

/** GPT-2's byte-level alphabet: the character standing for each byte in a byte-level BPE vocabulary. */
function byteDecoder(): Map<string, number> {
  const keep: number[] = [];
  for (let b = 33; b <= 126; b++) keep.push(b);
  for (let b = 161; b <= 172; b++) keep.push(b);
  for (let b = 174; b <= 255; b++) keep.push(b);
  const map = new Map<string, number>();
  let extra = 0;
  for (let b = 0; b < 256; b++) map.set(String.fromCodePoint(keep.includes(b) ? b : 256 + extra++), b);
  return map;
}

/** Every token's text (empty where its bytes are not whole UTF-8), by id. */
function tokenTexts(tok: PromptTokenizer): string[] {
  const bytes = byteDecoder();
  const texts = Array.from({ length: tok.size }, () => "");
  const utf8 = new TextDecoder("utf-8", { fatal: true });
  for (const [piece, id] of tok.tokenizer.get_vocab(true)) {
    const raw = [...piece].map((c) => bytes.get(c));
    if (raw.some((b) => b === undefined)) continue;
    try {
      texts[id] = utf8.decode(Uint8Array.from(raw as number[]));
    } catch {
      // a piece of a multi-byte character spells nothing
    }
  }
  return texts;
}

/** Where each feature lives in the residual stream. */
interface Layout {
  bias: number;
  cue: number;
  salience: number;
  pooledSalience: number;
  recall: number;
  fill: number;
  subject: number;
  object: number;
  out: number;
  noise: number;
}

/** The weights and config of the demo model for `facts`, tokenized by `tok`. */
function demoWeights(
  facts: readonly DemoFact[],
  tok: PromptTokenizer,
  cueId: number,
): { config: LlamaConfig; weights: LlamaWeights } {
  const config = tinyConfig({
    layers: LAYERS,
    hidden: HIDDEN,
    heads: HEADS,
    kvHeads: HEADS,
    intermediate: INTERMEDIATE,
  });
  const d = HIDDEN;
  const hd = config.head_dim;
  const V = config.vocab_size;
  const eos = TOKENIZERS["llama3.1"].eos;
  const known = facts.filter((f) => f.known);
  const K = known.length;
  const encode = (s: string) => tok.tokenizer.encode(s, { add_special_tokens: false }).ids as number[];

  // What each output token is followed by: answers forwards, then subjects (the reverse answers), then the guess.
  const next = new Map<number, number>();
  const chain = (ids: number[]) => ids.forEach((t, i) => next.has(t) || next.set(t, ids[i + 1] ?? eos));
  const firstAnswer = known.map((f) => encode(" " + f.object));
  const firstSubject = known.map((f) => encode(" " + f.subject));
  const guess = encode(GUESS);
  [...firstAnswer, ...firstSubject, guess].forEach(chain);
  const outputs = [...new Set([...next.keys(), ...next.values()])];
  const outDim = new Map(outputs.map((t, i) => [t, i]));

  const L: Layout = {
    bias: 0,
    cue: 1,
    salience: 2,
    pooledSalience: 3,
    recall: 4,
    fill: 5,
    subject: 6,
    object: 0,
    out: 0,
    noise: 0,
  };
  L.object = L.subject + K;
  L.out = L.object + K;
  L.noise = L.out + outputs.length;
  if (L.noise + NOISE_DIMS > d || 2 * K + 1 > hd || 2 * K + 1 > INTERMEDIATE)
    throw new InternalError(`the demo model holds at most ${Math.floor((hd - 1) / 2)} facts; the bank names ${K}`);

  // Embeddings: spelling, salience, links, texture; every row then filled to the same norm.
  // Which features each spelling of three letters or more carries: the names it begins or ends.
  const spelled = new Map<string, [dim: number, share: number][]>();
  const names = known.flatMap((f, k) => [
    [letters(f.subject), L.subject + k] as const,
    [letters(f.object), L.object + k] as const,
  ]);
  for (const [name, dim] of names) {
    const pieces = new Set<string>();
    for (let n = 3; n <= name.length; n++) pieces.add(name.slice(0, n)).add(name.slice(name.length - n));
    for (const p of pieces) spelled.set(p, [...(spelled.get(p) ?? []), [dim, spells(p, name)]]);
  }
  const embed = new Float32Array(V * d);
  const texts = tokenTexts(tok);
  const rng = new Rng(SEED, 1);
  const sq = new Float64Array(V);
  for (let t = 0; t < V; t++) {
    const at = t * d;
    embed[at + L.bias] = BIAS;
    if (t === cueId) embed[at + L.cue] = CUE;
    let salience = 0;
    for (const [dim, share] of spelled.get(letters(texts[t]!)) ?? []) {
      embed[at + dim] = share;
      salience = Math.max(salience, share);
    }
    embed[at + L.salience] = salience;
    const after = next.get(t);
    if (after !== undefined) embed[at + L.out + outDim.get(after)!] = LINK;
    for (let j = 0; j < NOISE_DIMS; j++) embed[at + L.noise + j] = rng.normal() * NOISE_SD;
    let sum = 0;
    for (let i = at; i < at + d; i++) sum += embed[i]! * embed[i]!;
    sq[t] = sum;
  }
  const norm2 = sq.reduce((m, v) => Math.max(m, v), 0) + 1;
  for (let t = 0; t < V; t++) embed[t * d + L.fill] = Math.sqrt(norm2 - sq[t]!);
  // Every embedding has the same RMS, so the first norm scales by this; later norms nearly so at the cue.
  const kappa = Math.sqrt(d / norm2);

  const zeros = (n: number) => new Float32Array(n);
  const ones = () => new Float32Array(d).fill(1);
  const layer = () => ({
    inputNorm: ones(),
    q: zeros(d * d),
    k: zeros(d * d),
    v: zeros(d * d),
    o: zeros(d * d),
    postNorm: ones(),
    gate: zeros(INTERMEDIATE * d),
    up: zeros(INTERMEDIATE * d),
    down: zeros(d * INTERMEDIATE),
  });
  const layers = Array.from({ length: LAYERS }, layer);

  // Block 0, head 0: a score of SALIENCE_LOGIT · salience on the rotary pair that barely turns, so
  // the prompt's name-like tokens take the weight; its values are their spellings and salience.
  const a = layers[0]!;
  const slow = hd / 2 - 1;
  a.q[slow * d + L.bias] = (SALIENCE_LOGIT * Math.sqrt(hd)) / (kappa * kappa * BIAS);
  a.k[slow * d + L.salience] = 1;
  const pooled: [from: number, to: number][] = [[L.salience, L.pooledSalience]];
  for (let k = 0; k < 2 * K; k++) pooled.push([L.subject + k, L.subject + k]);
  pooled.forEach(([from, to], j) => {
    a.v[j * d + from] = 1;
    a.o[to * d + j] = 1 / kappa;
  });
  // Head 1: no score at all, so every token weighs the same: the texture of the whole prompt.
  for (let j = 0; j < NOISE_DIMS; j++) {
    a.v[(hd + j) * d + L.noise + j] = 1;
    a.o[(L.noise + j) * d + hd + j] = 1 / kappa;
  }

  // The recall block: at the cue only (the up projection reads the cue), one neuron per fact and direction.
  const r = layers[RECALL_BLOCK]!;
  const neuron = (n: number, gate: [number, number][], out: number, weight: number, recall: number) => {
    for (const [dim, w] of gate) r.gate[n * d + dim] = w / kappa;
    r.up[n * d + L.cue] = 1 / (kappa * CUE);
    r.down[(L.out + out) * INTERMEDIATE + n] = weight;
    r.down[L.recall * INTERMEDIATE + n] = recall;
  };
  const threshold = (-SHARPNESS * THRESHOLD) / BIAS;
  known.forEach((_, k) => {
    neuron(
      k,
      [
        [L.subject + k, SHARPNESS],
        [L.bias, threshold],
      ],
      outDim.get(firstAnswer[k]![0]!)!,
      ANSWER_WEIGHT,
      RECALL_WEIGHT,
    );
    neuron(
      K + k,
      [
        [L.object + k, SHARPNESS],
        [L.subject + k, -SHARPNESS],
        [L.bias, threshold],
      ],
      outDim.get(firstSubject[k]![0]!)!,
      ANSWER_WEIGHT,
      RECALL_WEIGHT,
    );
  });
  const guessGate = 4;
  neuron(2 * K, [[L.bias, guessGate / BIAS]], outDim.get(guess[0]!)!, GUESS_WEIGHT / silu(guessGate), 0);

  // The fading blocks: linear maps x ← x − FADE·x on the names, through SiLU held near its linear range.
  const hold = 10;
  for (let l = RECALL_BLOCK + 1; l < LAYERS; l++) {
    const f = layers[l]!;
    pooled.forEach(([, dim], n) => {
      f.gate[n * d + L.bias] = hold / (kappa * BIAS);
      f.up[n * d + dim] = 1;
      f.down[dim * INTERMEDIATE + n] = -FADE / (silu(hold) * kappa);
    });
  }

  const lmHead = new Float32Array(V * d);
  for (const [t, i] of outDim) lmHead[t * d + L.out + i] = LOGIT_SCALE;

  // The same function in a turned basis: every weight reading the stream turned with it, every one
  // writing to it likewise (the norms' weights are all 1, so RMSNorm commutes with the turn). Each
  // feature then spreads over many coordinates, as in a trained model, instead of owning one.
  const turn = rotation(d, new Rng(SEED, 2));
  for (let t = 0; t < V; t++) {
    turn(embed, t * d, 1);
    if (outDim.has(t)) turn(lmHead, t * d, 1);
  }
  for (const w of layers) {
    for (const m of [w.q, w.k, w.v]) for (let i = 0; i < d; i++) turn(m, i * d, 1);
    for (const m of [w.gate, w.up]) for (let i = 0; i < INTERMEDIATE; i++) turn(m, i * d, 1);
    for (let j = 0; j < d; j++) turn(w.o, j, d);
    for (let n = 0; n < INTERMEDIATE; n++) turn(w.down, n, INTERMEDIATE);
  }
  return { config, weights: { embed, layers, norm: ones(), lmHead } };
}

/** A fixed rotation of R^d (a product of seeded Householder reflections), applied in place to the d values at `at`, `stride` apart. */
function rotation(d: number, rng: Rng, reflections = 6): (m: Float32Array, at: number, stride: number) => void {
  const us = Array.from({ length: reflections }, () => {
    const u = Float64Array.from({ length: d }, () => rng.normal());
    const n = Math.hypot(...u);
    return u.map((x) => x / n);
  });
  const x = new Float64Array(d);
  return (m, at, stride) => {
    for (let i = 0; i < d; i++) x[i] = m[at + i * stride]!;
    for (const u of us) {
      let dot = 0;
      for (let i = 0; i < d; i++) dot += u[i]! * x[i]!;
      for (let i = 0; i < d; i++) x[i] = x[i]! - 2 * dot * u[i]!;
    }
    for (let i = 0; i < d; i++) m[at + i * stride] = x[i]!;
  };
}

function silu(x: number): number {
  return x / (1 + Math.exp(-x));
}

/**
 * Writes the demo model for `bank` into `dir` (config.json, model.onnx with a KV cache, the Llama 3.1
 * tokenizer); returns its config and facts.
 */
export async function writeDemoModel(dir: string, bank: string): Promise<{ config: LlamaConfig; facts: DemoFact[] }> {
  const rows = await readBank(bank);
  const tok = await PromptTokenizer.load(dirname(tokenizerFiles("llama3.1").tokenizer));
  const facts = demoFacts(rows);
  const anchor = rows.find((r) => r.condition_family === ANCHOR_FAMILY);
  if (!anchor) throw new InternalError(`${bank} holds no anchor question to build the demo model from`);
  const cueId = tok.encode(buildPrompt(anchor)).at(-1)!;
  const { config, weights } = demoWeights(facts, tok, cueId);
  await writeModelFolder(dir, "llama3.1", {
    "model.onnx": buildLlamaOnnx(config, weights, true),
    "config.json": hfConfigJson(config, true),
  });
  return { config, facts };
}
