/**
 * Generation on generated models: every row's text, token count and finish
 * reason equal an independent float64 greedy decode (test/helpers/llama-reference.ts:
 * each position computed once, bit for bit as full recomputation computes it,
 * with its own byte-level decoder) on the 1k-vocabulary tokenizer, at batch
 * sizes 1 and 8 — on plain models, with and without the KV cache (a batch of
 * long prompts running its first step in chunks of rows), and on
 * models made to emit an EOS first, an EOS as the 24th token, reserved special
 * tokens and UTF-8 split across tokens. A run killed with kill -9 resumes into
 * the same file as an uninterrupted run; a query that cannot run costs only
 * its own row; scoring follows.
 */
import { execFileSync, spawn, spawnSync } from "node:child_process";
import {
  appendFileSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import * as ort from "onnxruntime-node";
import { beforeAll, describe, expect, it } from "vitest";

import { buildPrompt } from "../../src/bank/prompt.js";
import { MAX_NEW_TOKENS } from "../../src/defaults.js";
import { EXIT, UsageError } from "../../src/errors.js";
import { tinyConfig, tinyWeights, writeTinyModel, type TinyModelOptions } from "../../src/synthetic/llama.js";
import { GenerationError, generate, rewriteForGeneration } from "../../src/generate/generate.js";
import { NEXT_TOKEN, PROMPT_STEP_TOKENS } from "../../src/generate/decode-batch.js";
import { encodeModel, loadModel } from "../../src/onnx/graph.js";
import { changeModelFile, dropAttentionMask, fixDimension, int32Inputs } from "../../src/synthetic/input-variants.js";
import { writeAtOpset } from "../../src/synthetic/opset.js";
import { PromptTokenizer } from "../../src/model/tokenizer.js";
import { Rng } from "../../src/util/random.js";
import { referenceDecoder, referenceGreedy, referenceLogits } from "../helpers/llama-reference.js";
import { tempDir } from "../helpers/tmp.js";

const BIN = join(import.meta.dirname, "..", "..", "bin", "hsm.js");
const dir = tempDir("hsm-generate-");
const bank = join(dir, "bank.jsonl");
const bigBank = join(dir, "big-bank.jsonl");
const longBank = join(dir, "long-bank.jsonl");

// Ids of llama3.1-1k, Llama 3.1's tokenizer cut to 1,024 ranks, its special tokens renumbered from 1024.
const TOKENIZER = "llama3.1-1k";
const COLON = 25; // every prompt ends with "Answer:"
const END_OF_TEXT = 1025;
const EOT = 1033;
const RESERVED = [1034, 1035, 1036]; // <|reserved_special_token_5|> …
const BYTE_C3 = 127;
const BYTE_A9 = 102;
const PARIS = [393, 277, 285]; // " P", "ar", "is"
const SPACE_DOT = 662;

const QUERIES = [
  "What is the capital of France?",
  "Who wrote Hamlet?",
  "¿Dónde está Lima?",
  "Ok?",
  `${"Long preamble words here. ".repeat(45)}So, what is two plus two?`,
  "Name a prime number.",
];

function lines(n: number): string {
  return (
    Array.from({ length: n }, (_, i) =>
      JSON.stringify({
        query_id: `q${i}`,
        fact_id: `f${i >> 1}`,
        condition_family: i % 2 ? "typo" : "anchor",
        query: `${QUERIES[i % QUERIES.length]}${i >= QUERIES.length ? ` #${i}` : ""}`,
        use_for_main_forward: true,
        answers: ["Paris", "4"],
      }),
    ).join("\n") + "\n"
  );
}

const readRows = (path: string) =>
  readFileSync(path, "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
const byId = (path: string) => new Map(readRows(path).map((r) => [r.query_id as string, r]));
const bankRows = (path: string) =>
  readFileSync(path, "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));

/** A 23-token chain after the prompt, then <|eot_id|>: a split "é" around a special token, special tokens, plain words. */
const WORDS = [578, 328, 68, 483, 374, 264, 436, 344, 261, 11, 902, 282, 75, 363, 82]; // " The Seine is a river, which flows"
const CHAIN = [BYTE_C3, RESERVED[0]!, BYTE_A9, ...PARIS, RESERVED[1]!, SPACE_DOT, ...WORDS];
const CHAIN_TEXT = "é Paris . The Seine is a river, which flows";
const MODELS = {
  withPast: { layers: 3, hidden: 32, heads: 4, kvHeads: 2, withPast: true, seed: 21, tokenizer: TOKENIZER },
  noPast: { layers: 2, hidden: 32, heads: 2, kvHeads: 1, seed: 22, tokenizer: TOKENIZER },
  // Every answer is an EOS at once (an int eos_token_id).
  eosFirst: {
    layers: 2,
    hidden: 32,
    heads: 4,
    kvHeads: 2,
    withPast: true,
    seed: 23,
    tokenizer: TOKENIZER,
    forcedNext: [[COLON, END_OF_TEXT]],
  },
  // Every answer is CHAIN and then the second id of an eos_token_id list, as the 24th token.
  eos24: {
    layers: 2,
    hidden: 32,
    heads: 4,
    kvHeads: 2,
    seed: 24,
    tokenizer: TOKENIZER,
    eosTokenId: [END_OF_TEXT, EOT],
    forcedNext: [COLON, ...CHAIN].map((from, k, all) => [from, all[k + 1] ?? EOT] as const),
  },
} satisfies Record<string, TinyModelOptions>;
type ModelName = keyof typeof MODELS | "mixed" | "opset12" | "noMask" | "int32" | "fixedBatch";
const modelDir = (name: ModelName) => join(dir, name);
const options: Partial<Record<ModelName, TinyModelOptions>> = { ...MODELS };

/** A model's weights, tokenizer and reference decoder, made once per model rather than once per row. */
const referenceParts = new Map<
  ModelName,
  Promise<{ weights: ReturnType<typeof tinyWeights>; tok: PromptTokenizer; text: (ids: number[]) => string }>
>();
function partsOf(name: ModelName) {
  let parts = referenceParts.get(name);
  if (!parts) {
    const text = referenceDecoder(readFileSync(join(modelDir(name), "tokenizer.json"), "utf8"));
    parts = PromptTokenizer.load(modelDir(name)).then((tok) => ({ weights: tinyWeights(options[name]!), tok, text }));
    referenceParts.set(name, parts);
  }
  return parts;
}

/** Greedy reference for a bank row: the fields hsm must write. */
async function reference(name: ModelName, row: Record<string, unknown>) {
  const o = options[name]!;
  const config = tinyConfig(o);
  const { weights, tok, text } = await partsOf(name);
  const eos = new Set([config.eos_token_id ?? []].flat());
  const ids = referenceGreedy(config, weights, tok.encode(buildPrompt(row as never)), eos, MAX_NEW_TOKENS);
  const stopped = eos.has(ids.at(-1)!);
  return {
    raw_response: text(stopped ? ids.slice(0, -1) : ids),
    generated_tokens: ids.length,
    finish_reason: stopped ? "stop" : "length",
  };
}

beforeAll(async () => {
  writeFileSync(bank, lines(12));
  writeFileSync(bigBank, lines(150));
  // Eight prompts as long as the prompt limit allows: a batch of them is more than one prompt step runs at once.
  writeFileSync(
    longBank,
    bankRows(bank)
      .filter((r) => String(r.query).startsWith("Long preamble"))
      .flatMap((r, k) =>
        Array.from({ length: 4 }, (_, j) => ({ ...r, query_id: `long${4 * k + j}`, query: `${j} ${r.query}` })),
      )
      .map((r) => JSON.stringify(r))
      .join("\n") + "\n",
  );
  for (const [name, o] of Object.entries(MODELS)) await writeTinyModel(modelDir(name as ModelName), o);
  // "mixed": the plain KV-cache model, except that row 0's first answer token is followed by <|eot_id|>
  // and row 1's by a special token, so rows of one batch stop at different steps.
  const rows = bankRows(bank);
  const tok = await PromptTokenizer.load(modelDir("withPast"));
  const base = MODELS.withPast;
  const first = (i: number) => {
    const logits = referenceLogits(tinyConfig(base), tinyWeights(base), tok.encode(buildPrompt(rows[i])));
    let best = 0;
    for (let v = 1; v < logits.length; v++) if (logits[v]! > logits[best]!) best = v;
    return best;
  };
  options.mixed = {
    ...base,
    eosTokenId: [END_OF_TEXT, EOT],
    forcedNext: [
      [first(0), EOT],
      [first(1), RESERVED[2]!],
    ],
  };
  await writeTinyModel(modelDir("mixed"), options.mixed);
  // The plain model without a cache as torch.onnx.export writes it at opset 12.
  options.opset12 = { ...MODELS.noPast, seed: 25 };
  await writeTinyModel(modelDir("opset12"), options.opset12);
  await writeAtOpset(modelDir("opset12"), 12);
  // The plain model without a cache exported without attention_mask: it attends to every token.
  options.noMask = { ...MODELS.noPast, seed: 26 };
  await writeTinyModel(modelDir("noMask"), options.noMask);
  await changeModelFile(modelDir("noMask"), dropAttentionMask);
  // The same exported with int32 ids, mask and positions, and with the batch fixed at 2.
  options.int32 = { ...MODELS.noPast, seed: 27 };
  await writeTinyModel(modelDir("int32"), options.int32);
  await changeModelFile(modelDir("int32"), int32Inputs);
  options.fixedBatch = { ...MODELS.noPast, seed: 28 };
  await writeTinyModel(modelDir("fixedBatch"), options.fixedBatch);
  await changeModelFile(modelDir("fixedBatch"), (model) => fixDimension(model, 0, 2));
});

/** Generates `bank` with `model` at batch sizes 1 and 8; checks they agree and returns the batch-1 rows by query_id. */
async function bothBatchSizes(name: ModelName) {
  const b1 = join(dir, `${name}-b1.jsonl`);
  const b8 = join(dir, `${name}-b8.jsonl`);
  expect(await generate({ modelDir: modelDir(name), bank, out: b1, batchSize: 1 })).toMatchObject({
    written: 12,
    skipped: 0,
    failed: 0,
  });
  expect(await generate({ modelDir: modelDir(name), bank, out: b8, batchSize: 8 })).toMatchObject({
    written: 12,
    skipped: 0,
    failed: 0,
  });
  const one = byId(b1);
  const eight = byId(b8);
  expect(one.size).toBe(12);
  for (const [id, row] of one) expect(eight.get(id)).toEqual(row);
  return one;
}

async function expectReference(
  name: ModelName,
  got: Map<string, Record<string, unknown>>,
  rows = bankRows(bank).slice(0, 6),
) {
  for (const r of rows) {
    const row = got.get(r.query_id)!;
    expect({
      raw_response: row.raw_response,
      generated_tokens: row.generated_tokens,
      finish_reason: row.finish_reason,
    }).toEqual(await reference(name, r));
    expect(row.prompt).toBe(buildPrompt(r));
  }
}

describe("hsm generate against a float64 greedy reference", () => {
  for (const [name, what] of [
    ["withPast", "with the KV cache"],
    ["noPast", "by full recomputation (no cache inputs)"],
  ] as const) {
    it(`${what}, at batch sizes 1 and 8`, async () => {
      const got = await bothBatchSizes(name);
      await expectReference(name, got);
      expect([...got.values()].some((r) => r.finish_reason === "length" && r.generated_tokens === 24)).toBe(true);
    });
  }

  it("runs a long batch's prompt step in chunks of rows, with the reference's rows", async () => {
    const tok = await PromptTokenizer.load(modelDir("withPast"));
    const rows = bankRows(longBank);
    const tokens = rows.map((r) => tok.encode(buildPrompt(r)).length);
    // 8 rows of this many tokens are more than one step's PROMPT_STEP_TOKENS: the step runs in two chunks of 4.
    expect(8 * Math.max(...tokens)).toBeGreaterThan(PROMPT_STEP_TOKENS);
    expect(4 * Math.max(...tokens)).toBeLessThanOrEqual(PROMPT_STEP_TOKENS);
    for (const name of ["withPast", "noPast"] as const) {
      const out = join(dir, `${name}-long.jsonl`);
      expect(await generate({ modelDir: modelDir(name), bank: longBank, out, batchSize: 8 })).toMatchObject({
        written: 8,
      });
      await expectReference(name, byId(out), rows);
    }
  });

  it("writes an EOS as the first token as a valid row: empty text, one token, stop", async () => {
    const got = await bothBatchSizes("eosFirst");
    for (const row of got.values())
      expect(row).toMatchObject({ raw_response: "", generated_tokens: 1, finish_reason: "stop" });
    await expectReference("eosFirst", got);
  });

  it("stops on the 24th token when it is an EOS of a list, skips special tokens and decodes bytes once", async () => {
    const got = await bothBatchSizes("eos24");
    for (const row of got.values())
      expect(row).toMatchObject({ raw_response: CHAIN_TEXT, generated_tokens: 24, finish_reason: "stop" });
    await expectReference("eos24", got, bankRows(bank).slice(0, 3));
  });

  it("lets rows of one batch stop at different steps, with special tokens inside answers", async () => {
    const got = await bothBatchSizes("mixed");
    expect(got.get("q0")).toMatchObject({ generated_tokens: 2, finish_reason: "stop" });
    expect(String(got.get("q1")!.raw_response)).not.toContain("<|");
    expect([...got.values()].filter((r) => r.finish_reason === "length").length).toBeGreaterThan(0);
    await expectReference("mixed", got);
  });
});

describe("hsm generate on worker threads", () => {
  const cli = (name: ModelName, out: string, ...extra: string[]) =>
    spawnSync(
      process.execPath,
      [
        BIN,
        "generate",
        "--model-dir",
        modelDir(name),
        "--bank",
        bank,
        "--out",
        out,
        "--batch-size",
        "2",
        "--self-check",
        "0",
        ...extra,
      ],
      { encoding: "utf8" },
    );

  it("gives the reference's rows with two batches decoding at once, the order of the file unchanged", async () => {
    for (const name of ["withPast", "noPast", "mixed"] as const) {
      const two = join(dir, `${name}-workers-2.jsonl`);
      const one = join(dir, `${name}-workers-1.jsonl`);
      const r = cli(name, two, "--workers", "2", "--threads", "1");
      expect(r.status, r.stderr).toBe(0);
      expect(r.stderr).toContain(
        "decoding 2 batches at once, each by an onnxruntime session of its own (1 thread each)",
      );
      expect(cli(name, one, "--workers", "1").status).toBe(0);
      expect(readFileSync(two, "utf8")).toBe(readFileSync(one, "utf8"));
    }
    // The LM head in onnxruntime's graph (no native core) picks the same tokens as the native one. A run that
    // answers a finished file loads no model, so the native head's line comes from a fresh file.
    const head = cli("mixed", join(dir, "mixed-native-head.jsonl"), "--workers", "2");
    expect(head.stderr).toMatch(/the LM head \(\d+ × 1280\) runs in the native core/);
    expect(readFileSync(join(dir, "mixed-native-head.jsonl"), "utf8")).toBe(
      readFileSync(join(dir, "mixed-workers-2.jsonl"), "utf8"),
    );
    const graph = join(dir, "mixed-graph-head.jsonl");
    const r = spawnSync(
      process.execPath,
      [
        BIN,
        "generate",
        "--model-dir",
        modelDir("mixed"),
        "--bank",
        bank,
        "--out",
        graph,
        "--batch-size",
        "2",
        "--self-check",
        "0",
        "--workers",
        "2",
      ],
      { encoding: "utf8", env: { ...process.env, HSM_NATIVE: "0" } },
    );
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).not.toContain("LM head");
    expect(readFileSync(graph, "utf8")).toBe(readFileSync(join(dir, "mixed-workers-2.jsonl"), "utf8"));
    await expectReference("mixed", byId(join(dir, "mixed-workers-2.jsonl")));
  });
});

describe("hsm generate when a query cannot run", () => {
  // Rotary tables of 128 positions: the long prompt (192 tokens) fails inside onnxruntime, the others fit.
  const short: TinyModelOptions = { ...MODELS.withPast, maxPositions: 128 };

  it("writes every other answer, records the error on that query's row, and tries it again on the next run", async () => {
    const m = join(dir, "short-context");
    await writeTinyModel(m, short);
    const out = join(dir, "short-context.jsonl");
    const first = await generate({ modelDir: m, bank, out, batchSize: 8 });
    expect(first).toMatchObject({ written: 10, failed: 2, skipped: 0 });
    const rows = byId(out);
    expect(rows.size).toBe(12);
    for (const id of ["q4", "q10"]) {
      // Cut to max_prompt_len, 192 tokens, and the first 23 of 24 new ones fed back: 215 positions of 128.
      const reason = `the prompt's 192 tokens and up to 24 new ones need 215 positions, beyond the model's 128 (max_position_embeddings in ${m}/config.json): `;
      expect(rows.get(id)!.error.slice(0, reason.length)).toBe(reason);
      expect(rows.get(id)!.error.length).toBeGreaterThan(reason.length);
      expect(rows.get(id)).not.toHaveProperty("raw_response");
    }
    // The other answers are those of the same weights with room for every position.
    const roomy = join(dir, "roomy.jsonl");
    await generate({ modelDir: modelDir("withPast"), bank, out: roomy, batchSize: 8, model: "short-context" });
    const plain = byId(roomy);
    // Another model file: every field but its sha256.
    const roomyRow = (id: string) => ({ ...plain.get(id), model_sha256: rows.get(id)!.model_sha256 });
    for (const [id, row] of rows) if (!["q4", "q10"].includes(id)) expect(row).toEqual(roomyRow(id));
    // Two batches decoding at once on worker threads: the same rows, the same errors.
    const threaded = join(dir, "short-context-workers.jsonl");
    expect(
      spawnSync(process.execPath, [
        BIN,
        "generate",
        "--model-dir",
        m,
        "--bank",
        bank,
        "--out",
        threaded,
        "--batch-size",
        "4",
        "--workers",
        "2",
        "--quiet",
      ]).status,
    ).toBe(0);
    expect(byId(threaded)).toEqual(rows);
    const again = await generate({ modelDir: m, bank, out, batchSize: 8 });
    expect(again).toMatchObject({ written: 0, failed: 2, skipped: 10 });
    const lines = readRows(out);
    expect(lines).toHaveLength(12);
    expect(new Set(lines.map((r) => r.query_id)).size).toBe(12);
  });

  it("stops without writing error rows when no query can run", async () => {
    const m = join(dir, "short-context-2");
    await writeTinyModel(m, short);
    const longOnly = join(dir, "long-only.jsonl");
    writeFileSync(
      longOnly,
      bankRows(bank)
        .filter((r) => r.query.startsWith("Long"))
        .map((r) => JSON.stringify(r))
        .join("\n") + "\n",
    );
    const out = join(dir, "long-only-gen.jsonl");
    const err = await generate({ modelDir: m, bank: longOnly, out, batchSize: 8 }).catch((e) => e);
    expect(err).toBeInstanceOf(GenerationError);
    expect(err.message).toMatch(
      /generation failed on 2 queries in a row \(q4, q10\), even one at a time, and none succeeded/,
    );
    expect(err.message).toContain(
      `none succeeded: the prompt's 192 tokens and up to 24 new ones need 215 positions, beyond the model's 128 (max_position_embeddings in ${m}/config.json): `,
    );
    expect(err.message.startsWith(`${join(m, "model.onnx")}: `)).toBe(true);
    // The run wrote no line, so it leaves no file.
    expect(existsSync(out)).toBe(false);
  });
});

describe("hsm generate, killed and resumed", () => {
  const args = (out: string) => [
    BIN,
    "generate",
    "--model-dir",
    modelDir("withPast"),
    "--bank",
    bigBank,
    "--out",
    out,
    "--batch-size",
    "4",
    "--quiet",
  ];
  let whole: Promise<string> | undefined;
  /** One uninterrupted run of the big bank, made on first use. */
  const wholeRun = () =>
    (whole ??= (async () => {
      const out = join(dir, "whole.jsonl");
      expect(spawnSync(process.execPath, args(out)).status).toBe(0);
      return out;
    })());

  it("resumes after kill -9 at a seeded point into the same file as an uninterrupted run", async () => {
    const reference = readFileSync(await wholeRun());
    const out = join(dir, "killed.jsonl");
    const target = 8 + (new Rng(12, 1).u32() % 100); // rows written before the kill, somewhere in 8…107 of 150
    const child = spawn(process.execPath, args(out), { stdio: "ignore" });
    let seen = 0;
    const exit = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
      const poll = setInterval(() => {
        seen = existsSync(out) ? readFileSync(out, "utf8").split("\n").length - 1 : 0;
        if (seen >= target) child.kill("SIGKILL");
      }, 2);
      child.on("exit", (code, signal) => {
        clearInterval(poll);
        resolve({ code, signal });
      });
    });
    expect(exit.signal).toBe("SIGKILL");
    const partial = readFileSync(out, "utf8").split("\n").length - 1;
    expect(partial).toBeGreaterThanOrEqual(target);
    expect(partial).toBeLessThan(150);
    // A line torn by the kill (the start of the next row as hsm writes it) is repaired on resume.
    const next = reference.toString("utf8").split("\n")[partial]!;
    appendFileSync(out, next.slice(0, next.length >> 1));
    const resumed = spawnSync(process.execPath, args(out), { encoding: "utf8" });
    expect(resumed.status).toBe(0);
    expect(resumed.stdout).toContain(`${150 - partial} generated, ${partial} already there`);
    expect(readFileSync(out).equals(reference)).toBe(true);
    const again = spawnSync(process.execPath, args(out), { encoding: "utf8" });
    expect(again.stdout).toMatch(/0 generated, 150 already there/);
  });

  it("takes a last row without its newline for a torn one, and never glues lines together", async () => {
    const full = join(dir, "newline-full.jsonl");
    await generate({ modelDir: modelDir("withPast"), bank, out: full, batchSize: 4 });
    const out = join(dir, "newline.jsonl");
    const text = readFileSync(full, "utf8");
    writeFileSync(out, text.slice(0, text.indexOf("\n"))); // one whole row, newline missing
    expect(await generate({ modelDir: modelDir("withPast"), bank, out, batchSize: 4 })).toMatchObject({
      written: 12,
      skipped: 0,
    });
    expect(readFileSync(out, "utf8")).toBe(text);
  });

  it("refuses to append to a file that holds something else, naming the line", async () => {
    const out = join(dir, "foreign.jsonl");
    const own = readFileSync(await wholeRun(), "utf8").split("\n")[0];
    writeFileSync(out, `${own}\nnot json\n{"query_id":"q2","raw_response":""}\n`);
    const r = spawnSync(process.execPath, args(out), { encoding: "utf8" });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/foreign\.jsonl:2: is not a generations row/);
  });

  it("scores every generation, and stops on unknown or missing queries", async () => {
    const gen = await wholeRun();
    const scored = join(dir, "scored.jsonl");
    const r = spawnSync(process.execPath, [BIN, "score", "--bank", bigBank, "--generations", gen, "--out", scored], {
      encoding: "utf8",
    });
    expect(r.status).toBe(0);
    const rows = readRows(scored);
    expect(rows).toHaveLength(150);
    expect(Object.keys(rows[0])).toEqual([
      "query_id",
      "model",
      "fact_id",
      "relation",
      "condition_family",
      "language",
      "target_slot",
      "answer_type",
      "answer_granularity",
      "answer_in_subject_surface",
      "use_for_main_forward",
      "use_for_reverse_analysis",
      "use_for_recognition_analysis",
      "raw_response",
      "span",
      "flags",
      "label",
      "matched_alias",
      "scorer",
      "needs_manual_review",
    ]);
    const partial = join(dir, "partial-gen.jsonl");
    writeFileSync(
      partial,
      readFileSync(gen, "utf8").split("\n").slice(0, 10).join("\n") +
        "\n" +
        JSON.stringify({ query_id: "nope", raw_response: "x" }) +
        "\n",
    );
    const bad = spawnSync(
      process.execPath,
      [BIN, "score", "--bank", bigBank, "--generations", partial, "--out", join(dir, "s2.jsonl")],
      { encoding: "utf8" },
    );
    expect(bad.status).toBe(1);
    expect(bad.stderr).toMatch(/partial-gen\.jsonl:11: field "query_id": "nope" is not in the bank/);
    expect(existsSync(join(dir, "s2.jsonl"))).toBe(false);
    const allowed = spawnSync(
      process.execPath,
      [BIN, "score", "--bank", bigBank, "--generations", partial, "--out", join(dir, "s3.jsonl"), "--allow-missing"],
      { encoding: "utf8" },
    );
    expect(allowed.status).toBe(0);
    expect(allowed.stderr).toMatch(/140 bank queries without a generation, 1 generations for unknown queries/);
  });
});

