/**
 * Generation on generated models: the greedy text equals an argmax loop over
 * full recomputation with the original graph; batch sizes 1 and 8 give the
 * same text; a run killed with kill -9 resumes without duplicating or dropping
 * a line; scoring and both exports follow.
 */
import { spawn, spawnSync } from "node:child_process";
import { appendFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import * as ort from "onnxruntime-node";
import { beforeAll, describe, expect, it } from "vitest";

import { buildPrompt } from "../../src/bank/prompt.js";
import { writeTinyModel } from "../../src/models/llama.js";
import { generate } from "../../src/runner/generate.js";
import { PromptTokenizer } from "../../src/runner/tokenizer.js";
import { tempDir } from "../helpers/tmp.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
const dir = tempDir("hsm-generate-");
const withPast = join(dir, "with-past");
const noPast = join(dir, "no-past");
const bank = join(dir, "bank.jsonl");
const bigBank = join(dir, "big-bank.jsonl");

const QUERIES = ["What is the capital of France?", "Who wrote Hamlet?", "¿Dónde está Lima?", "Ok?", `${"Long preamble words here. ".repeat(45)}So, what is two plus two?`, "Name a prime number."];

function lines(n: number): string {
  return (
    Array.from({ length: n }, (_, i) =>
      JSON.stringify({ query_id: `q${i}`, fact_id: `f${i >> 1}`, condition_family: i % 2 ? "typo" : "anchor", query: `${QUERIES[i % QUERIES.length]}${i >= QUERIES.length ? ` #${i}` : ""}`, use_for_main_forward: true, answers: ["Paris", "4"] }),
    ).join("\n") + "\n"
  );
}

const read = (path: string) => new Map(readFileSync(path, "utf8").trim().split("\n").map((l) => [JSON.parse(l).query_id as string, JSON.parse(l)]));

beforeAll(async () => {
  await writeTinyModel(withPast, { layers: 3, hidden: 32, heads: 4, kvHeads: 2, withPast: true, seed: 21 });
  await writeTinyModel(noPast, { layers: 2, hidden: 32, heads: 2, kvHeads: 1, seed: 22 });
  writeFileSync(bank, lines(12));
  writeFileSync(bigBank, lines(150));
});

/** Greedy by full recomputation with the unmodified model, one prompt at a time. */
async function reference(modelDir: string, prompt: string, maxNew = 24): Promise<{ text: string; generated: number; finish: string }> {
  const tok = await PromptTokenizer.load(modelDir);
  const config = JSON.parse(readFileSync(join(modelDir, "config.json"), "utf8"));
  const eos = new Set([...tok.eosIds, config.eos_token_id].flat());
  const session = await ort.InferenceSession.create(join(modelDir, "model.onnx"));
  const ids = tok.encode(prompt);
  const out: number[] = [];
  let finish = "length";
  let generated = 0;
  for (let step = 0; step < maxNew; step++) {
    const all = [...ids, ...out];
    const feeds: Record<string, ort.Tensor> = {
      input_ids: new ort.Tensor("int64", BigInt64Array.from(all, BigInt), [1, all.length]),
      attention_mask: new ort.Tensor("int64", new BigInt64Array(all.length).fill(1n), [1, all.length]),
      position_ids: new ort.Tensor("int64", BigInt64Array.from(all.keys(), BigInt), [1, all.length]),
    };
    for (const name of session.inputNames.filter((n) => n.startsWith("past_key_values"))) {
      feeds[name] = new ort.Tensor("float32", new Float32Array(0), [1, config.num_key_value_heads, 0, config.head_dim]);
    }
    const logits = (await session.run(feeds)).logits!;
    const V = logits.dims[2]!;
    const last = (logits.data as Float32Array).subarray((all.length - 1) * V, all.length * V);
    let best = 0;
    for (let v = 1; v < V; v++) if (last[v]! > last[best]!) best = v;
    generated++;
    if (eos.has(best)) {
      finish = "eos";
      break;
    }
    out.push(best);
  }
  return { text: tok.decode(out), generated, finish };
}

describe("hsm generate", () => {
  for (const [name, model] of [["with the KV cache", withPast], ["by full recomputation (no cache inputs)", noPast]] as const) {
    it(`equals an argmax loop over full recomputation, ${name}, at batch sizes 1 and 8`, async () => {
      const b1 = join(dir, `${name.length}-b1.jsonl`);
      const b8 = join(dir, `${name.length}-b8.jsonl`);
      await generate({ modelDir: model, bank, out: b1, batchSize: 1 });
      await generate({ modelDir: model, bank, out: b8, batchSize: 8 });
      const one = read(b1);
      const eight = read(b8);
      expect(one.size).toBe(12);
      for (const [id, row] of one) expect(eight.get(id)).toEqual(row);
      const rows = readFileSync(bank, "utf8").trim().split("\n").map((l) => JSON.parse(l));
      for (const r of rows.slice(0, 6)) {
        const want = await reference(model, buildPrompt(r));
        const got = one.get(r.query_id);
        expect({ text: got.raw_response, generated: got.generated_tokens, finish: got.finish_reason }).toEqual(want);
        expect(got.prompt).toBe(buildPrompt(r));
      }
    });
  }

  it("resumes after kill -9 without duplicating or dropping a line", async () => {
    const args = (out: string) => [BIN, "generate", "--model-dir", withPast, "--bank", bigBank, "--out", out, "--batch-size", "4", "--quiet"];
    expect(spawnSync(process.execPath, args(join(dir, "whole.jsonl"))).status).toBe(0);
    const out = join(dir, "killed.jsonl");
    const child = spawn(process.execPath, args(out), { stdio: "ignore" });
    await new Promise<void>((resolve) => {
      const poll = setInterval(() => {
        if (existsSync(out) && readFileSync(out, "utf8").split("\n").length > 1) child.kill("SIGKILL");
      }, 5);
      child.on("exit", () => {
        clearInterval(poll);
        resolve();
      });
    });
    // A line torn by the kill is repaired on resume.
    appendFileSync(out, '{"query_id": "q1');
    expect(spawnSync(process.execPath, args(out)).status).toBe(0);
    const text = readFileSync(out, "utf8").trim().split("\n");
    expect(text).toHaveLength(150);
    expect(new Set(text.map((l) => JSON.parse(l).query_id)).size).toBe(150);
    const whole = read(join(dir, "whole.jsonl"));
    for (const [id, row] of read(out)) expect(row).toEqual(whole.get(id));
    const again = spawnSync(process.execPath, args(out), { encoding: "utf8" });
    expect(again.stdout).toMatch(/0 generated, 150 already there/);
  });
});

describe("hsm score and hsm export on generations", () => {
  it("scores every generation, and stops on unknown or missing queries", () => {
    const gen = join(dir, "whole.jsonl");
    const scored = join(dir, "scored.jsonl");
    const r = spawnSync(process.execPath, [BIN, "score", "--bank", bigBank, "--generations", gen, "--out", scored], { encoding: "utf8" });
    expect(r.status).toBe(0);
    const rows = readFileSync(scored, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    expect(rows).toHaveLength(150);
    expect(Object.keys(rows[0])).toEqual([
      "query_id", "model", "fact_id", "relation", "condition_family", "language", "target_slot", "answer_type", "answer_granularity",
      "answer_in_subject_surface", "use_for_main_forward", "use_for_reverse_analysis", "use_for_recognition_analysis",
      "raw_response", "span", "flags", "label", "matched_alias", "scorer", "needs_manual_review",
    ]);
    const partial = join(dir, "partial-gen.jsonl");
    writeFileSync(partial, readFileSync(gen, "utf8").split("\n").slice(0, 10).join("\n") + "\n" + JSON.stringify({ query_id: "nope", raw_response: "x" }) + "\n");
    const bad = spawnSync(process.execPath, [BIN, "score", "--bank", bigBank, "--generations", partial, "--out", join(dir, "s2.jsonl")], { encoding: "utf8" });
    expect(bad.status).toBe(1);
    expect(bad.stderr).toMatch(/partial-gen\.jsonl:11: field "query_id": "nope" is not in the bank/);
    expect(existsSync(join(dir, "s2.jsonl"))).toBe(false);
    const allowed = spawnSync(process.execPath, [BIN, "score", "--bank", bigBank, "--generations", partial, "--out", join(dir, "s3.jsonl"), "--allow-missing"], { encoding: "utf8" });
    expect(allowed.status).toBe(0);
    expect(allowed.stderr).toMatch(/140 bank queries without a generation, 1 generations for unknown queries/);
  });
});
