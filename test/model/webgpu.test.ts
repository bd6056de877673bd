/**
 * onnxruntime's WebGPU provider on whatever adapter the machine has (SwiftShader's, CPU-emulated and without
 * `shader-f16`, where there is no GPU; see helpers/software-gpu.ts). Extraction in every export style and of every
 * family the CPU suite covers, at batch 16 and 1, stores the CPU's states within the batch self-check's tolerance
 * (a float16 graph, widened to float32 on an adapter without float16 shaders, within float16 arithmetic's error
 * of them), and the float64 reference's where there is one (on the weights the graph multiplies by; a genai
 * build's GroupQueryAttention runs written out in standard operators); generation writes the CPU's file byte for
 * byte, with the with-past and the genai build, and a widened float16 build the reference's text, and the process
 * ends by itself, its lock released; a GroupQueryAttention that cannot be written out, a float16 graph too large
 * to widen, and a graph onnxruntime refuses to load (named as the graph's fault, not the provider's), stop in one
 * line.
 * SwiftShader compiles a shader for every new tensor shape, slowly: the models are tiny, the prompts few, and the
 * extractions of a group share one process (and its compiled shaders).
 */
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { buildPrompt } from "../../src/bank/prompt.js";
import { extract, inspectModel } from "../../src/extract/extract.js";
import { generate } from "../../src/generate/generate.js";
import { decodeModel, encodeModel, floatTensor } from "../../src/onnx/graph.js";
import { rowDeviation, selfCheckTolerance } from "../../src/model/self-check.js";
import { PromptTokenizer } from "../../src/model/tokenizer.js";
import { MODEL_STYLES, writeModelInStyle } from "../../src/synthetic/export-styles.js";
import type { OwnFamilyOptions } from "../../src/synthetic/families.js";
import { genaiFiles } from "../../src/synthetic/genai.js";
import { tinyConfig, tinyWeights, writeTinyModel } from "../../src/synthetic/llama.js";
import { styleWeights, type QuantizedStyle } from "../../src/synthetic/quantize.js";
import { runChild } from "../helpers/child.js";
import { FAMILIES, FAMILY_KNOBS } from "../helpers/families.js";
import { referenceDecoder, referenceGreedy } from "../helpers/llama-reference.js";
import { expectStoreMatchesReference } from "../helpers/reference-store.js";
import { gpuEnv, gpuFeatures, gpuSkipReason } from "../helpers/software-gpu.js";
import { tempDir } from "../helpers/tmp.js";
import { WIDENED_VS_FLOAT16 } from "../tolerances.js";

const ROOT = join(import.meta.dirname, "..", "..");
const BIN = join(ROOT, "bin", "hsm.js");
const dir = tempDir("hsm-webgpu-");
const bank = join(dir, "bank.jsonl");
const QUERIES = ["What is the capital of France?", "Ok?", "Which element has the chemical symbol Fe?"];
const GEOMETRY = { layers: 2, hidden: 32, heads: 2, tokenizer: "llama3.1-1k" } as const;
const SHADER_F16 = gpuFeatures.includes("shader-f16");

/**
 * A model extracted: how its folder is written, its options, and the weights of the float64 reference it is
 * checked against (`float32`: the seeded weights; a style: the weights that style's graph multiplies by), if any.
 */
interface Extracted {
  write(dir: string): Promise<unknown>;
  o: OwnFamilyOptions;
  reference: "float32" | QuantizedStyle | undefined;
}

/**
 * The reference of each export style: int8 graphs quantize activations per tensor, which only the CPU store
 * is compared with; the genai builds' int4 and fp16 multiply by the q4 and fp16 styles' weights.
 */
const STYLE_REFERENCE: Record<(typeof MODEL_STYLES)[number], Extracted["reference"]> = {
  plain: "float32",
  "with-past": "float32",
  merged: "float32",
  "dynamo-names": "float32",
  anonymous: "float32",
  genai: "float32",
  "genai-fp16": "fp16",
  "genai-int4": "q4",
  q4: "q4",
  int8: undefined,
  nf4: "nf4",
  fp16: "fp16",
  q4f16: "q4f16",
};

/** The genai fp16 build with float16 inputs and outputs (its KV cache and logits), which the CPU suite covers too. */
const FP16_IO = { ...GEOMETRY, seed: 90 };
/** Every export style of the llama shape, and that build beside them. */
const STYLES: Record<string, Extracted> = {
  ...Object.fromEntries(
    MODEL_STYLES.map((style, k) => {
      const o = { ...GEOMETRY, seed: 91 + k };
      return [style, { write: (d: string) => writeModelInStyle(d, style, o), o, reference: STYLE_REFERENCE[style] }];
    }),
  ),
  "genai-fp16-io": {
    write: (d) => writeTinyModel(d, FP16_IO, genaiFiles("fp16-io")),
    o: FP16_IO,
    reference: "fp16",
  },
};

