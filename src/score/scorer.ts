/**
 * Scoring a generation against the bank's gold answer and aliases. The rules
 * are named, and each scored row says which one decided (`scorer`):
 *
 * 1. Span: the first non-blank line of the continuation, with an answer prefix
 *    ("Answer:", "A:", "The answer is", "Final answer:") removed, quotes or
 *    brackets that wrap the whole span removed, and trailing punctuation removed.
 * 2. Comparison form: Unicode NFKC, case folded, articles (a, an, the) dropped
 *    unless nothing else is left, punctuation dropped (periods and apostrophes join, others separate),
 *    whitespace collapsed.
 * Then, in order, the first rule that applies:
 * - `empty_span` → unparseable: nothing is left of the span.
 * - `abstain_phrase` → abstain: a refusal or don't-know answer.
 * - `exact_alias` → correct: the span equals an alias.
 * - `multiple_candidates` → ambiguous: the span lists candidates ("Canada or
 *   Mexico", "Canada, Mexico") and one of them is an alias but not all are.
 * - `alias_in_span_negated` → ambiguous, needs review: an alias occurs as whole
 *   words right after a negation word ("not Paris").
 * - `alias_in_span` → correct: an alias occurs in the span as whole words.
 * - `no_alias_match` → incorrect.
 * `needs_manual_review` is set where a rule was unsure: a negated match, a long
 * span (over 12 words) decided by containment or by no match, or a containment
 * match in a span cut off by the token limit (the continuation's last line: a
 * line break after the span means the limit cut a later line).
 */

import { caseFold } from "./case-fold.js";
import type { Label } from "./labels.js";

export type { Label };

/**
 * A span of more words than this is long: an answer is a name or a short
 * phrase, so a longer span is likely an explanation, and a match or a miss in it needs review.
 */
const LONG_SPAN_WORDS = 12;

export const SCORER_RULES = [
  "empty_span",
  "abstain_phrase",
  "exact_alias",
  "multiple_candidates",
  "alias_in_span_negated",
  "alias_in_span",
  "no_alias_match",
] as const;
export type ScorerRule = (typeof SCORER_RULES)[number];

export interface ScoreResult {
  span: string;
  flags: string[];
  label: Label;
  matched_alias: string | null;
  scorer: ScorerRule;
  needs_manual_review: boolean;
}

/**
 * The answer prefixes, exactly: "Answer:", "A:", "Final answer:" (a colon, ASCII or full-width, is part of them; a
 * dash is not, or "A-League" would lose its "A") and "The answer is" (with or without a colon).
 */