describe("hsm generate refuses to resume a file it did not write for this run", () => {
  const args = (out: string, ...more: string[]) => [
    BIN,
    "generate",
    "--model-dir",
    modelDir("withPast"),
    "--bank",
    bank,
    "--out",
    out,
    "--batch-size",
    "8",
    "--self-check",
    "0",
    "--quiet",
    ...more,
  ];
  let answered: Promise<string> | undefined;
  /** The whole bank answered by the KV-cache model under its folder's name. */
  const answers = () =>
    (answered ??= (async () => {
      const out = join(dir, "own.jsonl");
      await generate({ modelDir: modelDir("withPast"), bank, out, batchSize: 8, selfCheck: 0 });
      return readFileSync(out, "utf8");
    })());
  /** Runs hsm generate into a file holding `text`; expects it refused, the file unchanged, and returns stderr. */
  const refused = (name: string, text: string, ...more: string[]) => {
    const out = join(dir, name);
    writeFileSync(out, text);
    const r = spawnSync(process.execPath, args(out, ...more), { encoding: "utf8" });
    expect(r.status).toBe(1);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/use a new --out, or delete the file/);
    expect(readFileSync(out, "utf8")).toBe(text);
    return r.stderr;
  };

  it("resumes its own file with nothing to do", async () => {
    const out = join(dir, "own-again.jsonl");
    writeFileSync(out, await answers());
    const r = spawnSync(process.execPath, args(out), { encoding: "utf8" });
    expect(r.status).toBe(0);
    expect(r.stdout).toContain("0 generated, 12 already there");
  });

  it("a file another model wrote under the same --model name", async () => {
    const other = join(dir, "other-model.jsonl");
    await generate({ modelDir: modelDir("noPast"), bank, out: other, batchSize: 8, selfCheck: 0, model: "withPast" });
    const text = readFileSync(other, "utf8").split("\n").slice(0, 5).join("\n") + "\n";
    expect(refused("mixed-model.jsonl", text)).toMatch(/mixed-model\.jsonl:1: field "model_sha256": "[0-9a-f]{64}"/);
  });

  it("a file written under another --model name", async () => {
    const err = refused("renamed.jsonl", await answers(), "--model", "renamed");
    expect(err).toMatch(/renamed\.jsonl:1: field "model": "withPast" but this run writes "renamed"/);
  });

  it("a file of bank rows", () => {
    expect(refused("bank-as-out.jsonl", readFileSync(bank, "utf8"))).toMatch(
      /bank-as-out\.jsonl:1: field "model" is missing: not an answer of hsm generate/,
    );
  });

  it.each([
    ["a one-line JSON document", JSON.stringify({ important: Array.from({ length: 2000 }, (_, i) => i) })],
    ["one bank row", (b: string) => b.slice(0, b.indexOf("\n"))],
    [
      "another model's torn row",
      (_b: string, own: string) => own.slice(0, 200).replace('"model":"withPast"', '"model":"x"'),
    ],
  ] as const)("a file without a newline that is not a torn row of this run: %s", async (what, make) => {
    const text = typeof make === "string" ? make : make(readFileSync(bank, "utf8"), await answers());
    const name = `no-newline-${what.replace(/\W+/g, "-")}.jsonl`;
    expect(refused(name, text)).toMatch(
      new RegExp(`${name}:1: is not a generations row of this run, nor a line of one cut off by a crash`),
    );
  });

  it("a binary file without a newline, left byte for byte", () => {
    const out = join(dir, "binary.bin");
    const bytes = Buffer.from(
      Array.from({ length: 4096 }, (_, i) => ((i * 131) % 255) + ((i * 131) % 255 >= 10 ? 1 : 0)),
    );
    expect(bytes.includes(10)).toBe(false);
    writeFileSync(out, bytes);
    const r = spawnSync(process.execPath, args(out), { encoding: "utf8" });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/binary\.bin:1: is not a generations row of this run/);
    expect(readFileSync(out).equals(bytes)).toBe(true);
  });

  it("its own --bank, as a usage error naming both", () => {
    const copy = join(dir, "bank-as-out-copy.jsonl");
    writeFileSync(copy, readFileSync(bank));
    const r = spawnSync(
      process.execPath,
      args(copy).map((a) => (a === bank ? copy : a)),
      { encoding: "utf8" },
    );
    expect(r.status).toBe(EXIT.usage);
    expect(r.stderr).toBe(
      `hsm: --out ${copy}: is also --bank (${copy}), which this command reads; choose another file for --out\n`,
    );
    expect(readFileSync(copy).equals(readFileSync(bank))).toBe(true);
  });

  it("a file with a query_id twice", async () => {
    const text = await answers();
    expect(refused("twice.jsonl", text + text.slice(0, text.indexOf("\n") + 1))).toMatch(
      /twice\.jsonl:13: field "query_id": "q\d+" is there twice \(lines \d+ and 13\)/,
    );
  });

  it("a query_id the bank does not have", async () => {
    const text = (await answers()).replace(/"query_id":"q3"/, '"query_id":"q99"');
    expect(refused("unknown-id.jsonl", text)).toMatch(
      /unknown-id\.jsonl:\d+: field "query_id": "q99" is not in the bank/,
    );
  });

  it("answers to a query whose text has changed since", async () => {
    const text = (await answers()).replace(/Who wrote Hamlet\?/, "Who wrote Macbeth?");
    expect(refused("changed-query.jsonl", text)).toMatch(/changed-query\.jsonl:\d+: field "prompt": ".*Macbeth/);
  });

  it("answers generated with another --max-new-tokens", async () => {
    expect(refused("fewer-tokens.jsonl", await answers(), "--max-new-tokens", "4")).toMatch(
      /fewer-tokens\.jsonl:\d+: field "generated_tokens": \d+ .*--max-new-tokens 4/,
    );
  });
});

