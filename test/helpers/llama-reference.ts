/**
 * An independent forward pass of the generated Llama-style model, in float64,
 * one unpadded sequence at a time, straight from the weights (not from the
 * ONNX graph). Returns, per decoder block, the residual stream at the last
 * position; the last block's entry has the final norm applied, as HuggingFace's
 * `hidden_states[L]`. Also greedy decoding over it and a byte-level decoder of
 * its own, for the generation tests.
 */
import { FORCED_LOGIT, type LlamaConfig, type LlamaWeights } from "../../src/synthetic/llama.js";

function rmsNorm(x: Float64Array, w: Float32Array, eps: number): Float64Array {
  let s = 0;
  for (const v of x) s += v * v;
  const r = 1 / Math.sqrt(s / x.length + eps);
  return x.map((v, i) => w[i]! * v * r);
}

/** y = W x for W in [out, in] (HuggingFace orientation). */
function linear(w: Float32Array, x: Float64Array, out: number): Float64Array {
  const inp = x.length;
  const y = new Float64Array(out);
  for (let o = 0; o < out; o++) {
    let s = 0;
    for (let i = 0; i < inp; i++) s += w[o * inp + i]! * x[i]!;
    y[o] = s;
  }
  return y;
}

function rope(v: Float64Array, pos: number, hd: number, theta: number): Float64Array {
  const half = hd / 2;
  const out = new Float64Array(hd);
  for (let i = 0; i < half; i++) {
    const angle = pos / Math.pow(theta, (2 * i) / hd);
    const c = Math.cos(angle);
    const s = Math.sin(angle);
    out[i] = v[i]! * c - v[i + half]! * s;
    out[i + half] = v[i + half]! * c + v[i]! * s;
  }
  return out;
}

/** A projection of every position at once: `y_t = W x_t` for W in [out, in]. Graphs that quantize activations per tensor need all positions together. */
export type Projection = (w: Float32Array, xs: Float64Array[], out: number) => Float64Array[];

/** Each position on its own, in float64. */
const float64Projection: Projection = (w, xs, out) => xs.map((x) => linear(w, x, out));

/** Per block, the residual stream at the last position (the last block after the final norm); `project` computes every projection. */
export function referenceHidden(
  c: LlamaConfig,
  w: LlamaWeights,
  ids: number[],
  project: Projection = float64Projection,
): Float64Array[] {
  const d = c.hidden_size;
  const H = c.num_attention_heads;
  const KV = c.num_key_value_heads;
  const hd = c.head_dim;
  const T = ids.length;
  let xs: Float64Array[] = ids.map((id) => Float64Array.from(w.embed.subarray(id * d, (id + 1) * d)));
  const result: Float64Array[] = [];
  for (const lw of w.layers) {
    const hs = xs.map((x) => rmsNorm(x, lw.inputNorm, c.rms_norm_eps));
    const heads = (all: Float64Array[], n: number, rotate: boolean) =>
      all.map((a, t) =>
        Array.from({ length: n }, (_, j) =>
          rotate ? rope(a.subarray(j * hd, (j + 1) * hd), t, hd, c.rope_theta) : a.subarray(j * hd, (j + 1) * hd),
        ),
      );
    const q = heads(project(lw.q, hs, H * hd), H, true);
    const k = heads(project(lw.k, hs, KV * hd), KV, true);
    const v = heads(project(lw.v, hs, KV * hd), KV, false);
    const ctxs = Array.from({ length: T }, (_, t) => {
      const ctx = new Float64Array(H * hd);
      for (let head = 0; head < H; head++) {
        const kvh = Math.floor(head / (H / KV));
        const scores = Array.from({ length: t + 1 }, (_, s) => {
          let dot = 0;
          for (let i = 0; i < hd; i++) dot += q[t]![head]![i]! * k[s]![kvh]![i]!;
          return dot / Math.sqrt(hd);
        });
        const m = Math.max(...scores);
        const e = scores.map((s) => Math.exp(s - m));
        const z = e.reduce((a, b) => a + b, 0);
        for (let s = 0; s <= t; s++) for (let i = 0; i < hd; i++) ctx[head * hd + i]! += (e[s]! / z) * v[s]![kvh]![i]!;
      }
      return ctx;
    });
    const o = project(lw.o, ctxs, d);
    const x1 = xs.map((x, t) => x.map((xi, i) => xi + o[t]![i]!));
    const h2 = x1.map((x) => rmsNorm(x, lw.postNorm, c.rms_norm_eps));
    const gate = project(lw.gate, h2, c.intermediate_size);
    const up = project(lw.up, h2, c.intermediate_size);
    const act = gate.map((g, t) => g.map((gi, i) => (gi / (1 + Math.exp(-gi))) * up[t]![i]!));
    const down = project(lw.down, act, d);
    xs = x1.map((x, t) => x.map((xi, i) => xi + down[t]![i]!));
    result.push(xs[T - 1]!);
  }
  result[result.length - 1] = rmsNorm(result[result.length - 1]!, w.norm, c.rms_norm_eps);
  return result;
}