/** Every family of the CPU suite, with its options there, as optimum's with-past model.onnx. */
const FAMILY_MODELS: Record<string, Extracted> = Object.fromEntries(
  FAMILIES.map((family, k) => {
    const o: OwnFamilyOptions = {
      ...FAMILY_KNOBS[family],
      family,
      ...GEOMETRY,
      heads: 4,
      seed: 60 + k,
      positionIds: true,
    };
    return [family, { write: (d: string) => writeModelInStyle(d, "with-past", o), o, reference: "float32" }];
  }),
);
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
      for (const [name, m] of [...Object.entries(STYLES), ...Object.entries(FAMILY_MODELS)])
        await m.write(join(dir, name));
    });

    /**
     * Extracts every model of `models` at batch 16 and 1 on WebGPU, in one process (the shaders compiled for one
     * model serve the next), and checks each store against the CPU's and the reference.
     */
    async function expectCpuStates(models: Record<string, Extracted>): Promise<void> {
      const jobs = Object.keys(models).flatMap((name) =>
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
      const script =
        `const { extract } = await import(${JSON.stringify(join(ROOT, "dist", "index.js"))});` +
        `const done = {}; for (const job of JSON.parse(process.argv[1])) { const log = [];` +
        ` const r = await extract({ ...job, log: (m) => log.push(m) });` +
        ` done[job.out] = { selfCheck: r.manifest.self_check.status, log }; }` +
        `process.stdout.write(JSON.stringify(done));`;
      const r = await runChild(process.execPath, ["--input-type=module", "-e", script, JSON.stringify(jobs)], {
        env: gpuEnv(),
        timeout: 600_000,
      });
      expect(r.stderr).toBe("");
      expect(r.status).toBe(0);
      const done = JSON.parse(r.stdout) as Record<string, { selfCheck: string; log: string[] }>;
      for (const [name, m] of Object.entries(models)) {
        const md = join(dir, name);
        const cpu = join(dir, `${name}-cpu`);
        const { manifest } = await extract({ modelDir: md, bank, out: cpu, layerRule: "l >= 0" });
        const float16 = manifest.dtype === "float16";
        const widened = float16 && !SHADER_F16;
        const { onnxPath } = (await inspectModel(md)).inspection;
        for (const batchSize of BATCHES) {
          const store = join(dir, `${name}-webgpu-b${batchSize}`);
          expect(done[store]!.selfCheck, store).toBe(batchSize === 1 ? "off" : "pass");
          expect(
            done[store]!.log.filter((l) => l.includes("float16")),
            store,
          ).toEqual(
            widened
              ? [
                  `${onnxPath}: the graph computes in float16 and this WebGPU adapter lacks shader-f16: it runs widened to float32`,
                ]
              : [],
          );
          const gpu = JSON.parse(readFileSync(join(store, "index.json"), "utf8"));
          expect([gpu.complete, gpu.extraction.device, gpu.dtype]).toEqual([true, "webgpu", manifest.dtype]);
          for (const layer of manifest.layers) {
            // Widened, the graph computes in float32 what the CPU computes in float16 (WIDENED_VS_FLOAT16).
            const tolerance = widened
              ? WIDENED_VS_FLOAT16.storage + (layer + 1) * WIDENED_VS_FLOAT16.perLayer
              : selfCheckTolerance(manifest.dtype);
            const want = storedRows(cpu, layer, manifest.d_model);
            const got = storedRows(store, layer, manifest.d_model);
            expect(got.length).toBe(QUERIES.length);
            got.forEach((row, i) =>
              expect(rowDeviation(want[i]!, row).rel, `${store} L${layer} row ${i}`).toBeLessThanOrEqual(tolerance),
            );
          }
          // Widened, a float16 graph computes in float32 on its float16 weights: the reference's states on them
          // within float16 storage, as a float32 graph's are. Run in float16, it is the CPU suite's to compare.
          if (m.reference !== undefined && (!float16 || widened)) {
            const weightsOf = m.reference === "float32" ? undefined : m.reference;
            await expectStoreMatchesReference(store, m.o, md, bank, weightsOf);
          }
        }
      }
    }

    it("extracts every export style at batch 16 and 1: the CPU's states, and the reference's", async () => {
      await expectCpuStates(STYLES);
    }, 900_000);

    it("extracts every family at batch 16 and 1: the CPU's states, and the reference's", async () => {
      await expectCpuStates(FAMILY_MODELS);
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

describe.skipIf(gpuSkipReason !== undefined)("a graph onnxruntime refuses to load, on WebGPU", () => {
  it.each(["extract", "generate"])(
    "%s names the graph file and onnxruntime's reason, not the provider or a Vulkan driver",
    async (command) => {
      const md = join(dir, "invalid-cast");
      if (!existsSync(md)) {
        await writeTinyModel(md, { ...GEOMETRY, kvHeads: 1, seed: 91 }, genaiFiles("fp32"));
        const model = decodeModel(readFileSync(join(md, "model.onnx")));
        const cast = model.graph!.node!.find((n) => n.opType === "Cast")!;
        Object.assign(
          cast.attribute!.find((a) => a.name === "to")!,
          { type: 1, f: 7, i: null },
        ); // FLOAT, not INT
        writeFileSync(join(md, "model.onnx"), encodeModel(model));
      }
      // onnxruntime's own words for the graph, on the CPU.
      const direct = spawnSync(
        process.execPath,
        [
          "-e",
          `require("onnxruntime-node").InferenceSession.create(${JSON.stringify(join(md, "model.onnx"))})` +
            `.then(() => {}, (e) => process.stdout.write(e.message))`,
        ],
        { encoding: "utf8" },
      );
      const said = /Mismatched attribute type in '[^']*Cast : to'/.exec(direct.stdout)![0];
      const out = join(dir, `invalid-cast-${command}`, command === "extract" ? "store" : "gen.jsonl");
      const r = hsm([command, "--model-dir", md, "--bank", bank, "--out", out, "--device", "webgpu"], 300_000);
      expect(r.status).toBe(1);
      expect(r.stderr).toMatch(/^hsm: [^\n]*\n$/);
      expect(r.stderr.startsWith(`hsm: ${join(md, "model.onnx")}: onnxruntime could not load the graph (`)).toBe(true);
      expect(r.stderr).toContain(said);
      expect(existsSync(out)).toBe(false);
    },
    400_000,
  );
});
