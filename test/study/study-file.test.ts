/**
 * The study file: what a valid one gives, and the exact message of every
 * error, with the file, the line and the field.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { DEFAULT_SEED, MAX_NEW_TOKENS, MAX_PROMPT_LEN } from "../../src/defaults.js";
import { parseStudy, readStudyFile, StudyFileError } from "../../src/study/study-file.js";
import { hasPython, numpyRequired, python } from "../helpers/numpy.js";
import { tempDir } from "../helpers/tmp.js";

const withPython = hasPython || numpyRequired ? it : it.skip;
const pythonSkipReason =
  hasPython || numpyRequired ? "" : " (skipped: no python3; set HSM_REQUIRE_NUMPY=1 to make that a failure)";

/** `texts` as a JSON file in a temporary folder, for Python to read. */
function writeTexts(texts: string[]): string {
  const path = join(tempDir("hsm-json-lines-"), "texts.json");
  writeFileSync(path, JSON.stringify(texts));
  return path;
}

const FILE = "/studies/base-vs-instruct/study.yaml";

const VALID = `# base against instruct
bank: ../banks/bank.jsonl
outputs: out
generation:
  max_new_tokens: 24
  max_prompt_len: 192
  seed: 20260101
  do_sample: false
  temperature: 0.0
  num_beams: 1
  dtype: bfloat16
run:
  batch_size: 8
  device: cpu
  threads: 2
models:
  - name: llama-base
    model_dir: models/base
  - name: llama-instruct
    outputs: /data/old-outputs
`;

/** The message `parseStudy` throws for `text`, after checking it is a StudyFileError. */
function failure(text: string, file = FILE): string {
  try {
    parseStudy(text, file);
  } catch (err) {
    expect(err).toBeInstanceOf(StudyFileError);
    return (err as Error).message;
  }
  throw new Error("expected the study to be rejected");
}

/** VALID with line `n` (1-based) replaced by `lines`. */
function edit(n: number, ...lines: string[]): string {
  const all = VALID.split("\n");
  all.splice(n - 1, 1, ...lines);
  return all.join("\n");
}

describe("a valid study file", () => {
  it("gives every setting, with paths resolved against the study file's folder", () => {
    const study = parseStudy(VALID, FILE);
    expect(study).toEqual({
      file: FILE,
      bank: "/studies/banks/bank.jsonl",
      outputs: "/studies/base-vs-instruct/out",
      generation: { max_new_tokens: 24, max_prompt_len: 192, seed: 20260101, dtype: "bfloat16" },
      run: { batchSize: 8, device: "cpu", threads: 2 },
      models: [
        { name: "llama-base", modelDir: "/studies/base-vs-instruct/models/base", line: 17 },
        { name: "llama-instruct", outputs: "/data/old-outputs", line: 19 },
      ],
      lines: {
        bank: 2,
        outputs: 3,
        "generation.max_new_tokens": 5,
        "generation.max_prompt_len": 6,
        "generation.seed": 7,
        "generation.do_sample": 8,
        "generation.temperature": 9,
        "generation.num_beams": 10,
        "generation.dtype": 11,
      },
    });
  });

  it("takes a model name with a slash as given; its files are named by its path stem", () => {
    const study = parseStudy("bank: b.jsonl\nmodels:\n  - {name: meta-llama/Llama-3.1-8B, model_dir: m}\n", FILE);
    expect(study.models[0]!.name).toBe("meta-llama/Llama-3.1-8B");
  });

  it("falls back to the benchmark's decoding settings and the default output root", () => {
    const study = parseStudy("bank: b.jsonl\nmodels:\n  - {name: m, model_dir: m}\n", FILE);
    expect(study.generation).toEqual({
      max_new_tokens: MAX_NEW_TOKENS,
      max_prompt_len: MAX_PROMPT_LEN,
      seed: DEFAULT_SEED,
    });
    expect(study.outputs).toBe("/studies/base-vs-instruct/outputs");
    expect(study.run).toEqual({});
  });

  it("reads the same study from JSON", async () => {
    const dir = tempDir("hsm-study-file-");
    const file = join(dir, "study.json");
    writeFileSync(
      file,
      JSON.stringify(
        {
          bank: "bank.jsonl",
          generation: { max_new_tokens: 8 },
          models: [
            { name: "a", model_dir: "a" },
            { name: "b", outputs: "old" },
          ],
        },
        null,
        2,
      ),
    );
    const study = await readStudyFile(file);
    expect(study.bank).toBe(join(dir, "bank.jsonl"));
    expect(study.generation.max_new_tokens).toBe(8);
    expect(study.models.map((m) => [m.name, m.modelDir ?? m.outputs])).toEqual([
      ["a", join(dir, "a")],
      ["b", join(dir, "old")],
    ]);
  });
});

