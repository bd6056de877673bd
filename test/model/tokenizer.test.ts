/**
 * The tokenizer reads tokenizer.json as HuggingFace's tokenizers do where the
 * JavaScript library departs from them. Each expectation is derived by hand
 * from HuggingFace's rules: a TemplateProcessing entry adds its `ids`;
 * ByteFallback gives one U+FFFD per byte of an invalid run and keeps a BOM;
 * the GPT-2 split's `\s` is Unicode's White_Space; `split_special_tokens` makes
 * special-token text plain, and `remove_space` is a slow tokenizer's option.
 */
import { readFileSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { PromptTokenizer } from "../../src/model/tokenizer.js";
import { tokenizerFiles } from "../../src/synthetic/llama.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-tokenizer-");
let folders = 0;

async function folder(json: unknown, config: Record<string, unknown>): Promise<string> {
  const d = join(dir, `t${folders++}`);
  await mkdir(d, { recursive: true });
  await writeFile(join(d, "tokenizer.json"), JSON.stringify(json));
  await writeFile(join(d, "tokenizer_config.json"), JSON.stringify(config));
  return d;
}

const llama = () => JSON.parse(readFileSync(tokenizerFiles("llama3.1").tokenizer, "utf8")) as Record<string, unknown>;
const llamaConfig = () =>
  JSON.parse(readFileSync(tokenizerFiles("llama3.1").config, "utf8")) as Record<string, unknown>;
const BOS = 128000;
const PROMPT = "Who wrote it?\nAnswer:";

