/**
 * vLLM hidden-state files that cannot be trusted, and requests maps that do not fit the bank: each refused in one
 * line naming the file and the field, before anything is written, and nothing left behind.
 */
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { readBank } from "../../src/bank/bank.js";
import { FileError, JsonlError, SafetensorsError, StoreError, UsageError } from "../../src/errors.js";
import { f16ToF32 } from "../../src/kernels/typescript/float16.js";
import { StoreReader } from "../../src/store/reader.js";
import { adoptVllm } from "../../src/store/vllm.js";
import { writeFixture } from "../../src/synthetic/store.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-vllm-");
const bank = join(dir, "fx", "bank.jsonl");
let queries: string[];
/** Layer ids 2 and 3 of a 3-block model: hsm's layers 1 and 2, the last before the final norm. */
const IDS = [3, 2];
const K = 2;
const D = 4;
const TOKENS = 3;

interface Tensor {
  name: string;
  dtype: string;
  shape: number[];
  data: Uint8Array;
  offsets?: [number, number];
  extra?: Record<string, unknown>;
}

/** A safetensors file built byte by byte; `o` bends the parts a hostile file gets wrong. */
function safetensors(tensors: Tensor[], o: { length?: bigint; header?: string; tail?: number } = {}): Buffer {
  let at = 0;
  const header: Record<string, unknown> = {};
  for (const t of tensors) {
    header[t.name] = {
      dtype: t.dtype,
      shape: t.shape,
      data_offsets: t.offsets ?? [at, at + t.data.length],
      ...t.extra,
    };
    at += t.data.length;
  }
  const text = Buffer.from(o.header ?? JSON.stringify(header));
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(o.length ?? BigInt(text.length));
  return Buffer.concat([length, text, ...tensors.map((t) => t.data), Buffer.alloc(o.tail ?? 0, 7)]);
}

/** float16 states whose value names token t, layer column c and element x: `t + c / 4 + x / 64`, exact in float16. */
function hidden(tokens = TOKENS, k = K): Tensor {
  const bits = new Uint16Array(tokens * k * D);
  for (let i = 0; i < bits.length; i++)
    bits[i] = halfBits(Math.floor(i / (k * D)) + (Math.floor(i / D) % k) / 4 + (i % D) / 64);
  return { name: "hidden_states", dtype: "F16", shape: [tokens, k, D], data: new Uint8Array(bits.buffer) };
}

/** float16 bits of a non-negative value exact in float16 (at most 11 significant bits, normal or zero). */
function halfBits(v: number): number {
  if (v === 0) return 0;
  const e = Math.floor(Math.log2(v));
  return ((e + 15) << 10) | Math.round((v / 2 ** e - 1) * 1024);
}

function tokenIds(ids: number[] = [7, 8, 9]): Tensor {
  return {
    name: "token_ids",
    dtype: "I64",
    shape: [ids.length],
    data: new Uint8Array(new BigInt64Array(ids.map(BigInt)).buffer),
  };
}

let made = 0;
/** A folder of files named `<query_id>.safetensors`, each `file` gives, the first one replaced by `first`. */
function folder(first?: Buffer, file = () => safetensors([hidden(), tokenIds()])): string {
  const src = join(dir, `src${made++}`);
  mkdirSync(src);
  queries.forEach((q, i) => writeFileSync(join(src, `${q}.safetensors`), i === 0 && first ? first : file()));
  return src;
}

/** Adopting `src` fails with `error` and a message naming `path` (with `message` after it); no store, no temp. */
async function refused(src: string, error: new (...a: never[]) => Error, message: string, requests?: string) {
  const out = join(dir, `out${made++}`);
  const run = adoptVllm(src, { bank, out, layerIds: IDS, numLayers: 3, requests });
  await expect(run).rejects.toThrow(error);
  await expect(run).rejects.toThrow(message);
  expect(existsSync(out)).toBe(false);
  expect(readdirSync(dir).filter((n) => n.includes("adopting"))).toEqual([]);
}

beforeAll(async () => {
  await writeFixture(join(dir, "fx"), { facts: 2, d: 8, seed: 3 });
  queries = (await readBank(bank)).filter((r) => r.use_for_main_forward).map((r) => r.query_id);
});

