/**
 * `hsm generate`: greedy decoding (num_beams 1, max_new_tokens 24) with the
 * prompts, left truncation and left padding of extraction. The graph is
 * rewritten so that the LM head runs on the last position only and the argmax
 * happens inside it; models with `past_key_values.*` inputs decode with the KV
 * cache, others recompute the whole sequence each step. Resumable: a rerun
 * skips the query_ids already written and never duplicates a line.
 */
import { createReadStream } from "node:fs";
import { mkdir, open, readFile, stat, truncate } from "node:fs/promises";
import { basename, dirname } from "node:path";
import { createInterface } from "node:readline";

import * as ort from "onnxruntime-node";

import { readBank, type BankRow } from "../bank/bank.js";
import { buildPrompt } from "../bank/prompt.js";
import { HsmError } from "../errors.js";
import { acquireLock } from "../store/lock.js";
import { leftPad, planBatches } from "./batching.js";
import { openModelDir } from "./model-dir.js";
import { DataType, decodeModel, encodeModel, GraphBuilder, graphIndex, pruneGraph, valueInfo, valueShape, type ModelProto, type ValueInfoProto } from "./onnx-graph.js";
import { createSession, stageModel, type ModelRunOptions } from "./session.js";
import { PromptTokenizer } from "./tokenizer.js";
import { rewriteWeightsInPlace } from "./rewrite.js";

export const MAX_NEW_TOKENS = 24;
export const NEXT_TOKEN = "hsm_next_token";

export interface GenerateOptions extends ModelRunOptions {
  maxNewTokens?: number;
}

/**
 * Rewrites a decoder for greedy steps: the LM head's MatMul reads only the last
 * position, an ArgMax picks the next token inside the graph, and the outputs
 * are that token and the KV cache (`present.*`).
 */
export function rewriteForGeneration(model: ModelProto): { cached: boolean } {
  const graph = model.graph!;
  const logits = (graph.output ?? []).find((o) => o.name === "logits");
  if (!logits) throw new HsmError(`the model has no "logits" output; outputs are ${(graph.output ?? []).map((o) => o.name).join(", ")}`);
  const { producer } = graphIndex(graph);
  const g = new GraphBuilder(new Set((graph.node ?? []).map((n) => n.name!)));
  const last = g.ints("/hsm/constants/last_positions", [-1]);
  const head = producer.get("logits");
  let lastLogits: string;
  if (head?.opType === "MatMul") {
    // Gather the last position before the LM head: [B, T, d] → [B, 1, d].
    const hidden = head.input![0]!;
    const gathered = g.op1("/hsm/lm_head", "Gather", [hidden, last], { axis: 1 });
    head.input![0] = gathered;
    lastLogits = "logits";
  } else {
    lastLogits = g.op1("/hsm/lm_head", "Gather", ["logits", last], { axis: 1 });
  }
  const arg = g.op1("/hsm", "ArgMax", [lastLogits], { axis: -1, keepdims: 0 }); // [B, 1]
  g.nodes.push({ name: "/hsm/next_token", opType: "Squeeze", input: [arg, g.ints("/hsm/constants/axes_1", [1])], output: [NEXT_TOKEN] });
  graph.node = [...(graph.node ?? []), ...g.nodes];
  graph.initializer = [...(graph.initializer ?? []), ...g.initializers];
  const presents = (graph.output ?? []).filter((o) => o.name!.startsWith("present"));
  graph.output = [valueInfo(NEXT_TOKEN, DataType.INT64, ["batch_size"]), ...presents];
  pruneGraph(graph);
  return { cached: presents.length > 0 };
}

/** The past input that a present output feeds on the next step. */
export function pastNameFor(present: string): string {
  return present.replace(/^present/, "past_key_values");
}

/** Reads what a previous run wrote; a last line cut off mid-write is removed. */
async function resumeFile(path: string): Promise<{ ids: Set<string> }> {
  const ids = new Set<string>();
  const st = await stat(path).catch(() => undefined);
  if (!st) return { ids };
  let good = 0;
  let offset = 0;
  let lineNo = 0;
  for await (const line of createInterface({ input: createReadStream(path, { encoding: "utf8" }), crlfDelay: Infinity })) {
    lineNo++;
    const bytes = Buffer.byteLength(line, "utf8") + 1;
    try {
      const row = JSON.parse(line) as { query_id?: unknown };
      if (typeof row.query_id !== "string") throw new Error("no query_id");
      ids.add(row.query_id);
      offset += bytes;
      good = offset;
    } catch {
      // Only a torn last line can be repaired; anything else is someone else's file.
      offset += bytes;
      if (offset < st.size) throw new HsmError(`${path}:${lineNo}: is not a generations line; refusing to append to this file`);
    }
  }
  if (good < st.size) await truncate(path, good);
  return { ids };
}