/** The logits of the next token after `ids`: the LM head (float64, never quantized) over the last position's post-norm state, plus any forced transition. */
export function referenceLogits(
  c: LlamaConfig,
  w: LlamaWeights,
  ids: number[],
  project: Projection = float64Projection,
): Float64Array {
  const h = referenceHidden(c, w, ids, project).at(-1)!;
  const logits = linear(w.lmHead, h, c.vocab_size);
  for (const [from, to] of w.forcedNext ?? []) if (ids.at(-1) === from) logits[to]! += FORCED_LOGIT;
  return logits;
}

/**
 * The reference fed one token at a time: each block keeps every earlier
 * position's rotated keys and values, so that a new token costs one
 * position's work. Each call returns the new position's post-norm state,
 * the same numbers, bit for bit, as {@link referenceHidden}'s last entry for
 * the whole sequence so far: a position only ever reads positions before it,
 * and every operation here is the one referenceHidden does for it.
 */
export function referenceStepper(c: LlamaConfig, w: LlamaWeights): (id: number) => Float64Array {
  const d = c.hidden_size;
  const H = c.num_attention_heads;
  const KV = c.num_key_value_heads;
  const hd = c.head_dim;
  const keys: Float64Array[][][] = w.layers.map(() => []);
  const values: Float64Array[][][] = w.layers.map(() => []);
  return (id) => {
    const t = keys[0]!.length;
    let x = Float64Array.from(w.embed.subarray(id * d, (id + 1) * d));
    for (const [l, lw] of w.layers.entries()) {
      const h = rmsNorm(x, lw.inputNorm, c.rms_norm_eps);
      const split = (a: Float64Array, n: number, rotate: boolean) =>
        Array.from({ length: n }, (_, j) =>
          rotate ? rope(a.subarray(j * hd, (j + 1) * hd), t, hd, c.rope_theta) : a.subarray(j * hd, (j + 1) * hd),
        );
      const q = split(linear(lw.q, h, H * hd), H, true);
      keys[l]!.push(split(linear(lw.k, h, KV * hd), KV, true));
      values[l]!.push(split(linear(lw.v, h, KV * hd), KV, false));
      const k = keys[l]!;
      const v = values[l]!;
      const ctx = new Float64Array(H * hd);
      for (let head = 0; head < H; head++) {
        const kvh = Math.floor(head / (H / KV));
        const scores = Array.from({ length: t + 1 }, (_, s) => {
          let dot = 0;
          for (let i = 0; i < hd; i++) dot += q[head]![i]! * k[s]![kvh]![i]!;
          return dot / Math.sqrt(hd);
        });
        const m = Math.max(...scores);
        const e = scores.map((s) => Math.exp(s - m));
        const z = e.reduce((a, b) => a + b, 0);
        for (let s = 0; s <= t; s++) for (let i = 0; i < hd; i++) ctx[head * hd + i]! += (e[s]! / z) * v[s]![kvh]![i]!;
      }
      const o = linear(lw.o, ctx, d);
      const x1 = x.map((xi, i) => xi + o[i]!);
      const h2 = rmsNorm(x1, lw.postNorm, c.rms_norm_eps);
      const gate = linear(lw.gate, h2, c.intermediate_size);
      const up = linear(lw.up, h2, c.intermediate_size);
      const act = gate.map((gi, i) => (gi / (1 + Math.exp(-gi))) * up[i]!);
      const down = linear(lw.down, act, d);
      x = x1.map((xi, i) => xi + down[i]!);
    }
    return rmsNorm(x, w.norm, c.rms_norm_eps);
  };
}

