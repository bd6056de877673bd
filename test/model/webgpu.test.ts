/**
 * onnxruntime's WebGPU provider on whatever adapter the machine has (SwiftShader's, CPU-emulated and without
 * `shader-f16`, where there is no GPU; see helpers/software-gpu.ts). Extraction in every export style at batch
 * 16 and 1 stores the CPU's states within the batch self-check's tolerance, and the float64 reference's where
 * the family has one (a genai build's GroupQueryAttention runs written out in standard operators); generation writes
 * the CPU's file byte for byte, with the with-past and the genai build, and the process ends by itself, its lock
 * released; a float16 graph on an adapter without float16 shaders runs widened to float32, saying so in one line,
 * and a widened genai build with a float16 cache and logits generates the float64 reference's text on its float16
 * weights; a GroupQueryAttention that cannot be written out, and a float16 graph too large to widen, stop in one
 * line. SwiftShader compiles a
 * shader for every new tensor shape, slowly: the models are tiny, the prompts few, and the extractions share one
 * process (and its compiled shaders).
 */
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { buildPrompt } from "../../src/bank/prompt.js";
import { extract } from "../../src/extract/extract.js";
import { generate } from "../../src/generate/generate.js";
import { decodeModel, encodeModel, floatTensor } from "../../src/onnx/graph.js";
import { rowDeviation, selfCheckTolerance } from "../../src/model/self-check.js";
import { PromptTokenizer } from "../../src/model/tokenizer.js";
import { writeModelInStyle } from "../../src/synthetic/export-styles.js";
import type { OwnFamilyOptions } from "../../src/synthetic/families.js";
import { genaiFiles } from "../../src/synthetic/genai.js";
import { tinyConfig, tinyWeights, writeTinyModel } from "../../src/synthetic/llama.js";
import { styleWeights } from "../../src/synthetic/quantize.js";
import { referenceDecoder, referenceGreedy } from "../helpers/llama-reference.js";
import { expectStoreMatchesReference } from "../helpers/reference-store.js";
import { runChild } from "../helpers/child.js";
import { gpuEnv, gpuFeatures, gpuSkipReason } from "../helpers/software-gpu.js";
import { tempDir } from "../helpers/tmp.js";

const ROOT = join(import.meta.dirname, "..", "..");
const BIN = join(ROOT, "bin", "hsm.js");
const dir = tempDir("hsm-webgpu-");
const bank = join(dir, "bank.jsonl");
const QUERIES = ["What is the capital of France?", "Ok?", "Which element has the chemical symbol Fe?"];
const GEOMETRY = { layers: 2, hidden: 32, heads: 2, tokenizer: "llama3.1-1k" } as const;
const SHADER_F16 = gpuFeatures.includes("shader-f16");
/** A genai fp16 build with float16 inputs and outputs: its KV cache and logits. */
const FP16_IO = { ...GEOMETRY, seed: 90 };

/** The models extracted: every export style of the llama shape, and two families checked against the reference. */
const MODELS: Record<string, { style: string; o: OwnFamilyOptions }> = {
  plain: { style: "plain", o: { ...GEOMETRY, seed: 91 } },
  "with-past": { style: "with-past", o: { ...GEOMETRY, seed: 92 } },
  merged: { style: "merged", o: { ...GEOMETRY, seed: 93 } },
  q4: { style: "q4", o: { ...GEOMETRY, seed: 95 } },
  int8: { style: "int8", o: { ...GEOMETRY, seed: 96 } },
  genai: { style: "genai", o: { ...GEOMETRY, seed: 94 } },
  gpt2: { style: "with-past", o: { ...GEOMETRY, family: "gpt2", seed: 97, positionIds: true } },
  bloom: { style: "with-past", o: { ...GEOMETRY, family: "bloom", seed: 98, positionIds: true } },
};
/** Families with an independent float64 forward pass (helpers/reference-store.ts). */
const REFERENCED = new Set(["plain", "with-past", "merged", "gpt2", "bloom"]);
const BATCHES = [16, 1];

/** Runs `hsm` in a child process that sees the adapter; its status, output, and seconds taken. */
function hsm(args: string[], timeoutMs: number) {
  const t0 = performance.now();
  const r = spawnSync(process.execPath, [BIN, ...args], { env: gpuEnv(), encoding: "utf8", timeout: timeoutMs });
  return { ...r, seconds: (performance.now() - t0) / 1000 };
}

/** The float16 bits of every row of a store's layer file, one array per row. */
function storedRows(store: string, layer: number, d: number): Uint16Array[] {
  const bytes = readFileSync(join(store, `L${String(layer).padStart(3, "0")}.npy`));
  const header = 10 + bytes.readUInt16LE(8);
  const bits = new Uint16Array(bytes.buffer.slice(bytes.byteOffset + header, bytes.byteOffset + bytes.length));
  return Array.from({ length: bits.length / d }, (_, i) => bits.subarray(i * d, (i + 1) * d));
}