describe("a TemplateProcessing post-processor", () => {
  const template = (single: unknown[], special: Record<string, unknown>) => ({
    type: "TemplateProcessing",
    single,
    pair: single,
    special_tokens: special,
  });
  const A = { Sequence: { id: "A", type_id: 0 } };

  it("adds the ids of its entries, whatever their keys, all of them", async () => {
    const plain = await PromptTokenizer.load(await folder(llama(), llamaConfig()));
    const text = plain.encode(PROMPT).slice(1);
    expect(plain.encode(PROMPT)[0]).toBe(BOS);

    const keyed = llama();
    keyed.post_processor = template([{ SpecialToken: { id: "BOS", type_id: 0 } }, A], {
      BOS: { id: "BOS", ids: [BOS], tokens: ["<|begin_of_text|>"] },
    });
    expect((await PromptTokenizer.load(await folder(keyed, llamaConfig()))).encode(PROMPT)).toEqual([BOS, ...text]);

    const several = llama();
    several.post_processor = {
      type: "Sequence",
      processors: [
        { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
        template(
          [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, A, { SpecialToken: { id: "E", type_id: 0 } }],
          {
            "<|begin_of_text|>": { id: "<|begin_of_text|>", ids: [BOS, 128002], tokens: ["a", "b"] },
            E: { id: "E", ids: [128001], tokens: ["<|end_of_text|>"] },
          },
        ),
      ],
    };
    const t = await PromptTokenizer.load(await folder(several, llamaConfig()));
    expect(t.encode(PROMPT)).toEqual([BOS, 128002, ...text, 128001]);
    // Truncation keeps both ends and counts them in the length.
    const long = t.encode("word".repeat(300) + " " + PROMPT, 20);
    const tail = plain.encode(" " + PROMPT).slice(1);
    expect(long.length).toBe(20);
    expect(long.slice(0, 2)).toEqual([BOS, 128002]);
    expect(long.slice(-1 - tail.length)).toEqual([...tail, 128001]);
  });

  it("is refused, naming the file, where it names a special token its entries do not give", async () => {
    const broken = llama();
    broken.post_processor = template([{ SpecialToken: { id: "BOS", type_id: 0 } }, A], {});
    const d = await folder(broken, llamaConfig());
    await expect(PromptTokenizer.load(d)).rejects.toThrow(
      `${join(d, "tokenizer.json")}: post_processor's TemplateProcessing names the special token "BOS"`,
    );
  });
});

describe("tokenizer_config.json", () => {
  const specialText = "<|begin_of_text|>Who?";

  it("honours split_special_tokens: special-token text in a prompt is plain text", async () => {
    const matched = await PromptTokenizer.load(await folder(llama(), llamaConfig()));
    expect(matched.encode(specialText).slice(0, 2)).toEqual([BOS, BOS]);
    const split = await PromptTokenizer.load(await folder(llama(), { ...llamaConfig(), split_special_tokens: true }));
    const ids = split.encode(specialText);
    expect(ids[0]).toBe(BOS);
    expect(ids.slice(1)).not.toContain(BOS);
    // The text is what its characters encode to: "<|" "begin" … and back.
    expect(split.decode(ids.slice(1))).toBe(specialText);
  });

  it("ignores remove_space, which fast tokenizers do not read", async () => {
    const plain = await PromptTokenizer.load(await folder(llama(), llamaConfig()));
    const spaced = await PromptTokenizer.load(await folder(llama(), { ...llamaConfig(), remove_space: true }));
    expect(spaced.encode("A  b\nAnswer:")).toEqual(plain.encode("A  b\nAnswer:"));
    expect(spaced.decode(spaced.encode("A  b\nAnswer:").slice(1))).toBe("A  b\nAnswer:");
  });
});

/** A SentencePiece-layout tokenizer (Llama 2, Mistral, Gemma): byte tokens <0x00>… at ids 3…258, "a" at 259. */
function sentencePiece() {
  const vocab: Record<string, number> = { "<unk>": 0, "<s>": 1, "</s>": 2 };
  for (let b = 0; b < 256; b++) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`] = 3 + b;
  vocab.a = 259;
  vocab["▁"] = 260;
  const special = (content: string, id: number) => ({
    id,
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: true,
  });
  return {
    version: "1.0",
    added_tokens: [special("<unk>", 0), special("<s>", 1), special("</s>", 2)],
    normalizer: {
      type: "Sequence",
      normalizers: [
        { type: "Prepend", prepend: "▁" },
        { type: "Replace", pattern: { String: " " }, content: "▁" },
      ],
    },
    pre_tokenizer: null,
    post_processor: {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
      pair: [],
      special_tokens: { "<s>": { id: "<s>", ids: [1], tokens: ["<s>"] } },
    },
    decoder: {
      type: "Sequence",
      decoders: [
        { type: "Replace", pattern: { String: "▁" }, content: " " },
        { type: "ByteFallback" },
        { type: "Fuse" },
        { type: "Strip", content: " ", start: 1, stop: 0 },
      ],
    },
    model: { type: "BPE", unk_token: "<unk>", fuse_unk: true, byte_fallback: true, vocab, merges: [] },
  };
}

describe("byte tokens (ByteFallback)", () => {
  it("decode a valid run whole, an invalid run to one U+FFFD per byte, and keep a byte-order mark", async () => {
    const t = await PromptTokenizer.load(
      await folder(sentencePiece(), { bos_token: "<s>", eos_token: "</s>", unk_token: "<unk>" }),
    );
    const b = (byte: number) => 3 + byte;
    const a = 259;
    expect(t.decode([b(0xe5), b(0x8f), b(0xab)])).toBe("叫");
    // HuggingFace's own test of the decoder: <0xE5> <0x8F> a gives "�", "�", "a".
    expect(t.decode([b(0xe5), b(0x8f), a, 2])).toBe("\uFFFD\uFFFDa");
    expect(t.decode([a, b(0xe5), b(0x8f)])).toBe("a\uFFFD\uFFFD");
    // A run is judged whole: a valid "é" followed by an invalid byte is three U+FFFD.
    expect(t.decode([b(0xc3), b(0xa9), b(0xff)])).toBe("\uFFFD\uFFFD\uFFFD");
    expect(t.decode([b(0xef), b(0xbb), b(0xbf), a])).toBe("\uFEFFa");
  });
});

/** GPT-2's byte-to-character map (bytes_to_unicode). */
function byteChars(): string[] {
  const chars: string[] = [];
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    chars.push(String.fromCodePoint(printable ? b : 256 + extra++));
  }
  return chars;
}

describe("a byte-level pre-tokenizer's GPT-2 split", () => {
  it("counts as whitespace what Unicode's White_Space does: U+0085 is, U+FEFF is not", async () => {
    const chars = byteChars();
    const vocab: Record<string, number> = {};
    chars.forEach((c, b) => (vocab[c] = b));
    // Merges that join a space to what follows it: " " + U+FEFF (EF BB BF) → 258, " " + 0xC2 → 259.
    const merges = [
      ["Ġ", "ï"],
      ["Ġï", "»"],
      ["Ġï»", "¿"],
      ["Ġ", "Â"],
    ];
    vocab["Ġï"] = 256;
    vocab["Ġï»"] = 257;
    vocab["Ġï»¿"] = 258;
    vocab["ĠÂ"] = 259;
    vocab["<|endoftext|>"] = 260;
    const json = {
      version: "1.0",
      added_tokens: [
        {
          id: 260,
          content: "<|endoftext|>",
          single_word: false,
          lstrip: false,
          rstrip: false,
          normalized: true,
          special: true,
        },
      ],
      normalizer: null,
      pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
      post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
      decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
      model: {
        type: "BPE",
        vocab,
        merges: merges.map((m) => m.join(" ")),
        continuing_subword_prefix: "",
        end_of_word_suffix: "",
      },
    };
    const t = await PromptTokenizer.load(await folder(json, { eos_token: "<|endoftext|>" }));
    // HuggingFace: "x", " \uFEFF" (U+FEFF is not whitespace, so ` ?[^\s\p{L}\p{N}]+` takes it with its space), "y".
    expect(t.encode("x \uFEFFy")).toEqual([0x78, 258, 0x79]);
    // HuggingFace: "x", " ", "\u0085" (U+0085 is whitespace, so the space stays alone), "y".
    expect(t.encode("x \u0085y")).toEqual([0x78, 0x20, 0xc2, 0x85, 0x79]);
  });
});