describe.skipIf(process.getuid?.() !== 0)("hsm generate on a disk that fills (needs root to mount a tmpfs)", () => {
  it("names the file, exit 1, leaves only whole lines, and a rerun with room ends as an uninterrupted run", async () => {
    const reference = join(dir, "full-disk-reference.jsonl");
    await generate({ modelDir: modelDir("withPast"), bank, out: reference, batchSize: 4, selfCheck: 0 });
    const mnt = mkdtempSync(join(tmpdir(), "hsm-generate-full-"));
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt]);
    try {
      // Room for the lock file's page and the first batch's lines, not for every batch.
      const firstBatch = Buffer.byteLength(readFileSync(reference, "utf8").split("\n").slice(0, 4).join("\n") + "\n");
      const page = 4096;
      const filler = join(mnt, "filler");
      const block = Buffer.alloc(page, 1);
      for (;;) {
        try {
          appendFileSync(filler, block);
        } catch {
          break;
        }
      }
      truncateSync(filler, statSync(filler).size - page * (1 + Math.ceil(firstBatch / page)));
      const out = join(mnt, "gens.jsonl");
      const args = [BIN, "generate", "--model-dir", modelDir("withPast"), "--bank", bank, "--out", out];
      const r = spawnSync(process.execPath, [...args, "--batch-size", "4", "--self-check", "0", "--quiet"], {
        encoding: "utf8",
      });
      expect(r.stderr).toBe(`hsm: ${out}: cannot be written: no space left on device (ENOSPC)\n`);
      expect(r.status).toBe(EXIT.data);
      const kept = readFileSync(out, "utf8");
      expect(kept.length).toBeGreaterThan(0);
      expect(kept.endsWith("\n")).toBe(true);
      expect(readFileSync(reference, "utf8").startsWith(kept)).toBe(true);
      rmSync(filler);
      const again = spawnSync(process.execPath, [...args, "--batch-size", "4", "--self-check", "0", "--quiet"], {
        encoding: "utf8",
      });
      expect(again.status).toBe(0);
      expect(readFileSync(out).equals(readFileSync(reference))).toBe(true);
    } finally {
      execFileSync("umount", ["--lazy", mnt]);
      rmSync(mnt, { recursive: true, force: true });
    }
  });
});

