/**
 * Which decoder blocks a store keeps. The rule is an expression in `l` (block
 * index, 0-based) and `L` (number of blocks), evaluated in exact rational
 * arithmetic so that `l/(L-1) >= 0.4` has no floating-point edge: decimals such
 * as 0.4 are read as the fraction 2/5.
 */
import { createRequire } from "node:module";

import type { FactoryFunctionMap, MathJsInstance, MathNode } from "mathjs";

import { DEFAULT_LAYER_RULE } from "../defaults.js";
import { UsageError } from "../errors.js";
import { cutText, quoteValue } from "../util/jsonl.js";

let mathjs: MathJsInstance | undefined;

/** mathjs takes about a second to load, so it is loaded only when a rule must be parsed. */
function math(): MathJsInstance {
  if (!mathjs) {
    const { all, create } = createRequire(import.meta.url)("mathjs") as typeof import("mathjs");
    mathjs = create(all as FactoryFunctionMap, { number: "Fraction" });
  }
  return mathjs;
}

const FUNCTIONS = new Set(["mod", "floor", "ceil", "abs", "min", "max"]);

/** A parsed rule; `test(l, L)` says whether block `l` of `L` is stored. */
export interface LayerRule {
  readonly text: string;
  test(l: number, L: number): boolean;
}

/** Parses a rule, allowing only `l`, `L`, numbers, arithmetic, comparisons, logic and a few functions. */
export function parseLayerRule(text: string): LayerRule {
  const m = math();
  let node: MathNode;
  try {
    node = m.parse(text);
  } catch (err) {
    throw new UsageError(
      `Expected a layer rule such as "${DEFAULT_LAYER_RULE}" but could not parse ${quoteValue(text)}: ${(err as Error).message}`,
    );
  }
  node.traverse((n, _path, parent) => {
    if (n.type === "SymbolNode") {
      const name = (n as unknown as { name: string }).name;
      const isCallee = parent?.type === "FunctionNode" && (parent as unknown as { fn: MathNode }).fn === n;
      if (isCallee ? !FUNCTIONS.has(name) : name !== "l" && name !== "L") {
        throw new UsageError(
          `Layer rule ${quoteValue(text)} uses "${name}"; it may use only l, L, numbers, + - * / ^, comparisons, and/or/not` +
            ` and ${[...FUNCTIONS].join(", ")}`,
        );
      }
    } else if (!["OperatorNode", "ParenthesisNode", "ConstantNode", "FunctionNode", "SymbolNode"].includes(n.type)) {
      throw new UsageError(`Layer rule ${quoteValue(text)} contains a ${n.type}, which is not allowed`);
    }
  });
  const code = node.compile();
  return {
    text,
    test(l: number, L: number): boolean {
      let result: unknown;
      try {
        result = code.evaluate({ l: m.fraction(l), L: m.fraction(L) });
      } catch (err) {
        throw new UsageError(
          `Layer rule ${quoteValue(text)} cannot be evaluated at l = ${l}, L = ${L}: ${(err as Error).message}`,
        );
      }
      if (typeof result !== "boolean") {
        throw new UsageError(
          `Layer rule ${quoteValue(text)} must give true or false, but gives ${cutText(m.format(result))} at l = ${l}, L = ${L}`,
        );
      }
      return result;
    },
  };
}

/**
 * The stored blocks of a model with `L` blocks, ascending.
 * @example selectLayers(46) // [18, 19, …, 45]: 28 layers
 */
export function selectLayers(L: number, rule: string | LayerRule = DEFAULT_LAYER_RULE): number[] {
  if (!Number.isSafeInteger(L) || L < 1)
    throw new UsageError(`Expected a positive integer number of layers but received ${L}`);
  if (L > MAX_BLOCKS)
    throw new UsageError(`Expected at most ${MAX_BLOCKS} decoder blocks but received ${L}; no decoder has more`);
  const out = keptBlocks(L, rule);
  if (out.length === 0) {
    const text = typeof rule === "string" ? rule : rule.text;
    throw new UsageError(
      `The layer rule ${quoteValue(text)} keeps no block of a model with ${L}; a store needs at least one`,
    );
  }
  return out;
}

/** The most decoder blocks a model may have here: far beyond any real decoder (a few hundred at most). */
export const MAX_BLOCKS = 100_000;

function keptBlocks(L: number, rule: string | LayerRule): number[] {
  const out: number[] = [];
  if (rule === DEFAULT_LAYER_RULE) {
    // With one block, l/(L-1) is 0/0; that single block is the model's only state.
    if (L === 1) return [0];
    // l/(L-1) >= 2/5 exactly, in integers.
    for (let l = 0; l < L; l++) if (5 * l >= 2 * (L - 1)) out.push(l);
    return out;
  }
  const parsed = typeof rule === "string" ? parseLayerRule(rule) : rule;
  if (L === 1) return parsed.text === DEFAULT_LAYER_RULE ? [0] : parsed.test(0, 1) ? [0] : [];
  for (let l = 0; l < L; l++) if (parsed.test(l, L)) out.push(l);
  return out;
}
