/**
 * The study file: one bank, one output root, the decoding settings and the
 * models to compare, in YAML or JSON (docs/study.md). Read strictly: an
 * unknown field, a sampling setting or a model named twice is an error naming
 * the file, the line and the field.
 */
import { dirname, extname, resolve } from "node:path";

import { isNode, LineCounter, parseDocument, type Document } from "yaml";

import { DEFAULT_OUTPUTS, DEFAULT_SEED, MAX_NEW_TOKENS, MAX_PROMPT_LEN, MAX_SEED } from "../defaults.js";
import { FileError, HsmError } from "../errors.js";
import { readText } from "../util/fs.js";
import { nameProblem, pathStem } from "../util/stem.js";

/** A study file that cannot be read as a study. */
export class StudyFileError extends HsmError {
  constructor(
    readonly file: string,
    readonly line: number | undefined,
    readonly field: string | undefined,
    problem: string,
    options?: { cause?: unknown },
  ) {
    super(`${file}${line === undefined ? "" : `:${line}`}: ${field ? `field "${field}": ` : ""}${problem}`, options);
  }
}

/** The benchmark's `configs/models.yaml:generation` block, restricted to greedy decoding. */
export interface GenerationSettings {
  max_new_tokens: number;
  max_prompt_len: number;
  seed: number;
  /** The compute dtype the benchmark names (e.g. `bfloat16`); recorded, the model's graph decides. */
  dtype?: string;
}

/** One model of a study: a model folder to run, or an outputs folder holding its finished run to import. */
export interface StudyModel {
  name: string;
  /** Absolute model folder, for a model the study runs. */
  modelDir?: string;
  /** Absolute outputs root already holding this model's run (evaluation/, hidden/, metrics/), for an imported model. */
  outputs?: string;
  /** The line of the model's entry in the study file. */
  line: number | undefined;
}

/** A validated study: every path absolute, resolved against the study file's folder. */
export interface Study {
  file: string;
  bank: string;
  outputs: string;
  generation: GenerationSettings;
  /** How the models are run: prompts per batch, device, onnxruntime threads, rows per extraction commit (and shard boundary). */
  run: { batchSize?: number; device?: "cpu" | "cuda"; threads?: number; commitRows?: number };
  models: StudyModel[];
  /** Where each given field (`bank`, `outputs`, `generation.<key>`) sits in the file, for later messages. */
  lines: Record<string, number | undefined>;
}

/** The most bytes a study file may hold: a study file is a page of settings. */
const STUDY_FILE_MAX_BYTES = 1024 * 1024;

const TOP_FIELDS = ["bank", "outputs", "generation", "run", "models"] as const;
const GENERATION_FIELDS = [
  "max_new_tokens",
  "max_prompt_len",
  "seed",
  "do_sample",
  "temperature",
  "num_beams",
  "dtype",
] as const;
const SAMPLING_FIELDS = ["top_p", "top_k", "typical_p", "min_p", "num_return_sequences"] as const;
const RUN_FIELDS = ["batch_size", "device", "threads", "commit_rows"] as const;
const MODEL_FIELDS = ["name", "model_dir", "outputs"] as const;
const DTYPES = ["float32", "float16", "bfloat16"] as const;

type Path = (string | number)[];

function fieldName(path: Path): string {
  return path.map((p, i) => (typeof p === "number" ? `[${p}]` : i === 0 ? p : `.${p}`)).join("");
}

function describe(value: unknown): string {
  if (value === null || value === undefined) return "nothing";
  if (Array.isArray(value)) return "a list";
  if (typeof value === "object") return "a mapping";
  return `${JSON.stringify(value)} (${typeof value})`;
}

/** Checks a parsed study document, with its lines for messages. */
class Checker {
  constructor(
    readonly file: string,
    private readonly doc: Document,
    private readonly lc: LineCounter,
  ) {}

