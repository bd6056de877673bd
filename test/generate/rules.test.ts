/**
 * The decoding rules of docs/formats.md#decoding, table by table, with the Llama 3
 * tokenizer and hand-written expectations: where generation stops, what
 * `generated_tokens` and `finish_reason` say, and the exact text.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { tokenizerFiles } from "../../src/synthetic/llama.js";
import { answerFields, GreedyRows, readEosIds } from "../../src/generate/rules.js";
import { ModelDirError } from "../../src/model/model-dir.js";
import { PromptTokenizer } from "../../src/model/tokenizer.js";
import { tempDir } from "../helpers/tmp.js";

// Llama 3.1 ids: <|end_of_text|>, <|eot_id|>, a reserved special token, and plain tokens.
const END_OF_TEXT = 128001;
const EOT = 128009;
const RESERVED_5 = 128010;
const PARIS = 12366; // "ĠParis" → " Paris"
const SPACE_DOT = 662; // "Ġ." → " ."
const SPACE = 220; // "Ġ" → " "
const AND = 323; // "Ġand" → " and"
const BYTE_C3 = 127; // "Ã" → the byte 0xC3
const BYTE_A9 = 102; // "©" → the byte 0xA9
const BYTE_E2 = 158; // "â" → the byte 0xE2

const INT = new Set([END_OF_TEXT]);
const LIST = new Set([END_OF_TEXT, EOT]);
const and23 = new Array<number>(23).fill(AND);

let tok: PromptTokenizer;
beforeAll(async () => {
  tok = await PromptTokenizer.load(dirname(tokenizerFiles("llama3.1").tokenizer));
});

describe("answer fields (docs/formats.md#generation-fields)", () => {
  const table: {
    name: string;
    ids: number[];
    eos: Set<number>;
    text: string;
    generated: number;
    finish: "stop" | "length";
  }[] = [
    { name: "EOS as the first token", ids: [END_OF_TEXT], eos: INT, text: "", generated: 1, finish: "stop" },
    {
      name: "EOS as the 24th token",
      ids: [...and23, END_OF_TEXT],
      eos: INT,
      text: " and".repeat(23),
      generated: 24,
      finish: "stop",
    },
    {
      name: "24 tokens without EOS",
      ids: [...and23, PARIS],
      eos: INT,
      text: `${" and".repeat(23)} Paris`,
      generated: 24,
      finish: "length",
    },
    { name: "an EOS from a list", ids: [PARIS, EOT], eos: LIST, text: " Paris", generated: 2, finish: "stop" },
    {
      name: "a special token that is no EOS of an int eos_token_id",
      ids: [PARIS, EOT],
      eos: INT,
      text: " Paris",
      generated: 2,
      finish: "length",
    },
    {
      name: "special tokens in the middle, no clean-up of ' .'",
      ids: [PARIS, RESERVED_5, SPACE_DOT, EOT, PARIS],
      eos: INT,
      text: " Paris . Paris",
      generated: 5,
      finish: "length",
    },
    {
      name: "nothing stripped",
      ids: [SPACE, PARIS, SPACE],
      eos: INT,
      text: " " + " Paris" + " ",
      generated: 3,
      finish: "length",
    },
    {
      name: "a character split across tokens (and a special token between)",
      ids: [BYTE_C3, RESERVED_5, BYTE_A9, END_OF_TEXT],
      eos: INT,
      text: "é",
      generated: 4,
      finish: "stop",
    },
    {
      name: "a character cut off by the EOS",
      ids: [PARIS, BYTE_E2, END_OF_TEXT],
      eos: INT,
      text: " Paris\uFFFD",
      generated: 3,
      finish: "stop",
    },
    {
      name: "two invalid sequences",
      ids: [BYTE_E2, BYTE_C3],
      eos: INT,
      text: "\uFFFD\uFFFD",
      generated: 2,
      finish: "length",
    },
    { name: "only special tokens", ids: [RESERVED_5, EOT], eos: INT, text: "", generated: 2, finish: "length" },
  ];
  for (const row of table) {
    it(row.name, () => {
      expect(answerFields(row.ids, row.eos, (ids) => tok.decode(ids))).toEqual({
        raw_response: row.text,
        generated_tokens: row.generated,
        finish_reason: row.finish,
      });
    });
  }
});

describe("answer fields with Qwen 3's tokenizer", () => {
  it("keeps added tokens that are not marked special as their text, and skips the special ones", async () => {
    const qwen = await PromptTokenizer.load(dirname(tokenizerFiles("qwen3").tokenizer));
    const [PARIS_Q, TOOL_CALL, IM_END, ENDOFTEXT] = [12095, 151657, 151645, 151643];
    expect(
      answerFields([PARIS_Q, TOOL_CALL, PARIS_Q, IM_END], new Set([ENDOFTEXT]), (ids) => qwen.decode(ids)),
    ).toEqual({
      raw_response: " Paris<tool_call> Paris",
      generated_tokens: 4,
      finish_reason: "length",
    });
  });
});

describe("greedy bookkeeping", () => {
  it("stops each row on its first EOS or its 24th token, and ignores later steps of finished rows", () => {
    const g = new GreedyRows(3, LIST, 24);
    expect(g.push([END_OF_TEXT, AND, AND])).toBe(false);
    for (let step = 1; step < 23; step++) expect(g.push([PARIS, AND, AND])).toBe(false);
    expect(g.push([PARIS, EOT, AND])).toBe(true);
    expect(g.ids[0]).toEqual([END_OF_TEXT]);
    expect(g.ids[1]).toEqual([...and23, EOT]);
    expect(g.ids[2]).toEqual([...and23, AND]);
  });
});

describe("EOS ids of a model folder", () => {
  const dir = tempDir("hsm-eos-");
  let n = 0;
  function folder(
    config: object,
    genai?: object,
  ): { dir: string; config: { raw: Record<string, unknown>; path: string } } {
    const d = join(dir, String(n++));
    mkdirSync(d);
    writeFileSync(join(d, "config.json"), JSON.stringify(config));
    if (genai) writeFileSync(join(d, "genai_config.json"), JSON.stringify(genai));
    return { dir: d, config: { raw: config as Record<string, unknown>, path: join(d, "config.json") } };
  }
  const eosOf = async (config: object, genai?: object, fallback: number[] = [9]) => {
    const f = folder(config, genai);
    return [...(await readEosIds(f.dir, f.config, fallback))].sort((a, b) => a - b);
  };

  it("reads an int or a list from config.json, genai_config.json or a text_config", async () => {
    expect(await eosOf({ eos_token_id: 5 })).toEqual([5]);
    expect(await eosOf({ eos_token_id: [5, 7, 8] })).toEqual([5, 7, 8]);
    expect(await eosOf({}, { model: { eos_token_id: [3, 4] } })).toEqual([3, 4]);
    expect(await eosOf({ eos_token_id: 5 }, { model: { eos_token_id: 6 } })).toEqual([5, 6]);
    expect(await eosOf({ text_config: { eos_token_id: [1, 2] } })).toEqual([1, 2]);
  });

  it("falls back to the tokenizer's EOS only when no file names one", async () => {
    expect(await eosOf({})).toEqual([9]);
    expect(await eosOf({ eos_token_id: null })).toEqual([9]);
  });

  it("refuses a value that is not token ids, naming the file", async () => {
    const f = folder({ eos_token_id: ["</s>"] });
    await expect(readEosIds(f.dir, f.config)).rejects.toThrow(ModelDirError);
    await expect(readEosIds(f.dir, f.config)).rejects.toThrow(
      /config\.json: "eos_token_id" must be a token id or a list of token ids/,
    );
    const g = folder({}, { model: { eos_token_id: 1.5 } });
    await expect(readEosIds(g.dir, g.config)).rejects.toThrow(/genai_config\.json: "eos_token_id"/);
  });
});