describe("study file errors", () => {
  it.each([
    [
      "a YAML syntax error",
      edit(3, "outputs: [out"),
      `${FILE}:4: not valid YAML: Flow sequence in block collection must be sufficiently indented and end with a ]`,
    ],
    ["a key given twice", edit(3, "bank: again.jsonl"), `${FILE}:3: not valid YAML: Map keys must be unique`],
    [
      "a list at the top",
      "- bank\n",
      `${FILE}:1: expected a mapping of bank, outputs, generation, run and models at the top but received a list`,
    ],
    [
      "an empty file",
      "",
      `${FILE}: expected a mapping of bank, outputs, generation, run and models at the top but received nothing`,
    ],
    [
      "an unknown top-level field",
      edit(3, "output: out"),
      `${FILE}:3: field "output": unknown field; expected one of bank, outputs, generation, run, models`,
    ],
    ["no bank", edit(2), `${FILE}: is missing "bank" (the query bank JSONL, relative to the study file)`],
    ["no models", VALID.split("\nmodels:")[0]!, `${FILE}: is missing "models" (the list of models to compare)`],
    [
      "a bank that is not a path",
      edit(2, "bank: 3"),
      `${FILE}:2: field "bank": expected the path of the query bank JSONL but received 3 (number)`,
    ],
    [
      "an empty outputs",
      edit(3, 'outputs: ""'),
      `${FILE}:3: field "outputs": expected the path of the output root but received "" (string)`,
    ],
    [
      "generation not a mapping",
      edit(4, "generation: greedy")
        .split("\n")
        .filter((_, i) => i < 4 || i > 10)
        .join("\n"),
      `${FILE}:4: field "generation": expected a mapping of decoding settings but received "greedy" (string)`,
    ],
    [
      "an unknown decoding setting",
      edit(11, "  dtype: bfloat16", "  repetition_penalty: 1.1"),
      `${FILE}:12: field "generation.repetition_penalty": unknown field; expected one of max_new_tokens, max_prompt_len, seed, do_sample, temperature, num_beams, dtype, top_p, top_k, typical_p, min_p, num_return_sequences`,
    ],
    [
      "do_sample true",
      edit(8, "  do_sample: true"),
      `${FILE}:8: field "generation.do_sample": hsm decodes greedily only; expected false but received true (boolean)`,
    ],
    [
      "a temperature",
      edit(9, "  temperature: 0.7"),
      `${FILE}:9: field "generation.temperature": hsm decodes greedily only; expected 0 but received 0.7 (number)`,
    ],
    [
      "beam search",
      edit(10, "  num_beams: 4"),
      `${FILE}:10: field "generation.num_beams": hsm decodes greedily only; expected 1 but received 4 (number)`,
    ],
    [
      "top_p",
      edit(10, "  num_beams: 1", "  top_p: 0.9"),
      `${FILE}:11: field "generation.top_p": is a sampling setting; hsm decodes greedily only, so remove it`,
    ],
    [
      "top_k",
      edit(10, "  num_beams: 1", "  top_k: 50"),
      `${FILE}:11: field "generation.top_k": is a sampling setting; hsm decodes greedily only, so remove it`,
    ],
    [
      "max_new_tokens as text",
      edit(5, '  max_new_tokens: "24"'),
      `${FILE}:5: field "generation.max_new_tokens": expected a positive integer but received "24" (string)`,
    ],
    [
      "max_prompt_len zero",
      edit(6, "  max_prompt_len: 0"),
      `${FILE}:6: field "generation.max_prompt_len": expected a positive integer but received 0 (number)`,
    ],
    [
      "a negative seed",
      edit(7, "  seed: -1"),
      `${FILE}:7: field "generation.seed": expected an integer from 0 to 4294967295 but received -1 (number)`,
    ],
    [
      "an unknown dtype",
      edit(11, "  dtype: fp8"),
      `${FILE}:11: field "generation.dtype": expected one of float32, float16, bfloat16 but received "fp8" (string)`,
    ],
    [
      "run not a mapping",
      edit(12, "run: fast")
        .split("\n")
        .filter((_, i) => i < 12 || i > 14)
        .join("\n"),
      `${FILE}:12: field "run": expected a mapping of batch_size, device, threads and commit_rows but received "fast" (string)`,
    ],
    [
      "an unknown run setting",
      edit(15, "  workers: 2"),
      `${FILE}:15: field "run.workers": unknown field; expected one of batch_size, device, threads, commit_rows`,
    ],
    [
      "a fractional batch size",
      edit(13, "  batch_size: 2.5"),
      `${FILE}:13: field "run.batch_size": expected a positive integer but received 2.5 (number)`,
    ],
    [
      "a zero commit_rows",
      edit(15, "  commit_rows: 0"),
      `${FILE}:15: field "run.commit_rows": expected a positive integer but received 0 (number)`,
    ],
    [
      "an unknown device",
      edit(14, "  device: tpu"),
      `${FILE}:14: field "run.device": expected "cpu" or "cuda" but received "tpu" (string)`,
    ],
    [
      "zero threads",
      edit(15, "  threads: 0"),
      `${FILE}:15: field "run.threads": expected a positive integer but received 0 (number)`,
    ],
    [
      "models not a list",
      VALID.split("\nmodels:")[0]! + "\nmodels: llama\n",
      `${FILE}:16: field "models": expected a non-empty list of models (each a name and a model_dir or outputs) but received "llama" (string)`,
    ],
    [
      "an empty list of models",
      VALID.split("\nmodels:")[0]! + "\nmodels: []\n",
      `${FILE}:16: field "models": expected a non-empty list of models (each a name and a model_dir or outputs) but received a list`,
    ],
    [
      "a model that is not a mapping",
      edit(17, "  - llama-base")
        .split("\n")
        .filter((_, i) => i !== 17)
        .join("\n"),
      `${FILE}:17: field "models[0]": expected a mapping with name and model_dir or outputs but received "llama-base" (string)`,
    ],
    [
      "a model without a name",
      edit(17, "  - model_dir: models/base")
        .split("\n")
        .filter((_, i) => i !== 17)
        .join("\n"),
      `${FILE}:17: field "models[0]": is missing its name`,
    ],
    [
      "a model name that is not text",
      edit(17, "  - name: 7"),
      `${FILE}:17: field "models[0].name": expected a model name but received 7 (number)`,
    ],
    [
      "a model name with a control character",
      edit(17, '  - name: "meta\\tllama"'),
      `${FILE}:17: field "models[0].name": expected a model name without control characters but received "meta\\tllama"`,
    ],
    [
      "a model named twice",
      edit(19, "  - name: llama-base"),
      `${FILE}:19: field "models[1].name": "llama-base" is already the name of models[0]`,
    ],
    [
      "a model named by another's hashed path stem",
      edit(17, "  - name: meta/llama-base").replace("  - name: llama-instruct", "  - name: meta_llama-base-84c9feb3"),
      `${FILE}:19: field "models[1].name": "meta_llama-base-84c9feb3" would be filed under meta_llama-base-84c9feb3, the path stem of models[0] ("meta/llama-base"); rename one of them`,
    ],
    [
      "a model with both folders",
      edit(18, "    model_dir: models/base", "    outputs: old"),
      `${FILE}:17: field "models[0]": expected exactly one of model_dir (a model folder to run) or outputs (an outputs folder to import) but received both`,
    ],
    [
      "a model with neither folder",
      edit(18),
      `${FILE}:17: field "models[0]": expected exactly one of model_dir (a model folder to run) or outputs (an outputs folder to import) but received neither`,
    ],
    [
      "an unknown model field",
      edit(18, "    model_dir: models/base", "    revision: main"),
      `${FILE}:19: field "models[0].revision": unknown field; expected one of name, model_dir, outputs`,
    ],
    [
      "an empty model_dir",
      edit(18, "    model_dir:"),
      `${FILE}:18: field "models[0].model_dir": expected a model folder or hub id but received nothing`,
    ],
    [
      "an outputs that is not a path",
      edit(20, "    outputs: [a, b]"),
      `${FILE}:20: field "models[1].outputs": expected an outputs folder but received a list`,
    ],
  ])("%s", (_what, text, message) => {
    expect(failure(text)).toBe(message);
  });

  it("names the line of a JSON syntax error, on one line", () => {
    const file = "/studies/study.json";
    expect(failure('{\n  "bank": "b.jsonl",\n  "models": [],\n}\n', file)).toBe(
      `${file}:4: not valid JSON: unexpected "}"`,
    );
    // JSON.parse names no position for an unexpected token, and quotes the whole text.
    expect(
      failure('{\n  "bank": "b.jsonl",\n  "models": [\n    {"name": "a", "model_dir": "a"},\n  ]\n}\n', file),
    ).toBe(`${file}:5: not valid JSON: unexpected "]"`);
    expect(failure('{\n  "bank": "b.jsonl",\n  "models": [\n', file)).toBe(
      `${file}:4: not valid JSON: it ends too soon`,
    );
  });

  withPython(`finds the line Python's json module finds in 400 broken files${pythonSkipReason}`, () => {
    const valid = JSON.stringify(
      {
        bank: "b.jsonl",
        generation: { max_new_tokens: 24, temperature: 0.0, seed: -12.5e-3, do_sample: false, dtype: null },
        models: [{ name: "a\\b \\u00e9", model_dir: "a" }, [], {}],
      },
      null,
      2,
    );
    // Each a valid file with one character deleted, changed or added: the ones JSON.parse refuses.
    let seed = 7;
    const next = (n: number) => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) >>> 8) % n;
    const broken: string[] = [];
    while (broken.length < 400) {
      const at = next(valid.length);
      const c = ',:]}[{"\\ \nx0-.e'[next(16)]!;
      const edits = [valid.slice(0, at) + valid.slice(at + 1), valid.slice(0, at) + c + valid.slice(at + 1)];
      const text = edits[next(2)]!.replace(/\n$/, "") + (next(2) ? c : "");
      try {
        JSON.parse(text);
      } catch {
        broken.push(text);
      }
    }
    const lines = JSON.parse(
      python(
        [
          "import json, sys",
          "out = []",
          "for t in json.load(open(sys.argv[1])):",
          "    try:",
          "        json.loads(t); out.append(None)",
          "    except json.JSONDecodeError as e:",
          "        out.append(e.lineno)",
          "print(json.dumps(out))",
        ].join("\n"),
        writeTexts(broken),
      ),
    ) as (number | null)[];
    const ours = broken.map((t) => Number(/^[^:]+:(\d+): not valid JSON: /.exec(failure(t, "/s.json"))![1]));
    expect(ours).toEqual(lines);
  });

  it("points at JSON fields by line too", () => {
    const file = "/studies/study.json";
    const text = JSON.stringify(
      { bank: "b.jsonl", generation: { temperature: 1 }, models: [{ name: "a", model_dir: "a" }] },
      null,
      2,
    );
    expect(failure(text, file)).toBe(
      `${file}:4: field "generation.temperature": hsm decodes greedily only; expected 0 but received 1 (number)`,
    );
  });

  it("says when the file cannot be read", async () => {
    const file = join(tempDir("hsm-study-file-"), "missing.yaml");
    await expect(readStudyFile(file)).rejects.toThrow(new StudyFileError(file, undefined, undefined, "does not exist"));
    await expect(readStudyFile(file)).rejects.toThrow(`${file}: does not exist`);
  });
});
