/** The scorer's rules, case by case: every label, every rule, non-ASCII answers and aliases. */
import { describe, expect, it } from "vitest";

import {
  extractSpan,
  normalizeAnswer,
  scoreResponse,
  SCORER_RULES,
  type Label,
  type ScorerRule,
} from "../../src/score/scorer.js";

type Case = [
  raw: string,
  answers: string[],
  label: Label,
  scorer: ScorerRule,
  span?: string,
  alias?: string | null,
  review?: boolean,
];

const CASES: Case[] = [
  // exact alias, after span extraction
  [
    " Canada\nExplanation: Agriculture and Agri-Food Canada is federal",
    ["Canada"],
    "correct",
    "exact_alias",
    "Canada",
    "Canada",
  ],
  [" canada", ["Canada"], "correct", "exact_alias", "canada", "Canada"],
  [" CANADA.", ["Canada"], "correct", "exact_alias", "CANADA", "Canada"],
  [' "Canada"', ["Canada"], "correct", "exact_alias", "Canada", "Canada"],
  [" Answer: Canada", ["Canada"], "correct", "exact_alias", "Canada", "Canada"],
  [" The answer is Canada.", ["Canada"], "correct", "exact_alias", "Canada", "Canada"],
  [" Final answer: **Ottawa**", ["Ottawa"], "correct", "exact_alias", "Ottawa", "Ottawa"],
  ["\n\nParis", ["Paris"], "correct", "exact_alias", "Paris", "Paris"],
  [" The Netherlands", ["Netherlands"], "correct", "exact_alias", "The Netherlands", "Netherlands"],
  [
    " United States of America",
    ["United States", "United States of America", "USA"],
    "correct",
    "exact_alias",
    "United States of America",
    "United States of America",
  ],
  [" U.S.A.", ["USA"], "correct", "exact_alias", "U.S.A", "USA"],
  [" (Lisbon)", ["Lisbon"], "correct", "exact_alias", "Lisbon", "Lisbon"],
  [" 1989", ["1989"], "correct", "exact_alias", "1989", "1989"],
  // non-ASCII
  [" São Paulo", ["São Paulo"], "correct", "exact_alias", "São Paulo", "São Paulo"],
  [" SÃO PAULO", ["São Paulo"], "correct", "exact_alias", "SÃO PAULO", "São Paulo"],
  [" München", ["Munich", "München"], "correct", "exact_alias", "München", "München"],
  [" Ｔｏｋｙｏ", ["Tokyo"], "correct", "exact_alias", "Ｔｏｋｙｏ", "Tokyo"], // NFKC folds full-width letters
  [" 東京", ["Tokyo", "東京"], "correct", "exact_alias", "東京", "東京"],
  [" «Москва»", ["Москва", "Moscow"], "correct", "exact_alias", "Москва", "Москва"],
  [" ΑΘΗΝΑ", ["Αθήνα"], "incorrect", "no_alias_match", "ΑΘΗΝΑ"], // accents are kept: Α ≠ Ά
  [" STRASSE", ["Straße"], "correct", "exact_alias", "STRASSE", "Straße"], // full case folding: ß → ss
  [" ΟΔΟΣ", ["οδος"], "correct", "exact_alias", "ΟΔΟΣ", "οδος"], // final ς folds to σ
  [" Zürich", ["Zurich"], "incorrect", "no_alias_match", "Zürich"],
  // alias contained as whole words
  [" It is Canada, of course", ["Canada"], "correct", "alias_in_span", "It is Canada, of course", "Canada"], // no candidate part is another answer
  [" The capital is Ottawa", ["Ottawa"], "correct", "alias_in_span", "The capital is Ottawa", "Ottawa"],
  [
    " I think it was in New York City",
    ["New York City", "York"],
    "correct",
    "alias_in_span",
    "I think it was in New York City",
    "New York City",
  ],
  [" Ottawan cuisine", ["Ottawa"], "incorrect", "no_alias_match", "Ottawan cuisine"], // not a whole word
  [
    " It is located in São Paulo state",
    ["São Paulo"],
    "correct",
    "alias_in_span",
    "It is located in São Paulo state",
    "São Paulo",
  ],
  [
    " Probably the answer would be Tokyo, the capital city of Japan, which is a very large city indeed",
    ["Tokyo"],
    "correct",
    "alias_in_span",
    "Probably the answer would be Tokyo, the capital city of Japan, which is a very large city indeed",
    "Tokyo",
    true,
  ],
  [
    " Probably the answer would be Tokyo which is the capital city of Japan and a very large city",
    ["Tokyo"],
    "correct",
    "alias_in_span",
    "Probably the answer would be Tokyo which is the capital city of Japan and a very large city",
    "Tokyo",
    true,
  ],
  // negation
  [" Not Paris but Lyon", ["Paris"], "ambiguous", "alias_in_span_negated", "Not Paris but Lyon", "Paris", true],
  [" It is never Rome", ["Rome"], "ambiguous", "alias_in_span_negated", "It is never Rome", "Rome", true],
  [" It isn't the Hague", ["The Hague"], "ambiguous", "alias_in_span_negated", "It isn't the Hague", "The Hague", true],
  [" Surely not Chanel No. 5", ["Chanel No. 5"], "ambiguous", "alias_in_span_negated", undefined, "Chanel No. 5", true],
  // a negation that is not right before the alias does not negate it
  [" Paris is not in Germany", ["Paris"], "correct", "alias_in_span", "Paris is not in Germany", "Paris"],
  [" Paris not Lyon", ["Paris"], "correct", "alias_in_span", "Paris not Lyon", "Paris"],
  [
    " It is Chanel No. 5 perfume",
    ["Chanel No. 5"],
    "correct",
    "alias_in_span",
    "It is Chanel No. 5 perfume",
    "Chanel No. 5",
  ], // the alias's own "No"
  [" No, it is Paris", ["Paris"], "correct", "alias_in_span", "No, it is Paris", "Paris"],
  // several candidates
  [" Canada or Mexico", ["Canada"], "ambiguous", "multiple_candidates", "Canada or Mexico", "Canada"],
  [" Canada, Mexico", ["Canada"], "ambiguous", "multiple_candidates", "Canada, Mexico", "Canada"],
  [" Canada/USA", ["Canada"], "ambiguous", "multiple_candidates", "Canada/USA", "Canada"],
  [" Lyon and Paris", ["Paris"], "ambiguous", "multiple_candidates", "Lyon and Paris", "Paris"],
  // An alias holding a separator stays one candidate.
  [
    " Trinidad and Tobago or Jamaica",
    ["Trinidad and Tobago"],
    "ambiguous",
    "multiple_candidates",
    "Trinidad and Tobago or Jamaica",
    "Trinidad and Tobago",
  ],
  [
    " Jamaica, or Trinidad and Tobago",
    ["Trinidad and Tobago"],
    "ambiguous",
    "multiple_candidates",
    "Jamaica, or Trinidad and Tobago",
    "Trinidad and Tobago",
  ],
  [
    " Trinidad and Tobago",
    ["Trinidad and Tobago"],
    "correct",
    "exact_alias",
    "Trinidad and Tobago",
    "Trinidad and Tobago",
  ],
  // ", and" before the last item of a list is one separator.
  [" Lyon, Nice, and Paris", ["Paris"], "ambiguous", "multiple_candidates", "Lyon, Nice, and Paris", "Paris"],
  [
    " Bosnia and Herzegovina, Croatia and Serbia",
    ["Bosnia and Herzegovina", "Croatia"],
    "ambiguous",
    "multiple_candidates",
    "Bosnia and Herzegovina, Croatia and Serbia",
    "Bosnia and Herzegovina",
  ],
  [" Canada or Canada", ["Canada"], "correct", "alias_in_span", "Canada or Canada", "Canada"], // every candidate right
  [
    " USA or United States",
    ["USA", "United States"],
    "correct",
    "alias_in_span",
    "USA or United States",
    "United States",
  ],
  // abstain
  [" I don't know.", ["Canada"], "abstain", "abstain_phrase", "I don't know"],
  [" I do not know the answer", ["Canada"], "abstain", "abstain_phrase", "I do not know the answer"],
  [" I'm not sure", ["Canada"], "abstain", "abstain_phrase", "I'm not sure"],
  [" Unknown", ["Canada"], "abstain", "abstain_phrase", "Unknown"],
  [" I cannot answer that question.", ["Canada"], "abstain", "abstain_phrase", "I cannot answer that question"],
  [" N/A", ["Canada"], "abstain", "abstain_phrase", "N/A"],
  [" Sorry, I can't say.", ["Canada"], "abstain", "abstain_phrase", "Sorry, I can't say"],
  [" ???", ["Canada"], "unparseable", "empty_span", ""],
  // unparseable
  ["", ["Canada"], "unparseable", "empty_span", ""],
  ["\n\n  \n", ["Canada"], "unparseable", "empty_span", ""],
  [" ...", ["Canada"], "unparseable", "empty_span", ""],
  [' ""', ["Canada"], "unparseable", "empty_span", ""],
  // incorrect
  [" Mexico", ["Canada"], "incorrect", "no_alias_match", "Mexico"],
  [" Explanation follows\nCanada", ["Canada"], "incorrect", "no_alias_match", "Explanation follows"], // only the first line counts
  [" The", ["The Hague"], "incorrect", "no_alias_match", "The"], // an article alone is kept, and is not "Hague"
  // an answer that is only an article (a blood type) keeps it
  [" A", ["A"], "correct", "exact_alias", "A", "A"],
  [" Type A", ["A"], "incorrect", "no_alias_match", "Type A"], // in a longer span the article is dropped
  [" A or B", ["A"], "ambiguous", "multiple_candidates", "A or B", "A"],
  [" AB", ["A"], "incorrect", "no_alias_match", "AB"],
];

