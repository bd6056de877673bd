/**
 * Llama 3.1's tokenizer cut to 1,024 ranks (`--tokenizer llama3.1-1k`): every
 * id below the cut, BOS and the special tokens renumbered after it, texts
 * decoded back to themselves, and, wherever the whole tokenizer's tokens of a
 * word all fall below the cut, exactly the whole tokenizer's ids (BPE applies
 * the same merges in the same order and stops only where the cut begins).
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { PromptTokenizer } from "../../src/model/tokenizer.js";
import { tinyConfig, TOKENIZERS, writeTinyModel } from "../../src/synthetic/llama.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-cut-tokenizer-");
const TEXTS = [
  "Question: What is the capital of France?\nAnswer:",
  "Who wrote Don Quixote? Cervantes, in 1605.",
  "naïve café — 東京 🚀 tab\tand  two spaces",
  "Setting the scene at some length, what is the boiling point of water?",
];

describe("the llama3.1-1k tokenizer", () => {
  it("encodes below the cut, decodes to the text, and agrees with the whole tokenizer where the whole one stays below it", async () => {
    const whole = join(dir, "whole");
    const cut = join(dir, "cut");
    await writeTinyModel(whole, { layers: 1, hidden: 8, heads: 2 });
    await writeTinyModel(cut, { layers: 1, hidden: 8, heads: 2, tokenizer: "llama3.1-1k" });
    const [big, small] = await Promise.all([PromptTokenizer.load(whole), PromptTokenizer.load(cut)]);
    const { vocab, bos, ranks } = TOKENIZERS["llama3.1-1k"];
    // Special tokens keep their order: whole id 128000 + k becomes ranks + k.
    const renumber = (id: number) => id - TOKENIZERS["llama3.1"].bos! + ranks!;
    expect([small.size, small.prefix, small.eosIds]).toEqual([vocab, [bos], big.eosIds.map(renumber)]);
    expect(tinyConfig({ tokenizer: "llama3.1-1k" }).vocab_size).toBe(vocab);
    const json = JSON.parse(readFileSync(join(cut, "tokenizer.json"), "utf8"));
    expect(json.added_tokens[0]).toMatchObject({ id: ranks, content: "<|begin_of_text|>", special: true });
    expect(json.added_tokens.at(-1)).toMatchObject({ id: vocab - 1, content: "<|reserved_special_token_250|>" });
    let agreed = 0;
    let longer = 0;
    for (const text of TEXTS) {
      const ids = small.tokenizer.encode(text, { add_special_tokens: false }).ids as number[];
      expect(Math.max(...ids)).toBeLessThan(ranks!);
      expect(small.tokenizer.decode(ids)).toBe(text);
      expect(ids.length).toBeGreaterThanOrEqual(big.tokenizer.encode(text, { add_special_tokens: false }).ids.length);
      for (const word of text.split(/(?=\s)/)) {
        const want = big.tokenizer.encode(word, { add_special_tokens: false }).ids as number[];
        if (want.every((id) => id < ranks!)) {
          expect(small.tokenizer.encode(word, { add_special_tokens: false }).ids).toEqual(want);
          agreed++;
        } else {
          const got = small.tokenizer.encode(word, { add_special_tokens: false }).ids as number[];
          expect(got.length).toBeGreaterThanOrEqual(want.length);
          expect(got).not.toEqual(want);
          longer++;
        }
      }
    }
    // Both kinds of word occur: those the cut leaves alone and those it splits further.
    expect([agreed >= 8, longer >= 8]).toEqual([true, true]);
    // The special tokens keep their text and their place in the vocabulary.
    const special = "<|begin_of_text|>in<|eot_id|>";
    const hi = big.tokenizer.encode("in", { add_special_tokens: false }).ids as number[];
    expect(hi.every((id) => id < ranks!)).toBe(true);
    expect(small.tokenizer.encode(special, { add_special_tokens: false }).ids).toEqual([bos, ...hi, renumber(128009)]);
  });
});