  line(path: Path): number | undefined {
    for (let k = path.length; k >= 0; k--) {
      const node = k === 0 ? this.doc.contents : this.doc.getIn(path.slice(0, k), true);
      if (isNode(node) && node.range) return this.lc.linePos(node.range[0]).line;
    }
    return undefined;
  }

  fail(path: Path, problem: string): never {
    throw new StudyFileError(this.file, this.line(path), path.length ? fieldName(path) : undefined, problem);
  }

  mapping(value: unknown, path: Path, known: readonly string[], what: string): Record<string, unknown> {
    if (value === null || typeof value !== "object" || Array.isArray(value))
      this.fail(path, `expected ${what} but received ${describe(value)}`);
    const map = value as Record<string, unknown>;
    for (const key of Object.keys(map))
      if (!known.includes(key)) this.fail([...path, key], `unknown field; expected one of ${known.join(", ")}`);
    return map;
  }

  text(value: unknown, path: Path, what: string): string {
    if (typeof value !== "string" || value.trim() === "")
      this.fail(path, `expected ${what} but received ${describe(value)}`);
    return value;
  }

  positiveInteger(value: unknown, path: Path): number {
    if (typeof value !== "number" || !Number.isInteger(value) || value < 1)
      this.fail(path, `expected a positive integer but received ${describe(value)}`);
    return value;
  }
}

function checkGeneration(c: Checker, value: unknown): GenerationSettings {
  const path = ["generation"];
  const g =
    value === undefined
      ? {}
      : c.mapping(value, path, [...GENERATION_FIELDS, ...SAMPLING_FIELDS], "a mapping of decoding settings");
  for (const key of SAMPLING_FIELDS)
    if (key in g) c.fail([...path, key], "is a sampling setting; hsm decodes greedily only, so remove it");
  if ("do_sample" in g && g.do_sample !== false)
    c.fail([...path, "do_sample"], `hsm decodes greedily only; expected false but received ${describe(g.do_sample)}`);
  if ("temperature" in g && g.temperature !== 0)
    c.fail([...path, "temperature"], `hsm decodes greedily only; expected 0 but received ${describe(g.temperature)}`);
  if ("num_beams" in g && g.num_beams !== 1)
    c.fail([...path, "num_beams"], `hsm decodes greedily only; expected 1 but received ${describe(g.num_beams)}`);
  const settings: GenerationSettings = {
    max_new_tokens:
      "max_new_tokens" in g ? c.positiveInteger(g.max_new_tokens, [...path, "max_new_tokens"]) : MAX_NEW_TOKENS,
    max_prompt_len:
      "max_prompt_len" in g ? c.positiveInteger(g.max_prompt_len, [...path, "max_prompt_len"]) : MAX_PROMPT_LEN,
    seed: DEFAULT_SEED,
  };
  if ("seed" in g) {
    if (typeof g.seed !== "number" || !Number.isInteger(g.seed) || g.seed < 0 || g.seed > MAX_SEED) {
      c.fail([...path, "seed"], `expected an integer from 0 to ${MAX_SEED} but received ${describe(g.seed)}`);
    }
    settings.seed = g.seed;
  }
  if ("dtype" in g) {
    if (!DTYPES.includes(g.dtype as (typeof DTYPES)[number]))
      c.fail([...path, "dtype"], `expected one of ${DTYPES.join(", ")} but received ${describe(g.dtype)}`);
    settings.dtype = g.dtype as string;
  }
  return settings;
}

function checkRun(c: Checker, value: unknown): Study["run"] {
  if (value === undefined) return {};
  const r = c.mapping(value, ["run"], RUN_FIELDS, "a mapping of batch_size, device, threads and commit_rows");
  const run: Study["run"] = {};
  if ("batch_size" in r) run.batchSize = c.positiveInteger(r.batch_size, ["run", "batch_size"]);
  if ("threads" in r) run.threads = c.positiveInteger(r.threads, ["run", "threads"]);
  if ("commit_rows" in r) run.commitRows = c.positiveInteger(r.commit_rows, ["run", "commit_rows"]);
  if ("device" in r) {
    if (r.device !== "cpu" && r.device !== "cuda")
      c.fail(["run", "device"], `expected "cpu" or "cuda" but received ${describe(r.device)}`);
    run.device = r.device;
  }
  return run;
}