const PREFIX = /^(?:final\s+answer|answer|a)\s*[:：]\s*|^the\s+answer\s+is(?:\s*[:：]\s*|\s+)/iu;
const WRAPPERS: [string, string][] = [
  ['"', '"'],
  ["'", "'"],
  ["“", "”"],
  ["‘", "’"],
  ["«", "»"],
  ["„", "“"],
  ["(", ")"],
  ["[", "]"],
  ["*", "*"],
  ["**", "**"],
  ["`", "`"],
];
const TRAILING = /[\s.,;:!?。、，；：！？…]+$/u;
const ARTICLES = new Set(["a", "an", "the"]);
const NEGATIONS = new Set(["not", "never", "no", "isn't", "isnt", "wasn't", "wasnt", "neither", "nor"]);
const ABSTAIN = [
  /\bi\s+(?:do\s+not|don'?t|dont)\s+know\b/iu,
  /\bi\s*(?:am|'m)\s+not\s+(?:sure|certain)\b/iu,
  /\bnot\s+sure\b/iu,
  /\bno\s+idea\b/iu,
  /\bi\s+(?:cannot|can'?t|can\s+not)\s+(?:answer|say|tell|determine|know|provide|help)\b/iu,
  /\b(?:unknown|unsure|uncertain)\b/iu,
  /\bcannot\s+be\s+determined\b/iu,
  /\bi\s+(?:have\s+no|lack)\s+(?:information|knowledge|data)\b/iu,
  /^n\/?a$/iu,
];
/** A conjunction (after white space or a comma: ", or" is one separator) or a punctuation separator. */
const SEPARATORS = /(?:\s*,\s*|\s+)(?:or|and|and\/or)\s+|\s*[,;/|]\s*/iu;

/**
 * The candidates a span lists, in comparison form: its pieces between
 * separators, where a run of pieces that is an alias with its separators
 * ("Trinidad and Tobago", "Bosnia and Herzegovina") stays one candidate,
 * the longest such run first.
 */
function candidates(span: string, aliases: readonly { norm: string }[]): string[] {
  // Split with the separators kept: pieces at even indices, separators between them.
  const pieces = span.split(new RegExp(`(${SEPARATORS.source})`, "iu"));
  const isAlias = (text: string) => aliases.some((a) => a.norm === text);
  const out: string[] = [];
  for (let i = 0; i < pieces.length; i += 2) {
    let end = i;
    for (let j = pieces.length - 1; j > i; j -= 2) {
      if (isAlias(normalizeAnswer(pieces.slice(i, j + 1).join("")))) {
        end = j;
        break;
      }
    }
    const candidate = normalizeAnswer(pieces.slice(i, end + 1).join(""));
    if (candidate) out.push(candidate);
    i = end;
  }
  return out;
}

/**
 * The comparison form: NFKC, case folded (full folding, as Python's
 * `str.casefold`: "Straße" and "STRASSE" are one), no articles (unless they are all
 * there is: "A" stays "a") or punctuation, single
 * spaces. Periods and apostrophes join what they separate ("U.S.A." → "usa");
 * other punctuation separates words.
 */
export function normalizeAnswer(text: string): string {
  const folded = caseFold(text.normalize("NFKC"));
  const words = folded
    .replace(/[.'’]/gu, "")
    .replace(/[\p{P}\p{S}]+/gu, " ")
    .split(/\s+/u)
    .filter(Boolean);
  // An answer that is only articles ("A", a blood type) keeps them: dropped, it would be no answer at all.
  const content = words.filter((w) => !ARTICLES.has(w));
  return (content.length > 0 ? content : words).join(" ");
}

/** Extracts the answer span from a raw continuation; returns it with the flags of what was done. */
export function extractSpan(raw: string): { span: string; flags: string[] } {
  const flags: string[] = [];
  const lines = raw.split(/\r?\n/u);
  const index = lines.findIndex((l) => l.trim() !== "");
  if (index < 0) return { span: "", flags: ["blank_response"] };
  if (index > 0) flags.push("leading_blank_lines");
  if (lines.length > index + 1) flags.push("multi_line");
  let span = lines[index]!.trim();
  const withoutPrefix = span.replace(PREFIX, "");
  if (withoutPrefix !== span) {
    flags.push("prefix_stripped");
    span = withoutPrefix.trim();
  }
  span = span.replace(TRAILING, "");
  for (let changed = true; changed;) {
    changed = false;
    for (const [open, close] of WRAPPERS) {
      if (wraps(span, open, close)) {
        span = span
          .slice(open.length, span.length - close.length)
          .trim()
          .replace(TRAILING, "");
        if (!flags.includes("wrapper_stripped")) flags.push("wrapper_stripped");
        changed = true;
      }
    }
  }
  return { span, flags };
}

/** An apostrophe between letters or digits ("d'Ivoire", "O’Brien") is part of a word, not a quote. */
const IN_WORD_APOSTROPHE = /(?<=[\p{L}\p{N}])['’](?=[\p{L}\p{N}])/gu;

/**
 * Whether `open` … `close` wraps the whole of `span`: the mark that opens it is the one that closes at its end, so
 * '"Paris" or "Lyon"' and "(a) or (b)" are not wrapped. Inside, the same quote or emphasis mark may not appear, and
 * brackets must pair up; an apostrophe inside a word is not a quote.
 */
function wraps(span: string, open: string, close: string): boolean {
  if (span.length < open.length + close.length || !span.startsWith(open) || !span.endsWith(close)) return false;
  const inner = span.slice(open.length, span.length - close.length).replace(IN_WORD_APOSTROPHE, "");
  if (open === close) return !inner.includes(open);
  let depth = 0;
  for (let i = 0; i < inner.length; i++) {
    if (inner.startsWith(open, i)) depth++;
    else if (inner.startsWith(close, i) && --depth < 0) return false;
  }
  return depth === 0;
}

function containsWords(haystack: string, needle: string): boolean {
  if (!needle) return false;
  return ` ${haystack} `.includes(` ${needle} `);
}

/**
 * Whether `alias` (as words) occurs in `words` right after a negation word ("not Paris", "isn't Paris"). Only the
 * word before counts: a negation after the alias negates what follows it ("Paris not Lyon"), one further away
 * negates something else ("Paris is not in Germany"), and the alias's own words ("Chanel No. 5") are not outside it.
 */
function negatedAt(words: readonly string[], alias: readonly string[]): boolean {
  for (let i = 1; i + alias.length <= words.length; i++) {
    if (NEGATIONS.has(words[i - 1]!) && alias.every((w, k) => words[i + k] === w)) return true;
  }
  return false;
}

/**
 * Scores one continuation against the gold answers (the first is the gold
 * answer, the rest its aliases).
 * @example scoreResponse(" Canada\nExplanation: …", ["Canada"]).label // "correct"
 */
export function scoreResponse(
  raw: string,
  answers: readonly string[],
  options: { truncated?: boolean } = {},
): ScoreResult {
  const { span, flags } = extractSpan(raw);
  if (options.truncated) flags.push("hit_token_limit");
  const norm = normalizeAnswer(span);
  const aliases = answers.map((a) => ({ alias: a, norm: normalizeAnswer(a) })).filter((a) => a.norm !== "");
  const words = norm ? norm.split(" ") : [];
  const long = words.length > LONG_SPAN_WORDS;
  const result = (label: Label, scorer: ScorerRule, matched: string | null, review = false): ScoreResult => ({
    span,
    flags,
    label,
    matched_alias: matched,
    scorer,
    needs_manual_review: review,
  });
  if (norm === "") return result("unparseable", "empty_span", null);
  if (ABSTAIN.some((re) => re.test(span))) return result("abstain", "abstain_phrase", null);
  const exact = aliases.find((a) => a.norm === norm);
  if (exact) return result("correct", "exact_alias", exact.alias);
  // Several candidates, one of them right: "Canada or Mexico".
  const parts = candidates(span, aliases);
  if (parts.length > 1) {
    const hits = parts.filter((p) => aliases.some((a) => a.norm === p));
    if (hits.length > 0 && hits.length < parts.length) {
      const alias = aliases.find((a) => hits.includes(a.norm))!;
      return result("ambiguous", "multiple_candidates", alias.alias);
    }
  }
  // Longest alias first, so "New York City" wins over "York".
  const byLength = [...aliases].sort((x, y) => y.norm.length - x.norm.length);
  const contained = byLength.find((a) => containsWords(norm, a.norm));
  if (contained) {
    const negated = byLength.find((a) => negatedAt(words, a.norm.split(" ")));
    if (negated) return result("ambiguous", "alias_in_span_negated", negated.alias, true);
    // A line break after the span's line means the limit cut a later line, not the span.
    const spanCut = Boolean(options.truncated) && !flags.includes("multi_line");
    return result("correct", "alias_in_span", contained.alias, long || spanCut);
  }
  return result("incorrect", "no_alias_match", null, long);
}
