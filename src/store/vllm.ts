/**
 * Adopting the hidden states vLLM's `extract_hidden_states` writes (docs/store.md#adopting-vllm-hidden-state-files):
 * one safetensors file per request, `hidden_states` `[tokens, layers, d]` and `token_ids` `[tokens]`. Each bank row
 * takes its file's last prompt token; vLLM's layer id k (the stream after k blocks) becomes hsm's layer k − 1, and
 * id L, taken before the final norm, is recorded as such. The store is built in a hidden sibling folder and renamed
 * into place, so a failure leaves nothing behind.
 */
import type { FileHandle } from "node:fs/promises";
import { rename, rm } from "node:fs/promises";
import { availableParallelism } from "node:os";
import { dirname, join } from "node:path";

import { mainForwardRows, readBank, type BankRow } from "../bank/bank.js";
import { defaultModelName, UNNAMED } from "../defaults.js";
import { JsonlError, SafetensorsError, StoreError, UsageError } from "../errors.js";
import { fileError, makeWorkFolder, openInput, refuseFilled, refuseInputAsOutput, syncDir } from "../util/fs.js";
import { jsonLines } from "../util/jsonl.js";
import { explainLayers } from "./foreign.js";
import type { Manifest } from "./manifest.js";
import { readExactly, readSafetensorsHeader, type SafetensorsTensor } from "./safetensors.js";
import { StoreWriter, type StoreInit } from "./writer.js";

export interface AdoptVllmOptions {
  /** The query bank the prompts came from (a path, or its rows); the store holds its main-forward rows. */
  bank: string | readonly BankRow[];
  /** The store to write: a folder that does not exist yet, or an empty one. */
  out: string;
  /** vLLM's layer ids, as configured (`eagle_aux_hidden_state_layer_ids`), in any order. */
  layerIds: readonly number[];
  /** The model's decoder block count (its config's `num_hidden_layers`). */
  numLayers: number;
  /** JSONL mapping each query to its file; default: each query's file is `<query_id>.safetensors`. */
  requests?: string;
  /** The model name to record; default: the vLLM folder's name. */
  model?: string;
  /** Files read (and hashed) at once; default the core count. */
  concurrency?: number;
}

/** The hidden-state dtypes read, and the name the manifest's `dtype` gives each. */
const HIDDEN_DTYPES: Readonly<Record<string, string>> = { BF16: "bfloat16", F16: "float16", F32: "float32" };
const TOKEN_DTYPES = ["I64", "I32"];

/** Rows gathered before they are written: whole blocks keep the writes few and the memory bounded. */
const BLOCK_BYTES = 32 << 20;

/** Where one row's states are, as the requests map (or the default naming) says. */
interface Source {
  queryId: string;
  path: string;
  /** The map's line, for errors that concern what it says. */
  where?: string;
  promptTokens?: number;
  promptTokenIds?: number[];
}

/** One file's header, checked: the dtype, the width, and the byte offset of the row to take. */
interface Located {
  dtype: string;
  d: number;
  rowStart: number;
}

/** One stored layer: the column of vLLM's layer axis it comes from and vLLM's id for it. */
interface Column {
  layer: number;
  index: number;
  id: number;
}

/**
 * Writes the store `o.out` from the vLLM hidden-state files in `dir`: one row per main-forward query of the bank,
 * in bank order, each its file's last prompt token, converted exactly to float16. Every file's header is checked
 * before anything is written.
 * @example await adoptVllm("vllm-out", { bank: "bank.jsonl", out: "store", layerIds: [16, 32], numLayers: 32 })
 */