beforeAll(async () => {
  writeFileSync(
    bank,
    QUERIES.map((query, i) =>
      JSON.stringify({
        query_id: `q${i}`,
        fact_id: `f${i}`,
        condition_family: "anchor",
        query,
        use_for_main_forward: true,
        answers: ["x"],
      }),
    ).join("\n") + "\n",
  );
});

describe.skipIf(gpuSkipReason !== undefined)(
  `onnxruntime's WebGPU provider${gpuSkipReason ? ` (skipped: ${gpuSkipReason})` : ""}`,
  () => {
    beforeAll(async () => {
      for (const [name, m] of Object.entries(MODELS)) await writeModelInStyle(join(dir, name), m.style, m.o);
      await writeModelInStyle(join(dir, "fp16"), "fp16", { ...GEOMETRY, seed: 99 });
      await writeTinyModel(join(dir, "genai-fp16-io"), FP16_IO, genaiFiles("fp16-io"));
    });

    it("extracts every style at batch 16 and 1: the CPU's states within the self-check's tolerance", async () => {
      const jobs = Object.keys(MODELS).flatMap((name) =>
        BATCHES.map((batchSize) => ({
          modelDir: join(dir, name),
          bank,
          out: join(dir, `${name}-webgpu-b${batchSize}`),
          batchSize,
          device: "webgpu",
          layerRule: "l >= 0",
          // At batch 1 the self-check would rerun the rows as they ran.
          selfCheck: batchSize === 1 ? 0 : undefined,
        })),
      );
      // One process for every extraction: the shaders compiled for one model serve the next.
      const script =
        `const { extract } = await import(${JSON.stringify(join(ROOT, "dist", "index.js"))});` +
        `const seconds = {}; for (const job of JSON.parse(process.argv[1])) { const t0 = performance.now();` +
        ` const r = await extract(job); seconds[job.out] = [(performance.now() - t0) / 1000, r.manifest.self_check.status]; }` +
        `process.stdout.write(JSON.stringify(seconds));`;
      const r = await runChild(process.execPath, ["--input-type=module", "-e", script, JSON.stringify(jobs)], {
        env: gpuEnv(),
        timeout: 600_000,
      });
      expect(r.stderr).toBe("");
      expect(r.status).toBe(0);
      const done = JSON.parse(r.stdout) as Record<string, [number, string]>;
      for (const [name, m] of Object.entries(MODELS)) {
        const cpu = join(dir, `${name}-cpu`);
        const { manifest } = await extract({ modelDir: join(dir, name), bank, out: cpu, layerRule: "l >= 0" });
        const tolerance = selfCheckTolerance(manifest.dtype);
        for (const batchSize of BATCHES) {
          const store = join(dir, `${name}-webgpu-b${batchSize}`);
          expect(done[store]![1], store).toBe(batchSize === 1 ? "off" : "pass");
          const gpu = JSON.parse(readFileSync(join(store, "index.json"), "utf8"));
          expect([gpu.complete, gpu.extraction.device, gpu.dtype]).toEqual([true, "webgpu", manifest.dtype]);
          for (const layer of manifest.layers) {
            const want = storedRows(cpu, layer, manifest.d_model);
            const got = storedRows(store, layer, manifest.d_model);
            expect(got.length).toBe(QUERIES.length);
            got.forEach((row, i) =>
              expect(rowDeviation(want[i]!, row).rel, `${store} L${layer} row ${i}`).toBeLessThanOrEqual(tolerance),
            );
          }
          if (REFERENCED.has(name)) await expectStoreMatchesReference(store, m.o, join(dir, name), bank);
        }
      }
    }, 900_000);

    it.each(["with-past", "genai"])(
      "generates the CPU's file byte for byte and ends by itself, its lock released: %s",
      async (name) => {
        const md = join(dir, name);
        const cpu = join(dir, `gen-${name}-cpu.jsonl`);
        await generate({ modelDir: md, bank, out: cpu, maxNewTokens: 4, selfCheck: 1 });
        const out = join(dir, `gen-${name}`, "webgpu.jsonl");
        const args = ["--model-dir", md, "--bank", bank, "--out", out, "--device", "webgpu", "--max-new-tokens", "4"];
        const r = await runChild(
          process.execPath,
          [BIN, "generate", ...args, "--self-check", "1", "--workers", "2", "--quiet"],
          {
            env: gpuEnv(),
            timeout: 300_000,
          },
        );
        expect([r.status, r.signal]).toEqual([0, null]);
        expect(r.stderr).toBe("");
        expect(readFileSync(out, "utf8")).toBe(readFileSync(cpu, "utf8"));
        expect(readdirSync(join(dir, `gen-${name}`)).filter((f) => f.endsWith(".lock"))).toEqual([]);
      },
      400_000,
    );

    it("stops a GroupQueryAttention it cannot write out in one line", async () => {
      const md = join(dir, "genai-bias");
      cpSync(join(dir, "genai"), md, { recursive: true });
      const model = decodeModel(readFileSync(join(md, "model.onnx")));
      model.graph!.initializer!.push(floatTensor("bias", new Float32Array(1), [1, 1, 1, 1]));
      const gqa = model.graph!.node!.find((n) => n.opType === "GroupQueryAttention")!;
      gqa.input = [...gqa.input!, "", "bias"];
      writeFileSync(join(md, "model.onnx"), encodeModel(model));
      const out = join(dir, "genai-bias-store");
      const r = hsm(["extract", "--model-dir", md, "--bank", bank, "--out", out, "--device", "webgpu"], 300_000);
      expect([r.status, r.stderr.trim().split("\n")]).toEqual([
        1,
        [
          `hsm: ${join(md, "model.onnx")}: GroupQueryAttention ${gqa.name} has input 10, which hsm cannot write out, ` +
            "and onnxruntime's WebGPU kernel of it does not compute what its CPU kernel computes; use --device cpu, " +
            "or an optimum export of the model",
        ],
      ]);
      expect(existsSync(out)).toBe(false);
    }, 400_000);

    it("says in one line that a float16 graph runs widened to float32 where the adapter lacks shader-f16", async () => {
      const md = join(dir, "fp16");
      const out = join(dir, "fp16-webgpu-cli");
      const r = hsm(["extract", "--model-dir", md, "--bank", bank, "--out", out, "--device", "webgpu"], 300_000);
      expect(r.status).toBe(0);
      const said = r.stderr.split("\n").filter((l) => l.includes("float16"));
      expect(said).toEqual(
        SHADER_F16
          ? []
          : [
              `hsm: ${join(md, "onnx", "model_fp16.onnx")}: the graph computes in float16 and this WebGPU adapter ` +
                "lacks shader-f16: it runs widened to float32",
            ],
      );
      expect(JSON.parse(readFileSync(join(out, "index.json"), "utf8"))).toMatchObject({
        complete: true,
        dtype: "float16",
      });
    }, 400_000);

    it.skipIf(SHADER_F16)(
      "stops a float16 graph whose weights widened to float32 would pass 2 GiB, in one line",
      () => {
        const md = join(dir, "fp16-huge");
        cpSync(join(dir, "fp16"), md, { recursive: true });
        const file = join(md, "onnx", "model_fp16.onnx");
        const model = decodeModel(readFileSync(file));
        // 2^30 float16 values, 4 GiB widened; never read, as the count comes first.
        model.graph!.initializer!.push({
          name: "huge",
          dataType: 10,
          dims: [2 ** 30],
          dataLocation: 1,
          externalData: [{ key: "location", value: "model_fp16.onnx_data" }],
        });
        writeFileSync(file, encodeModel(model));
        const out = join(dir, "fp16-huge-store");
        const r = hsm(["extract", "--model-dir", md, "--bank", bank, "--out", out, "--device", "webgpu"], 300_000);
        expect([r.status, r.stderr.trim().split("\n")]).toEqual([
          1,
          [
            `hsm: ${file}: the graph computes in float16, which this WebGPU adapter cannot (it lacks shader-f16), and ` +
              "widened to float32 its weights (4.0 GiB) pass the 2 GiB a graph may hold; use a float32 graph of the " +
              "model (--model-file) or --device cpu",
          ],
        ]);
        expect(existsSync(out)).toBe(false);
      },
      300_000,
    );

    it("generates the reference's text with a genai build whose KV cache and logits are float16", async () => {
      const md = join(dir, "genai-fp16-io");
      const out = join(dir, "gen-genai-fp16-io", "webgpu.jsonl");
      const args = ["--model-dir", md, "--bank", bank, "--out", out, "--device", "webgpu", "--max-new-tokens", "4"];
      const r = await runChild(process.execPath, [BIN, "generate", ...args, "--quiet"], {
        env: gpuEnv(),
        timeout: 300_000,
      });
      expect([r.status, r.signal, r.stderr]).toEqual([0, null, ""]);
      // With float16 shaders the build computes in float16, as on the CPU, with nothing exact to compare with.
      if (SHADER_F16) return;
      // Widened, it computes in float32 on its float16 weights; with them, so does the reference.
      const config = tinyConfig(FP16_IO);
      const weights = styleWeights("fp16", tinyWeights(FP16_IO));
      const tok = await PromptTokenizer.load(md);
      const decode = referenceDecoder(readFileSync(join(md, "tokenizer.json"), "utf8"));
      const eos = new Set([config.eos_token_id ?? []].flat());
      const rows = readFileSync(bank, "utf8")
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l));
      const got = readFileSync(out, "utf8")
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l));
      expect(Object.fromEntries(got.map((g) => [g.query_id, g.raw_response]))).toEqual(
        Object.fromEntries(
          rows.map((row) => [
            row.query_id,
            decode(referenceGreedy(config, weights, tok.encode(buildPrompt(row)), eos, 4)),
          ]),
        ),
      );
    }, 400_000);
  },
);