describe("adoptVllm", () => {
  it("takes the last prompt token, skips the embeddings, maps id k to layer k-1, in any id order", async () => {
    const src = folder(undefined, () => safetensors([hidden(TOKENS, 3), tokenIds()]));
    const out = join(dir, "good");
    const manifest = await adoptVllm(src, { bank, out, layerIds: [3, 0, 2], numLayers: 3 });
    expect(manifest).toMatchObject({ layers: [1, 2], num_layers: 3, last_layer_final_norm: false, dtype: "float16" });
    expect(manifest.style!.layers.map((l) => l.tensor)).toEqual([
      "hidden_states[:, 1] (vLLM layer id 2)",
      "hidden_states[:, 2] (vLLM layer id 3)",
    ]);
    const reader = await StoreReader.open(out);
    for (const [layer, c] of [
      [1, 1],
      [2, 2],
    ]) {
      for (const row of [0, queries.length - 1])
        expect(Array.from(await reader.readRowsF32(layer!, row, 1))).toEqual(
          [0, 1, 2, 3].map((x) => TOKENS - 1 + c! / 4 + x / 64),
        );
    }
    await reader.close();
  });

  it("with a map, takes prompt_tokens' last token, checks prompt_token_ids, skips other bank rows", async () => {
    const src = folder();
    const map = join(dir, "map.jsonl");
    const lines = queries.map((q, i) => ({
      query_id: q,
      file: `${q}.safetensors`,
      ...(i === 0 ? { prompt_tokens: 1 } : {}),
    }));
    const other = (await readBank(bank)).find((r) => !r.use_for_main_forward)!.query_id;
    lines.push({ query_id: other, file: "never-opened.safetensors" });
    writeFileSync(map, lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
    const out = join(dir, "mapped");
    await adoptVllm(src, { bank, out, layerIds: IDS, numLayers: 3, requests: map });
    const reader = await StoreReader.open(out);
    expect(Array.from(await reader.readRowsF32(2, 0, 1))).toEqual([0, 1, 2, 3].map((x) => 0 + 1 / 4 + x / 64));
    expect(Array.from(await reader.readRowsF32(2, 1, 1))[0]).toBe(TOKENS - 1 + 1 / 4);
    await reader.close();

    const firstSays = (fields: object) =>
      writeFileSync(
        map,
        queries.map((q, i) => JSON.stringify({ query_id: q, request_id: q, ...(i === 0 ? fields : {}) })).join("\n"),
      );
    const path = join(src, `${queries[0]}.safetensors`);
    firstSays({ prompt_token_ids: [7, 5] });
    await refused(src, StoreError, `${path}: token_ids[1] is 8, but ${map}:1 gives prompt token 5`, map);
    firstSays({ prompt_tokens: 4 });
    await refused(src, StoreError, `${path}: holds 3 tokens, but ${map}:1 says the prompt has 4`, map);
    firstSays({ prompt_tokens: 2, prompt_token_ids: [7] });
    await refused(src, JsonlError, `${map}:1: field "prompt_tokens": is 2, but prompt_token_ids lists 1 tokens`, map);
  });

  it("refuses maps that miss a row, name a file twice or outside the folder, or a query the bank lacks", async () => {
    const src = folder();
    const map = join(dir, "bad-map.jsonl");
    const write = (...lines: object[]) => writeFileSync(map, lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
    write({ query_id: queries[0], file: "../escape.safetensors" });
    await refused(src, JsonlError, `${map}:1: field "file": "../escape.safetensors" does not name a file inside`, map);
    write({ query_id: "query_nowhere", file: "x.safetensors" });
    await refused(src, JsonlError, `${map}:1: field "query_id": "query_nowhere" is not in the bank`, map);
    write({ query_id: queries[0], file: "a.safetensors", request_id: "a" });
    await refused(src, JsonlError, `${map}:1: expected exactly one of request_id, file and hidden_states_path`, map);
    write({ query_id: queries[0], file: "a.safetensors" }, { query_id: queries[1], request_id: "a" });
    await refused(src, JsonlError, `${map}:2: field "request_id": names a.safetensors again (first on line 1)`, map);
    write({ query_id: queries[0], file: `${queries[0]}.safetensors` });
    await refused(
      src,
      JsonlError,
      `${map}: maps no file for query "${queries[1]}" (${queries.length - 1} of the bank's`,
      map,
    );
  });

  it("refuses hostile safetensors files in one line naming the file and the header field", async () => {
    const h = hidden();
    const t = tokenIds();
    const size = (b: Buffer) => b.length;
    const good = safetensors([h, t]);
    const cases: [Buffer, string][] = [
      [Buffer.alloc(5), "length: the file is 5 bytes, too short for one"],
      [
        safetensors([h, t], { length: 5000n }),
        `length: is 5000 bytes, but the file has only ${size(good) - 8} after it`,
      ],
      [safetensors([h, t], { length: 1n << 40n }), "length: is 1099511627776 bytes, more than the 1048576 hsm reads"],
      [safetensors([h, t], { header: '["hidden_states"]' }), "text: does not start with '{'"],
      [safetensors([h, t], { header: '{"hidden_states": ' }), "text: is not valid JSON"],
      [
        safetensors([h, { ...t, offsets: [40, 64] }]),
        "token_ids.data_offsets: start at byte 40 of the data, inside hidden_states: the tensors overlap",
      ],
      [
        safetensors([h, { ...t, offsets: [50, 74] }], { tail: 2 }),
        "token_ids.data_offsets: start at byte 50 of the data, leaving bytes 48…49 unused",
      ],
      [safetensors([{ ...h, dtype: "F17" }, t]), "hidden_states.dtype: expected one of BOOL, U8"],
      [safetensors([{ ...h, dtype: "I16" }, t]), "hidden_states.dtype: is I16; expected BF16, F16 or F32"],
      [safetensors([h, { ...t, dtype: "F64" }]), "token_ids.dtype: is F64; expected I64 or I32"],
      [
        safetensors([{ ...h, shape: [3, 2, 5] }, t]),
        "hidden_states.data_offsets: span 48 bytes, but F16 [3,2,5] needs 60",
      ],
      [safetensors([{ ...h, shape: [4, 3, 2] }, t]), "hidden_states.shape: holds 3 layers, but the layer ids list 2"],
      [safetensors([{ ...h, shape: [24] }, t]), "hidden_states.shape: is [24]; expected [tokens, layers, d]"],
      [
        safetensors([h, tokenIds([7, 8, 9, 10])]),
        "token_ids.shape: is [4], but hidden_states has 3 rows: one row per token",
      ],
      [safetensors([h, { ...t, extra: { scale: 1 } }]), 'token_ids: has the key "scale"'],
      [safetensors([h]), "token_ids: is missing: a vLLM hidden-state file holds hidden_states and token_ids"],
      [
        good.subarray(0, good.length - 5),
        `token_ids.data_offsets: ends at byte ${good.length} of the file, ` +
          `but the file has ${good.length - 5} bytes: it is truncated`,
      ],
      [
        safetensors([h, t], { tail: 3 }),
        `data_offsets: the tensors end at byte ${good.length} of the file, but it has ${good.length + 3} bytes`,
      ],
      [
        safetensors([h, t], { header: JSON.stringify({ __metadata__: { n: 1 } }) }),
        "__metadata__.n: expected a string but found 1",
      ],
    ];
    for (const [bytes, message] of cases) {
      const src = folder(bytes);
      await refused(src, SafetensorsError, `${join(src, `${queries[0]}.safetensors`)}: safetensors header ${message}`);
    }
  });

  it("refuses a missing file, files of two dtypes, bad layer ids and a filled --out folder", async () => {
    const src = folder();
    const missing = join(src, `${queries[1]}.safetensors`);
    rmSync(missing);
    await refused(src, FileError, `${missing}: does not exist`);
    const f32 = new Uint8Array(new Float32Array(TOKENS * K * D).fill(1).buffer);
    const mixed = folder(safetensors([{ ...hidden(), dtype: "F32", data: f32 }, tokenIds()]));
    await refused(mixed, SafetensorsError, "hidden_states: is F16 of width 4, but");
    for (const [ids, message] of [
      [[4, 2], "vLLM layer id 4 is outside 0…3"],
      [[2, 2], "vLLM layer id 2 is listed twice"],
      [[0], "The layer ids list no block's output (only id 0, the embeddings)"],
    ] as const) {
      await expect(adoptVllm(src, { bank, out: join(dir, "x"), layerIds: ids, numLayers: 3 })).rejects.toThrow(message);
    }
    const filled = join(dir, "filled");
    mkdirSync(filled);
    writeFileSync(join(filled, "keep.txt"), "mine");
    await expect(adoptVllm(folder(), { bank, out: filled, layerIds: IDS, numLayers: 3 })).rejects.toThrow(UsageError);
    expect(readdirSync(filled)).toEqual(["keep.txt"]);
  });
});

describe("the float16 of a value", () => {
  it("halfBits, the test's own encoder, agrees with hsm's decoder", () => {
    const bits = new Uint16Array([halfBits(2.265625), halfBits(0.25)]);
    const out = new Float32Array(2);
    f16ToF32(bits, out);
    expect(Array.from(out)).toEqual([2.265625, 0.25]);
  });
});