export async function adoptVllm(dir: string, o: AdoptVllmOptions): Promise<Manifest> {
  const columns = planColumns(o.layerIds, o.numLayers);
  const k = o.layerIds.length;
  await refuseInputAsOutput({ name: "--out", path: o.out }, [{ name: "<store>", path: dir }]);
  await refuseFilled(o.out, "the adopted store");
  const bank = typeof o.bank === "string" ? await readBank(o.bank) : o.bank;
  const rows = mainForwardRows(bank);
  if (rows.length === 0) throw new UsageError("The bank has no main-forward rows; there is nothing to adopt");
  const sources = o.requests
    ? await readRequests(o.requests, dir, rows, bank, typeof o.bank === "string" ? o.bank : "given")
    : rows.map((r) => defaultSource(dir, r.query_id));
  const concurrency = Math.max(1, o.concurrency ?? availableParallelism());

  // Every header first: a bad file stops the adoption before the store takes any space.
  const located = await mapLimit(sources, concurrency, (s) => withFile(s, k, async () => undefined));
  const first = located[0]!;
  for (const [i, l] of located.entries()) {
    if (l.dtype !== first.dtype || l.d !== first.d)
      throw new SafetensorsError(
        sources[i]!.path,
        "hidden_states",
        `is ${l.dtype} of width ${l.d}, but ${sources[0]!.path} holds ${first.dtype} of width ${first.d}: ` +
          "the files must come from one model and run",
      );
  }

  const init: StoreInit = {
    model: o.model ?? (defaultModelName(dir) || UNNAMED),
    model_sha256: "",
    num_layers: o.numLayers,
    d_model: first.d,
    layers: columns.map((c) => c.layer),
    layer_rule: explainLayers(
      columns.map((c) => c.layer),
      o.numLayers,
    ).rule,
    // vLLM takes id L before the final norm; the manifest says so, and style names it per layer.
    last_layer_final_norm: false,
    dtype: HIDDEN_DTYPES[first.dtype]!,
    query_ids: rows.map((r) => r.query_id),
    fact_ids: rows.map((r) => r.fact_id),
    condition_families: rows.map((r) => r.condition_family),
    style: {
      name: "vllm",
      layers: columns.map((c) => ({
        layer: c.layer,
        tensor: `hidden_states[:, ${c.index}] (vLLM layer id ${c.id})`,
        how:
          c.id === o.numLayers
            ? "the residual stream after the last block, before the final norm"
            : `the residual stream after ${c.id} blocks`,
      })),
    },
  };
  const parent = dirname(o.out);
  const { dir: temp, forget } = await makeWorkFolder(o.out, "adopting");
  try {
    const writer = await StoreWriter.open(temp, init);
    let manifest: Manifest;
    try {
      await writeRows(writer, sources, columns, k, first, concurrency);
      manifest = await writer.finish(concurrency);
    } finally {
      await writer.close();
    }
    try {
      await rename(temp, o.out);
      await syncDir(parent);
    } catch (err) {
      throw fileError(err, o.out, "write");
    }
    return manifest;
  } catch (err) {
    await rm(temp, { recursive: true, force: true });
    throw err;
  } finally {
    forget();
  }
}

/**
 * The stored layers from vLLM's ids. vLLM gathers the states in block order whatever the configured order, so
 * the file's layer axis holds the ids ascending. Id 0, the embeddings, has no hsm layer and is skipped.
 */
function planColumns(ids: readonly number[], numLayers: number): Column[] {
  if (!Number.isSafeInteger(numLayers) || numLayers < 1)
    throw new UsageError(`Expected a positive integer number of layers but received ${numLayers}`);
  const seen = new Set<number>();
  for (const id of ids) {
    if (!Number.isSafeInteger(id) || id < 0 || id > numLayers)
      throw new UsageError(
        `vLLM layer id ${id} is outside 0…${numLayers}: an id counts the blocks run before the state, ` +
          `from 0 (the embeddings) to ${numLayers} (after the last block)`,
      );
    if (seen.has(id)) throw new UsageError(`vLLM layer id ${id} is listed twice; list each extracted id once`);
    seen.add(id);
  }
  const columns = [...ids]
    .sort((a, b) => a - b)
    .map((id, index) => ({ layer: id - 1, index, id }))
    .filter((c) => c.id > 0);
  if (columns.length === 0)
    throw new UsageError("The layer ids list no block's output (only id 0, the embeddings); there is nothing to store");
  return columns;
}

/** A name that is not a plain file inside the folder. */
const unsafe = (name: string) => name === "" || name === "." || name === ".." || /[/\\\0]/.test(name);

function defaultSource(dir: string, queryId: string): Source {
  const name = `${queryId}.safetensors`;
  if (unsafe(queryId))
    throw new UsageError(
      `Query "${queryId}" cannot name a file in ${dir}; map the queries to their files with --requests`,
    );
  return { queryId, path: join(dir, name) };
}

