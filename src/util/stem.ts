/**
 * Names become file and folder names: the one rule that maps a name the user
 * gave (a model, a benchmark, a developer) to a path stem. The stem is the name
 * itself when the name is plain; otherwise it is a readable, safe version of it
 * with a short hash of the name, so that two different names never share a
 * stem. The name itself is kept, as given, in every record.
 */
import { createHash } from "node:crypto";

import { UsageError } from "../errors.js";

/** The characters a stem keeps; every run of others becomes one `_`. */
const UNSAFE_RUN = /[^A-Za-z0-9._+-]+/g;
/** Characters no name may hold (C0 and C1 controls): they would garble the tables and logs that print it. */
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
/** The most characters of the name a stem keeps before its hash. */
export const STEM_MAX_LENGTH = 64;
/** Hex digits of the name's sha256 added to a stem that is not the name itself. */
const HASH_DIGITS = 8;

/**
 * What is wrong with `name` as a name (`what` says which: a model name, a
 * developer …), or undefined when nothing is: it must hold a visible
 * character and no control character. Lower-case, for a line's field error.
 * @example nameProblem("") // 'expected a model name with a visible character but received ""'
 */
export function nameProblem(name: string, what = "model name"): string | undefined {
  if (name.trim() === "") return `expected a ${what} with a visible character but received ${JSON.stringify(name)}`;
  if (CONTROL.test(name)) return `expected a ${what} without control characters but received ${JSON.stringify(name)}`;
  return undefined;
}

/** Refuses, as a UsageError (exit status 2), a name {@link nameProblem} finds wrong. */
export function checkName(name: string, what = "model name"): void {
  const problem = nameProblem(name, what);
  if (problem) throw new UsageError(problem.charAt(0).toUpperCase() + problem.slice(1));
}

/**
 * The path stem of `name`: the name itself when it is made of `A–Z a–z 0–9 . _
 * + -` only, does not start with `.`, and is at most 64 characters long; else
 * the name with every run of other characters replaced by `_`, a leading `.`
 * guarded by a `_` before it, cut to 64 characters, then `-` and the first 8 hex
 * digits of the sha256 of the name's UTF-8 bytes. A name that is empty, only
 * white space, or holds a control character is a UsageError (`what` names it).
 * @example pathStem("meta-llama/Llama-3.1-8B") // "meta-llama_Llama-3.1-8B-" + 8 hex digits
 */
export function pathStem(name: string, what = "model name"): string {
  checkName(name, what);
  let stem = name.replace(UNSAFE_RUN, "_");
  if (stem.startsWith(".")) stem = `_${stem}`;
  if (stem.length > STEM_MAX_LENGTH) stem = stem.slice(0, STEM_MAX_LENGTH);
  if (stem === name) return stem;
  return `${stem}-${createHash("sha256").update(name, "utf8").digest("hex").slice(0, HASH_DIGITS)}`;
}