describe("scorer", () => {
  it.each(CASES.map((c, i) => [i, JSON.stringify(c[0]), c] as const))(
    "case %i: %s",
    (_i, _raw, [raw, answers, label, scorer, span, alias, review]) => {
      const r = scoreResponse(raw, answers);
      expect({ label: r.label, scorer: r.scorer }).toEqual({ label, scorer });
      if (span !== undefined) expect(r.span).toBe(span);
      if (alias !== undefined) expect(r.matched_alias).toBe(alias);
      expect(r.needs_manual_review).toBe(review ?? false);
    },
  );

  it("has a case for every rule and every label", () => {
    expect(CASES.length).toBeGreaterThanOrEqual(40);
    expect(new Set(CASES.map((c) => c[3]))).toEqual(new Set(SCORER_RULES));
    expect(new Set(CASES.map((c) => c[2]))).toEqual(
      new Set(["correct", "incorrect", "ambiguous", "abstain", "unparseable"]),
    );
  });

  it("flags what span extraction did, and a continuation cut by the token limit", () => {
    expect(extractSpan('\n Answer: "Paris".\nMore').flags).toEqual([
      "leading_blank_lines",
      "multi_line",
      "prefix_stripped",
      "wrapper_stripped",
    ]);
    const cut = scoreResponse(" It is located in the city of Paris which", ["Paris"], { truncated: true });
    expect(cut).toMatchObject({ label: "correct", scorer: "alias_in_span", needs_manual_review: true });
    expect(cut.flags).toContain("hit_token_limit");
    // The limit cut the span itself only where nothing follows the span's line; leading blank lines do not count.
    const afterBlank = scoreResponse("\n\nIt is located in the city of Paris which", ["Paris"], { truncated: true });
    expect(afterBlank).toMatchObject({ scorer: "alias_in_span", needs_manual_review: true });
    const finished = scoreResponse(" The capital is Paris\nand more text", ["Paris"], { truncated: true });
    expect(finished).toMatchObject({ label: "correct", scorer: "alias_in_span", needs_manual_review: false });
    expect(finished.flags).toEqual(["multi_line", "hit_token_limit"]);
  });

  it.each([
    // the prefixes are exactly Answer:, A:, Final answer: and The answer is; a dash makes none
    [" A-League", "A-League", []],
    [" A – Z", "A – Z", []],
    [" Answer - Paris", "Answer - Paris", []],
    [" A: Paris", "Paris", ["prefix_stripped"]],
    [" answer： Paris", "Paris", ["prefix_stripped"]],
    [" The answer is: Paris", "Paris", ["prefix_stripped"]],
    [" The answer isotope", "The answer isotope", []],
    // only a pair that wraps the whole span is removed
    [' "Paris" or "Lyon"', '"Paris" or "Lyon"', []],
    [" (Paris) or (Lyon)", "(Paris) or (Lyon)", []],
    [" *Paris* or *Lyon*", "*Paris* or *Lyon*", []],
    [" ‘Paris’ or ‘Lyon’", "‘Paris’ or ‘Lyon’", []],
    [" (Paris (France))", "Paris (France)", ["wrapper_stripped"]],
    [" ((Lisbon))", "Lisbon", ["wrapper_stripped"]],
    [" 'Côte d'Ivoire'", "Côte d'Ivoire", ["wrapper_stripped"]],
    [" ‘Côte d’Ivoire’", "Côte d’Ivoire", ["wrapper_stripped"]],
    [" ***Paris***", "Paris", ["wrapper_stripped"]],
    [" „Berlin“", "Berlin", ["wrapper_stripped"]],
  ])("extracts the span of %j as %j", (raw, span, flags) => {
    expect(extractSpan(raw)).toEqual({ span, flags });
  });

  it("scores the answers a dash prefix or a partial wrapper used to change", () => {
    expect(scoreResponse(" A-League", ["A-League"])).toMatchObject({
      span: "A-League",
      flags: [],
      label: "correct",
      scorer: "exact_alias",
    });
    expect(scoreResponse(' "Paris" or "Lyon"', ["Paris"])).toMatchObject({
      span: '"Paris" or "Lyon"',
      flags: [],
      label: "ambiguous",
      scorer: "multiple_candidates",
      matched_alias: "Paris",
    });
  });

  it("normalizes by NFKC, case folding, dropping articles and punctuation", () => {
    expect(normalizeAnswer("  The  Hague!! ")).toBe("hague");
    expect(normalizeAnswer("ﬁnal")).toBe("final");
    expect(normalizeAnswer("Côte d'Ivoire")).toBe("côte divoire");
    expect(normalizeAnswer("U.S.A.")).toBe("usa");
    expect(normalizeAnswer("A-ha")).toBe("ha");
    expect(normalizeAnswer("A")).toBe("a");
    expect(normalizeAnswer(" The. ")).toBe("the");
    expect(normalizeAnswer("The The")).toBe("the the");
  });
});