/** The requests map: one JSONL line per query, naming its file and, where it says, the prompt's length. */
async function readRequests(
  file: string,
  dir: string,
  rows: readonly BankRow[],
  bank: readonly BankRow[],
  bankName: string,
): Promise<Source[]> {
  const fail = (line: number, field: string | undefined, problem: string, cause?: unknown) =>
    new JsonlError(file, line, field, problem, cause === undefined ? undefined : { cause });
  const known = new Set(bank.map((r) => r.query_id));
  const wanted = new Set(rows.map((r) => r.query_id));
  const byQuery = new Map<string, Source & { line: number }>();
  const byPath = new Map<string, number>();
  for await (const { value: v, line } of jsonLines(file, (l, problem, cause) => fail(l, undefined, problem, cause))) {
    if (typeof v.query_id !== "string") throw fail(line, "query_id", "expected the query id as a string");
    const queryId = v.query_id;
    if (!known.has(queryId)) throw fail(line, "query_id", `"${queryId}" is not in the bank ${bankName}`);
    const keys = (["request_id", "file", "hidden_states_path"] as const).filter((k) => v[k] !== undefined);
    if (keys.length !== 1)
      throw fail(line, undefined, "expected exactly one of request_id, file and hidden_states_path to name the file");
    const key = keys[0]!;
    const given = v[key];
    if (typeof given !== "string") throw fail(line, key, `expected a string but found ${JSON.stringify(given)}`);
    // vLLM returns the path it wrote on its own machine: only the file's name is looked up here.
    const name = key === "request_id" ? `${given}.safetensors` : key === "file" ? given : given.split(/[/\\]/).at(-1)!;
    if (unsafe(name)) throw fail(line, key, `${JSON.stringify(given)} does not name a file inside ${dir}`);
    const source: Source & { line: number } = { queryId, path: join(dir, name), where: `${file}:${line}`, line };
    readPromptFields(v, source, (field, problem) => fail(line, field, problem));
    if (!wanted.has(queryId)) continue; // a row the store does not hold (not main-forward)
    const before = byQuery.get(queryId);
    if (before) throw fail(line, "query_id", `maps "${queryId}" again (first on line ${before.line})`);
    const other = byPath.get(source.path);
    if (other !== undefined) throw fail(line, key, `names ${name} again (first on line ${other})`);
    byQuery.set(queryId, source);
    byPath.set(source.path, line);
  }
  const missing = rows.filter((r) => !byQuery.has(r.query_id));
  if (missing.length > 0)
    throw fail(
      0,
      undefined,
      `maps no file for query "${missing[0]!.query_id}" ` +
        `(${missing.length} of the bank's ${rows.length} main-forward rows are missing)`,
    );
  return rows.map((r) => byQuery.get(r.query_id)!);
}

/** `prompt_tokens` (a count) and `prompt_token_ids` (the prompt's ids), optional; where both are given they agree. */
function readPromptFields(
  v: Record<string, unknown>,
  source: Source,
  fail: (field: string, problem: string) => Error,
): void {
  const isId = (x: unknown) => typeof x === "number" && Number.isSafeInteger(x) && x >= 0;
  if (v.prompt_tokens !== undefined) {
    if (!isId(v.prompt_tokens) || (v.prompt_tokens as number) < 1)
      throw fail("prompt_tokens", `expected a positive integer but found ${JSON.stringify(v.prompt_tokens)}`);
    source.promptTokens = v.prompt_tokens as number;
  }
  if (v.prompt_token_ids !== undefined) {
    const ids = v.prompt_token_ids;
    if (!Array.isArray(ids) || ids.length === 0 || !ids.every(isId))
      throw fail("prompt_token_ids", "expected a non-empty list of token ids (non-negative integers)");
    if (source.promptTokens !== undefined && source.promptTokens !== ids.length)
      throw fail("prompt_tokens", `is ${source.promptTokens}, but prompt_token_ids lists ${ids.length} tokens`);
    source.promptTokenIds = ids as number[];
    source.promptTokens = ids.length;
  }
}

/**
 * Opens a source's file, checks its header as a vLLM hidden-state file with `k` layers (and its prompt tokens,
 * where the map gives them), and runs `use` on it; returns where the row is and what `use` gave.
 */