function checkModels(c: Checker, value: unknown, base: string): StudyModel[] {
  if (!Array.isArray(value) || value.length === 0)
    c.fail(
      ["models"],
      `expected a non-empty list of models (each a name and a model_dir or outputs) but received ${describe(value)}`,
    );
  const seen = new Map<string, { index: number; name: string }>();
  return value.map((entry, i): StudyModel => {
    const path = ["models", i];
    const m = c.mapping(entry, path, MODEL_FIELDS, "a mapping with name and model_dir or outputs");
    if (!("name" in m)) c.fail(path, "is missing its name");
    const name = c.text(m.name, [...path, "name"], "a model name");
    const problem = nameProblem(name);
    if (problem) c.fail([...path, "name"], problem);
    const stem = pathStem(name); // files and folders are named by it; the name is recorded as given
    const first = seen.get(stem);
    if (first?.name === name)
      c.fail([...path, "name"], `${JSON.stringify(name)} is already the name of models[${first.index}]`);
    // A plain name can spell another name's hashed stem: both would be filed under it.
    if (first !== undefined)
      c.fail(
        [...path, "name"],
        `${JSON.stringify(name)} would be filed under ${stem}, the path stem of models[${first.index}] (${JSON.stringify(first.name)}); rename one of them`,
      );
    seen.set(stem, { index: i, name });
    const hasDir = "model_dir" in m;
    const hasOutputs = "outputs" in m;
    if (hasDir === hasOutputs) {
      c.fail(
        path,
        `expected exactly one of model_dir (a model folder to run) or outputs (an outputs folder to import) but received ${hasDir ? "both" : "neither"}`,
      );
    }
    const model: StudyModel = { name, line: c.line(path) };
    if (hasDir) {
      const given = c.text(m.model_dir, [...path, "model_dir"], "a model folder or hub id");
      // A hub id (hf:ORG/NAME[@REVISION]) is not a path.
      model.modelDir = given.startsWith("hf:") ? given : resolve(base, given);
    } else model.outputs = resolve(base, c.text(m.outputs, [...path, "outputs"], "an outputs folder"));
    return model;
  });
}

/** A JSON string at a sticky regex's position: no raw control character, only JSON's escapes. */
// eslint-disable-next-line no-control-regex -- JSON forbids raw control characters in a string
const STRING = /"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/.source;
const JSON_STRING = new RegExp(STRING, "y");
/** A JSON string, number or literal. */
const JSON_TOKEN = new RegExp(`${STRING}|-?(?:0|[1-9]\\d*)(?:\\.\\d+)?(?:[eE][+-]?\\d+)?|true|false|null`, "y");

/**
 * Where `text`, which JSON.parse refused, stops being JSON (RFC 8259): the offset of the first character that
 * cannot continue it (the start of a token that is not one), or its length where it ends too soon. JSON.parse's
 * own messages give no position for an unexpected token.
 */