export async function generate(o: GenerateOptions): Promise<{ written: number; skipped: number; seconds: number }> {
  const t0 = performance.now();
  const maxNew = o.maxNewTokens ?? MAX_NEW_TOKENS;
  const batchSize = o.batchSize ?? 16;
  const rows = await readBank(o.bank);
  const md = await openModelDir(o.modelDir);
  const tokenizer = await PromptTokenizer.load(o.modelDir);
  tokenizer.checkVocab(md.config.vocabSize, `${o.modelDir}/tokenizer.json`);
  const eos = new Set<number>(tokenizer.eosIds);
  const cfgEos = md.config.raw.eos_token_id;
  for (const id of Array.isArray(cfgEos) ? cfgEos : cfgEos === undefined || cfgEos === null ? [] : [cfgEos]) eos.add(Number(id));
  const source = await readFile(md.onnxPath);
  const model = decodeModel(source);
  const inputs = new Map(model.graph!.input!.map((v) => [v.name!, v]));
  const { cached } = rewriteForGeneration(model);
  const stage = await stageModel(o.modelDir);
  // Weights stay where they are, read by offset from the original file (see extraction).
  if (stage) rewriteWeightsInPlace(model, source, stage.sourceName);
  const session = await createSession(encodeModel(model), stage, { device: o.device, threads: o.threads });
  const pastInputs = [...inputs.values()].filter((v) => /^past_key_values\.|^past\./.test(v.name!));
  const modelName = o.model ?? basename(o.modelDir.replace(/\/+$/, ""));

  await mkdir(dirname(o.out), { recursive: true });
  // One writer per generations file.
  const release = await acquireLock(dirname(o.out), `.${basename(o.out)}.lock`);
  try {
    const done = await resumeFile(o.out);
    const todo = rows.filter((r) => !done.ids.has(r.query_id));
    const fh = await open(o.out, "a");
    let written = 0;
    o.onProgress?.(done.ids.size, rows.length);
    try {
      const chunk = 256;
      for (let c = 0; c < todo.length; c += chunk) {
        const part = todo.slice(c, c + chunk);
        const prompts = part.map((r) => buildPrompt(r));
        const tokens = prompts.map((p) => tokenizer.encode(p));
        const lines: string[] = [];
        for (const batch of planBatches(tokens.map((t) => t.length), batchSize)) {
          const results = await decodeBatch(session, batch.map((i) => tokens[i]!), tokenizer.padId, eos, maxNew, cached, pastInputs, inputs.has("position_ids"));
          batch.forEach((i, b) => {
            const r: BankRow = part[i]!;
            const res = results[b]!;
            lines.push(
              JSON.stringify({
                query_id: r.query_id,
                fact_id: r.fact_id,
                condition_family: r.condition_family,
                model: modelName,
                prompt: prompts[i],
                raw_response: tokenizer.decode(res.tokens),
                generated_tokens: res.generated,
                finish_reason: res.finish,
              }),
            );
          });
        }
        await fh.write(lines.join("\n") + "\n");
        await fh.sync();
        written += part.length;
        o.onProgress?.(done.ids.size + written, rows.length);
      }
    } finally {
      await fh.close();
    }
    return { written, skipped: done.ids.size, seconds: (performance.now() - t0) / 1000 };
  } finally {
    await session.release().catch(() => {});
    await release();
  }
}

interface Decoded {
  tokens: number[];
  generated: number;
  finish: "eos" | "length";
}

async function decodeBatch(
  session: ort.InferenceSession,
  prompts: number[][],
  padId: number,
  eos: Set<number>,
  maxNew: number,
  cached: boolean,
  pastInputs: ValueInfoProto[],
  wantsPositions: boolean,
): Promise<Decoded[]> {
  const B = prompts.length;
  const out: Decoded[] = prompts.map(() => ({ tokens: [], generated: 0, finish: "length" }));
  const finished = new Array<boolean>(B).fill(false);
  // Step 0 reads the whole left-padded prompt; later steps one token each (or, without a cache, everything again).
  let seqs = prompts.map((p) => [...p]);
  let f = leftPad(seqs, padId);
  let mask = f.attentionMask;
  let maskLen = f.length;
  let lastPos = prompts.map((p) => p.length - 1);
  let past: Record<string, ort.Tensor> = {};
  for (const v of pastInputs) {
    const shape = (valueShape(v) ?? []).map((s, k) => (k === 0 ? B : typeof s === "number" ? s : 0));
    past[v.name!] = new ort.Tensor("float32", new Float32Array(0), shape);
  }
  let ids = f.inputIds;
  let idsLen = f.length;
  let positions = f.positionIds;
  for (let step = 0; step < maxNew; step++) {
    const feeds: Record<string, ort.Tensor> = {
      input_ids: new ort.Tensor("int64", ids, [B, idsLen]),
      attention_mask: new ort.Tensor("int64", mask, [B, maskLen]),
      ...(cached ? past : {}),
    };
    if (wantsPositions) feeds.position_ids = new ort.Tensor("int64", positions, [B, idsLen]);
    const result = await session.run(feeds);
    const next = result[NEXT_TOKEN]!.data as BigInt64Array;
    for (let b = 0; b < B; b++) {
      if (finished[b]) continue;
      const t = Number(next[b]!);
      out[b]!.generated++;
      if (eos.has(t)) {
        finished[b] = true;
        out[b]!.finish = "eos";
      } else out[b]!.tokens.push(t);
    }
    if (finished.every(Boolean)) break;
    // The next step's inputs: every row advances by its chosen token (finished rows too; their output is ignored).
    const chosen = Array.from(next, (v) => Number(v));
    lastPos = lastPos.map((p) => p + 1);
    if (cached) {
      past = {};
      for (const [name, tensor] of Object.entries(result)) if (name.startsWith("present")) past[pastNameFor(name)] = tensor;
      ids = BigInt64Array.from(chosen, (t) => BigInt(t));
      idsLen = 1;
      const grown = new BigInt64Array(B * (maskLen + 1));
      for (let b = 0; b < B; b++) {
        grown.set(mask.subarray(b * maskLen, (b + 1) * maskLen), b * (maskLen + 1));
        grown[b * (maskLen + 1) + maskLen] = 1n;
      }
      mask = grown;
      maskLen++;
      positions = BigInt64Array.from(lastPos, (p) => BigInt(p));
    } else {
      seqs = seqs.map((s, b) => [...s, chosen[b]!]);
      f = leftPad(seqs, padId);
      ids = f.inputIds;
      idsLen = f.length;
      mask = f.attentionMask;
      maskLen = f.length;
      positions = f.positionIds;
    }
  }
  return out;
}