describe("hsm generate refuses a model name no output can record", () => {
  it.each([
    ["an empty name", "", 'Expected a model name with a visible character but received ""'],
    ["a name of white space", " ", 'Expected a model name with a visible character but received " "'],
    [
      "a name with a control character",
      "a\u0007b",
      'Expected a model name without control characters but received "a\\u0007b"',
    ],
  ])("%s, before reading the model, as the exports would", async (_what, model, message) => {
    const out = join(dir, "refused-name", "gens.jsonl");
    await expect(generate({ modelDir: modelDir("withPast"), bank, out, model })).rejects.toThrow(
      new UsageError(message),
    );
    const r = spawnSync(
      process.execPath,
      [BIN, "generate", "--model-dir", modelDir("withPast"), "--bank", bank, "--out", out, "--model", model],
      { encoding: "utf8" },
    );
    expect(r.status).toBe(EXIT.usage);
    expect(r.stderr).toBe(`hsm: ${message}\n`);
    expect(existsSync(join(dir, "refused-name"))).toBe(false);
  });
});

describe("hsm generate and a query that makes its row too long to read back", () => {
  // Each row holds its prompt: a bank line under 1 MiB can make a row over it, which hsm score would refuse.
  const MIB = 1024 * 1024;
  const longBankOf = (query: string) => {
    const b = join(dir, "long-row-bank.jsonl");
    const rows = [
      { query_id: "q0", fact_id: "f0", condition_family: "anchor", query: "Ok?", use_for_main_forward: true },
      { query_id: "q1", fact_id: "f1", condition_family: "anchor", query, use_for_main_forward: true },
    ];
    writeFileSync(b, rows.map((r) => JSON.stringify(r)).join("\n") + "\n");
    expect(
      Math.max(
        ...readFileSync(b, "utf8")
          .split("\n")
          .map((l) => Buffer.byteLength(l)),
      ),
    ).toBeLessThan(MIB);
    return b;
  };
  const run = (b: string, out: string) =>
    spawnSync(
      process.execPath,
      [BIN, "generate", "--model-dir", modelDir("withPast"), "--bank", b, "--out", out, "--batch-size", "1", "-q"],
      { encoding: "utf8" },
    );
  const refusal = (b: string) =>
    new RegExp(
      `^hsm: ${b.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}:2: field "query": makes the generation row of "q1" (\\d+) bytes ` +
        `\\(it holds the prompt\\), over the 1048576 bytes \\(1 MiB\\) a JSONL line may hold; shorten the query\n$`,
    );

  it("refuses it by its bank line before running, or as its answer would push it over, writing no such line", () => {
    const query = "ab ".repeat(Math.floor((MIB - 200) / 3));
    const first = join(dir, "long-row-1.jsonl");
    const r1 = run(longBankOf(query), first);
    expect(r1.status).toBe(1);
    const m1 = r1.stderr.match(refusal(join(dir, "long-row-bank.jsonl")));
    expect(m1, r1.stderr).not.toBeNull();
    expect(Number(m1![1])).toBeGreaterThan(MIB);
    expect(existsSync(first)).toBe(false);
    // One byte short of the limit without an answer: the answer's text (24 tokens) pushes it over as it is written.
    const fits = query.slice(0, query.length - (Number(m1![1]) - MIB) - 1);
    const second = join(dir, "long-row-2.jsonl");
    const r2 = run(longBankOf(fits), second);
    expect(r2.status).toBe(1);
    const m2 = r2.stderr.match(refusal(join(dir, "long-row-bank.jsonl")));
    expect(m2, r2.stderr).not.toBeNull();
    expect(Number(m2![1])).toBeGreaterThan(MIB);
    // q0's row, in the batch before, is kept; q1's is not written.
    expect(readRows(second).map((row) => row.query_id)).toEqual(["q0"]);
  });
});