/**
 * Greedy decoding, one unpadded prompt at a time, over {@link referenceStepper}
 * (the logits of full recomputation, each position computed once): the ids
 * generated, the EOS that stopped it included.
 */
export function referenceGreedy(
  c: LlamaConfig,
  w: LlamaWeights,
  prompt: number[],
  eos: ReadonlySet<number>,
  maxNew: number,
): number[] {
  const step = referenceStepper(c, w);
  let h: Float64Array = new Float64Array(0);
  for (const id of prompt) h = step(id);
  const out: number[] = [];
  while (out.length < maxNew) {
    const logits = linear(w.lmHead, h, c.vocab_size);
    const last = out.at(-1) ?? prompt.at(-1);
    for (const [from, to] of w.forcedNext ?? []) if (last === from) logits[to]! += FORCED_LOGIT;
    let best = 0;
    for (let v = 1; v < logits.length; v++) if (logits[v]! > logits[best]!) best = v;
    out.push(best);
    if (eos.has(best)) break;
    if (out.length < maxNew) h = step(best);
  }
  return out;
}

/** GPT-2's byte ↔ printable-character table, as byte-level BPE tokenizers define it. */
function unicodeToByte(): Map<string, number> {
  const bytes: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) bytes.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bytes.push(b);
  for (let b = 0xae; b <= 0xff; b++) bytes.push(b);
  const chars = [...bytes];
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bytes.includes(b)) {
      bytes.push(b);
      chars.push(256 + n++);
    }
  }
  return new Map(bytes.map((b, i) => [String.fromCodePoint(chars[i]!), b]));
}

/**
 * A byte-level decoder written from tokenizer.json alone, as HuggingFace's
 * `decode(ids, skip_special_tokens=True)` works: special added tokens dropped,
 * other added tokens kept as their text, every other token mapped back to its
 * bytes, and the bytes between added tokens decoded at once (U+FFFD for
 * invalid sequences).
 */
export function referenceDecoder(tokenizerJson: string): (ids: number[]) => string {
  const json = JSON.parse(tokenizerJson) as {
    model: { vocab: Record<string, number> };
    added_tokens: { id: number; content: string; special: boolean }[];
  };
  const pieces = new Map<number, string>();
  for (const [piece, id] of Object.entries(json.model.vocab)) pieces.set(id, piece);
  const added = new Map(json.added_tokens.map((t) => [t.id, t]));
  const toByte = unicodeToByte();
  return (ids) => {
    let text = "";
    let bytes: number[] = [];
    const flush = () => {
      text += new TextDecoder("utf-8").decode(Uint8Array.from(bytes));
      bytes = [];
    };
    for (const id of ids) {
      const a = added.get(id);
      if (a?.special) continue;
      if (a) {
        flush();
        text += a.content;
        continue;
      }
      const piece = pieces.get(id);
      if (piece === undefined) continue;
      for (const ch of piece) bytes.push(toByte.get(ch)!);
    }
    flush();
    return text;
  };
}