function jsonErrorAt(text: string): number {
  /** Thrown where the text stops being JSON. */
  class Stop {
    constructor(readonly at: number) {}
  }
  let i = 0;
  const space = () => {
    while (i < text.length && " \t\n\r".includes(text[i]!)) i++;
  };
  const token = (re: RegExp) => {
    re.lastIndex = i;
    if (!re.test(text)) throw new Stop(i);
    i = re.lastIndex;
  };
  const expect = (c: string) => {
    space();
    if (text[i] !== c) throw new Stop(i);
    i++;
  };
  // Iterative, so that no nesting depth overflows the stack: `open` holds the containers entered.
  const open: string[] = [];
  try {
    for (;;) {
      space();
      const c = text[i];
      if (c === "{" || c === "[") {
        i++;
        space();
        if (text[i] === (c === "{" ? "}" : "]")) i++;
        else {
          open.push(c);
          if (c === "{") {
            token(JSON_STRING);
            expect(":");
          }
          continue;
        }
      } else token(JSON_TOKEN);
      // A value ended: close what it ends, or go on to the next member.
      for (;;) {
        if (open.length === 0) {
          space();
          if (i < text.length) throw new Stop(i);
          return text.length;
        }
        space();
        const top = open.at(-1)!;
        if (text[i] === ",") {
          i++;
          if (top === "{") {
            space();
            token(JSON_STRING);
            expect(":");
          }
          break;
        }
        expect(top === "{" ? "}" : "]");
        open.pop();
      }
    }
  } catch (err) {
    if (err instanceof Stop) return err.at;
    throw err;
  }
}

/**
 * Parses and validates the text of a study file; `file` names it in messages
 * and anchors its relative paths. A `.json` file must be strict JSON.
 * @example parseStudy("bank: bank.jsonl\nmodels:\n  - {name: a, model_dir: models/a}\n", "/work/study.yaml")
 */
export function parseStudy(text: string, file: string): Study {
  if (extname(file).toLowerCase() === ".json") {
    try {
      JSON.parse(text);
    } catch (err) {
      const at = jsonErrorAt(text);
      const line = text.slice(0, at).split("\n").length;
      const problem = at < text.length ? `unexpected ${JSON.stringify(text[at])}` : "it ends too soon";
      throw new StudyFileError(file, line, undefined, `not valid JSON: ${problem}`, { cause: err });
    }
  }
  const lc = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lc, prettyErrors: false, uniqueKeys: true });
  const error = doc.errors[0];
  if (error)
    throw new StudyFileError(
      file,
      lc.linePos(error.pos[0]).line,
      undefined,
      `not valid YAML: ${error.message.split("\n")[0]}`,
      { cause: error },
    );
  let value: unknown;
  try {
    value = doc.toJS();
  } catch (err) {
    // yaml refuses what would expand without bound (an "alias bomb"), among others.
    throw new StudyFileError(file, undefined, undefined, `not a usable YAML document: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const c = new Checker(file, doc, lc);
  const top = c.mapping(value, [], TOP_FIELDS, "a mapping of bank, outputs, generation, run and models at the top");
  const base = dirname(resolve(file));
  // A missing field has no line of its own: the message names the file only.
  if (!("bank" in top))
    throw new StudyFileError(
      file,
      undefined,
      undefined,
      'is missing "bank" (the query bank JSONL, relative to the study file)',
    );
  if (!("models" in top))
    throw new StudyFileError(file, undefined, undefined, 'is missing "models" (the list of models to compare)');
  const bank = resolve(base, c.text(top.bank, ["bank"], "the path of the query bank JSONL"));
  const outputs = resolve(
    base,
    "outputs" in top ? c.text(top.outputs, ["outputs"], "the path of the output root") : DEFAULT_OUTPUTS,
  );
  const generation = checkGeneration(c, top.generation);
  const run = checkRun(c, top.run);
  const models = checkModels(c, top.models, base);
  const lines: Record<string, number | undefined> = {};
  for (const path of [["bank"], ["outputs"], ...GENERATION_FIELDS.map((key) => ["generation", key])])
    if (doc.hasIn(path)) lines[path.join(".")] = c.line(path);
  return { file, bank, outputs, generation, run, models, lines };
}

/** Reads and validates a study file (YAML, or JSON when named `.json`). */
export async function readStudyFile(file: string): Promise<Study> {
  let text: string;
  try {
    text = await readText(file, { follow: true, maxBytes: STUDY_FILE_MAX_BYTES, what: "a study file" });
  } catch (err) {
    if (!(err instanceof FileError)) throw err;
    throw new StudyFileError(file, undefined, undefined, err.message.slice(file.length + 2), { cause: err });
  }
  return parseStudy(text, file);
}