async function withFile<T>(
  s: Source,
  k: number,
  use: (fh: FileHandle, at: Located) => Promise<T>,
): Promise<Located & { value: T }> {
  const { fh, size } = await openInput(s.path, { follow: true });
  try {
    const { tensors } = await readSafetensorsHeader(fh, size, s.path);
    const hidden = need(tensors, "hidden_states", s.path);
    const tokens = need(tensors, "token_ids", s.path);
    if (HIDDEN_DTYPES[hidden.dtype] === undefined)
      throw new SafetensorsError(s.path, "hidden_states.dtype", `is ${hidden.dtype}; expected BF16, F16 or F32`);
    if (hidden.shape.length !== 3 || hidden.shape[0]! < 1 || hidden.shape[2]! < 1)
      throw new SafetensorsError(
        s.path,
        "hidden_states.shape",
        `is ${JSON.stringify(hidden.shape)}; expected [tokens, layers, d] with at least one token`,
      );
    const [n, layers, d] = hidden.shape as [number, number, number];
    if (layers !== k)
      throw new SafetensorsError(
        s.path,
        "hidden_states.shape",
        `holds ${layers} layers, but the layer ids list ${k}: is this the run they were extracted with?`,
      );
    if (!TOKEN_DTYPES.includes(tokens.dtype))
      throw new SafetensorsError(s.path, "token_ids.dtype", `is ${tokens.dtype}; expected I64 or I32`);
    if (tokens.shape.length !== 1 || tokens.shape[0] !== n)
      throw new SafetensorsError(
        s.path,
        "token_ids.shape",
        `is ${JSON.stringify(tokens.shape)}, but hidden_states has ${n} rows: one row per token is required`,
      );
    const prompt = s.promptTokens ?? n;
    if (prompt > n)
      throw new StoreError(
        s.path,
        `holds ${n} tokens, but ${s.where} says the prompt has ${prompt}: is this the query's file?`,
      );
    if (s.promptTokenIds) await checkPromptIds(fh, s, tokens);
    const width = (hidden.end - hidden.start) / (n * layers * d);
    const at: Located = { dtype: hidden.dtype, d, rowStart: hidden.start + (prompt - 1) * layers * d * width };
    return { ...at, value: await use(fh, at) };
  } finally {
    await fh.close();
  }
}

function need(tensors: Map<string, SafetensorsTensor>, name: string, path: string): SafetensorsTensor {
  const t = tensors.get(name);
  if (!t)
    throw new SafetensorsError(path, name, "is missing: a vLLM hidden-state file holds hidden_states and token_ids");
  return t;
}

/** The file's first token ids must be the prompt's, as the map lists them. */
async function checkPromptIds(fh: FileHandle, s: Source, tokens: SafetensorsTensor): Promise<void> {
  const want = s.promptTokenIds!;
  const width = tokens.dtype === "I64" ? 8 : 4;
  const bytes = await readExactly(fh, s.path, tokens.start, want.length * width);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < want.length; i++) {
    const got = width === 8 ? Number(view.getBigInt64(i * 8, true)) : view.getInt32(i * 4, true);
    if (got !== want[i])
      throw new StoreError(
        s.path,
        `token_ids[${i}] is ${got}, but ${s.where} gives prompt token ${want[i]}: is this the query's file?`,
      );
  }
}

/** Reads every source's row in blocks, converts it per layer, and writes it. */
async function writeRows(
  writer: StoreWriter,
  sources: readonly Source[],
  columns: readonly Column[],
  k: number,
  first: Located,
  concurrency: number,
): Promise<void> {
  const { d, dtype } = first;
  const width = dtype === "F32" ? 4 : 2;
  const blockRows = Math.max(1, Math.floor(BLOCK_BYTES / (columns.length * d * 4)));
  for (let r0 = 0; r0 < sources.length; r0 += blockRows) {
    const count = Math.min(blockRows, sources.length - r0);
    // float16 rows are kept as they are; bfloat16 and float32 ones go through float32 to hsm's rounding.
    const half = dtype === "F16" ? columns.map(() => new Uint16Array(count * d)) : undefined;
    const single = half ? undefined : columns.map(() => new Float32Array(count * d));
    await mapLimit(sources.slice(r0, r0 + count), concurrency, async (s, i) => {
      const { value: row } = await withFile(s, k, async (fh, at) => {
        if (at.dtype !== dtype || at.d !== d) throw new StoreError(s.path, "changed while it was being adopted");
        return readExactly(fh, s.path, at.rowStart, k * d * width);
      });
      columns.forEach((c, j) => {
        const from = c.index * d;
        if (half) half[j]!.set(new Uint16Array(row.buffer, from * 2, d), i * d);
        else if (dtype === "F32") single![j]!.set(new Float32Array(row.buffer, from * 4, d), i * d);
        else {
          // bfloat16 is the top half of a float32: widening it is exact.
          const src = new Uint16Array(row.buffer, from * 2, d);
          const dst = new Uint32Array(single![j]!.buffer, i * d * 4, d);
          for (let x = 0; x < d; x++) dst[x] = src[x]! << 16;
        }
      });
    });
    for (const [j, c] of columns.entries()) {
      if (half) await writer.writeRows(c.layer, r0, half[j]!);
      else await writer.writeRowsF32(c.layer, r0, single![j]!);
    }
  }
}

/** `f` over `items`, at most `limit` at a time; results in order. */
async function mapLimit<T, R>(
  items: readonly T[],
  limit: number,
  f: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await f(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}
