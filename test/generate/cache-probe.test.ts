/**
 * The added cache's probe decides on the model's greedy tokens, not on bit
 * equality with recomputation: a difference at a near tie of the recomputed
 * logits (a token within 1e-4 × max(1, |top logit|) of the top one) is
 * accepted, any other refuses the cache with the step, the row and the gap.
 * The logits come from the graph as exported, checked against the float64
 * reference; the near tie is made exact by a duplicated LM head row.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";

import { beforeAll, describe, expect, it } from "vitest";

import { cacheDeparture, exportedLogits } from "../../src/generate/cache-probe.js";
import type { Decoders } from "../../src/generate/workers.js";
import { buildLlamaOnnx, tinyConfig, tinyWeights } from "../../src/synthetic/llama.js";
import { referenceLogits } from "../helpers/llama-reference.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-cache-probe-");
const rule = { size: 8, breaks: [], sameLength: false };

/** Decoders returning fixed tokens: `cached` with the cache, `recomputed` without. */
function fixed(cached: number[][], recomputed: number[][]): Decoders {
  return { parallel: 1, decode: async (_p, withCache) => (withCache ? cached : recomputed), close: async () => {} };
}

describe("the added cache's probe", () => {
  const o = { layers: 2, hidden: 32, heads: 4, seed: 5 };
  const c = tinyConfig(o);
  const w = tinyWeights(o);
  const prompt = [3, 17, 42, 8, 99];
  const d = c.hidden_size;
  let top = 0;
  let twin = 0;
  let far = 0;
  let reference: Float64Array;
  const file = join(dir, "model.onnx");

  beforeAll(() => {
    const first = referenceLogits(c, w, prompt);
    for (let v = 0; v < first.length; v++) {
      if (first[v]! > first[top]!) top = v;
      if (first[v]! < first[far]!) far = v;
    }
    twin = (top + 1) % c.vocab_size === far ? (top + 2) % c.vocab_size : (top + 1) % c.vocab_size;
    // The twin's LM head row is the top token's: their logits tie exactly, whatever the hidden state.
    w.lmHead.copyWithin(twin * d, top * d, (top + 1) * d);
    reference = referenceLogits(c, w, prompt);
    writeFileSync(file, buildLlamaOnnx(c, w, false));
  });

  it("reads the exported graph's logits: the float64 reference's, the twins tied", async () => {
    const logits = await exportedLogits(file, { threads: 1 }, { positions: true, int32: [] })(prompt);
    expect(logits.length).toBe(c.vocab_size);
    for (let v = 0; v < c.vocab_size; v++) expect(Math.abs(logits[v]! - reference[v]!)).toBeLessThan(1e-3);
    expect(logits[twin]).toBe(logits[top]);
  });

  it("accepts a cache whose token departs at a near tie, and refuses one that departs beyond it, with the gap", async () => {
    const logitsOf = exportedLogits(file, { threads: 1 }, { positions: true, int32: [] });
    const tokens = [prompt, [...prompt, 5, 6]];
    // Row 0 (the shortest prompt) takes the top token's twin at new token 2; after it the rows part for good.
    const seen: number[][] = [];
    const spy = async (p: readonly number[]) => (seen.push([...p]), logitsOf(p.slice(0, prompt.length)));
    const tied = fixed(
      [
        [11, twin, 1, 2],
        [7, 7, 7, 7],
      ],
      [
        [11, top, 4, 4],
        [7, 7, 7, 7],
      ],
    );
    expect(await cacheDeparture(tied, tokens, rule, spy)).toBeUndefined();
    // The recomputed prefix: the prompt and the tokens both agreed on.
    expect(seen).toEqual([[...prompt, 11]]);

    const wrong = fixed(
      [
        [11, 12, 13, 14],
        [7, far, 7, 7],
      ],
      [
        [11, 12, 13, 14],
        [7, top, 7, 7],
      ],
    );
    const refused = await cacheDeparture(wrong, tokens, rule, async (p) => logitsOf(p.slice(0, prompt.length)));
    const m =
      /^prompt of 7 tokens \(row 1 of a batch of 2\), new token 2: (\d+) with the cache, (\d+) recomputing; recomputed logits (\S+) apart, margin (\S+)$/.exec(
        refused ?? "",
      );
    expect(m, refused).not.toBeNull();
    expect([Number(m![1]), Number(m![2])]).toEqual([far, top]);
    expect(Number(m![3])).toBeCloseTo(reference[top]! - reference[far]!, 2);
    expect(Number(m![4])).toBeCloseTo(1e-4 * Math.max(1, Math.abs(reference[top]!)), 6);
  });

  it("refuses a cache whose rows end at another length, and one that fails, saying so", async () => {
    const logitsOf = async () => new Float32Array(4);
    expect(await cacheDeparture(fixed([[1, 2]], [[1, 2, 3]]), [prompt], rule, logitsOf)).toBe(
      "prompt of 5 tokens (row 0 of a batch of 1), new token 3: none with the cache, 3 recomputing",
    );
    const failing: Decoders = {
      parallel: 1,
      decode: async () => {
        throw new Error("Concat: shapes differ\nmore");
      },
      close: async () => {},
    };
    expect(await cacheDeparture(failing, [prompt], rule, logitsOf)).toBe("it fails: Concat: shapes differ");
  });
});