describe("hsm generate on a graph of opset 12", () => {
  it("writes the float64 reference's rows at batch sizes 1 and 8", async () => {
    await expectReference("opset12", await bothBatchSizes("opset12"));
  });

  it("picks the next token inside the graph, in the opset's forms, where the LM head stays in it", async () => {
    const model = await loadModel(join(modelDir("opset12"), "model.onnx"));
    rewriteForGeneration(model);
    const session = await ort.InferenceSession.create(encodeModel(model));
    const { tok } = await partsOf("opset12");
    for (const row of bankRows(bank).slice(0, 4)) {
      const ids = tok.encode(buildPrompt(row));
      const ints = (v: number[]) => new ort.Tensor("int64", BigInt64Array.from(v, BigInt), [1, ids.length]);
      const out = await session.run({
        input_ids: ints(ids),
        attention_mask: ints(ids.map(() => 1)),
        position_ids: ints(ids.map((_, i) => i)),
      });
      const logits = referenceLogits(tinyConfig(options.opset12!), tinyWeights(options.opset12!), ids);
      const best = logits.reduce((b, v, i) => (v > logits[b]! ? i : b), 0);
      expect(Number((out[NEXT_TOKEN]!.data as BigInt64Array)[0])).toBe(best);
    }
    await session.release();
  });
});

describe("hsm generate on a graph without attention_mask", () => {
  it("batches prompts of one length only, writing the float64 reference's rows at batch sizes 1 and 8", async () => {
    await expectReference("noMask", await bothBatchSizes("noMask"), bankRows(bank));
  });
});

describe("hsm generate on a graph's declared inputs", () => {
  it("feeds int32 where the graph declares int32, writing the float64 reference's rows", async () => {
    await expectReference("int32", await bothBatchSizes("int32"));
  });

  it("decodes batches of at most the batch the inputs fix, filling out a smaller one", async () => {
    await expectReference("fixedBatch", await bothBatchSizes("fixedBatch"));
  });
});
