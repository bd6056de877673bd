#!/usr/bin/env node
// Checks the form of every commit message after BASE on the current branch: a subject of at most 72 characters,
// a blank line, then a body that says why. Merge commits are exempt; commits up to BASE are history.
// Usage: node scripts/check-commits.mjs [base-revision]
import { execFileSync } from "node:child_process";

/** The first commit checked is this one's child: the last commit whose message predates the rule. */
const BASE = "57ec217ee9d107c76117cd36a217bc58f25ca49e";
const MAX_SUBJECT = 72;

const git = (...args) => execFileSync("git", args, { encoding: "utf8", maxBuffer: 256 * 1024 * 1024 });

/** What is wrong with one commit message, as short phrases; empty when nothing is. */
function problems(message) {
  const lines = message.replace(/\s+$/, "").split("\n");
  const subject = lines[0] ?? "";
  const found = [];
  if (subject.trim() === "") found.push("the subject line is empty");
  const length = [...subject].length;
  if (length > MAX_SUBJECT) found.push(`the subject is ${length} characters (at most ${MAX_SUBJECT})`);
  if (lines.length > 1 && lines[1].trim() !== "") found.push("no blank line between the subject and the body");
  if (lines.slice(1).every((line) => line.trim() === "")) found.push("there is no body");
  return found;
}

const base = process.argv[2] ?? BASE;
try {
  git("rev-parse", "--verify", "--quiet", `${base}^{commit}`);
  git("merge-base", "--is-ancestor", base, "HEAD");
} catch {
  console.error(
    `check-commits: ${base} is not an ancestor of HEAD in this clone; ` +
      "fetch the full history (git fetch --unshallow) or name another base",
  );
  process.exit(2);
}
const shortBase = git("rev-parse", "--short", base).trim();

const commits = git("log", "-z", "--no-merges", "--format=%h%n%B", `${base}..HEAD`)
  .split("\0")
  .filter((entry) => entry !== "");
let bad = 0;
for (const entry of commits) {
  const newline = entry.indexOf("\n");
  const hash = entry.slice(0, newline);
  const message = entry.slice(newline + 1);
  const found = problems(message);
  if (found.length === 0) continue;
  bad++;
  const subject = message.split("\n")[0] ?? "";
  const shown = [...subject].length > 50 ? `${[...subject].slice(0, 47).join("")}...` : subject;
  console.error(`check-commits: ${hash} "${shown}": ${found.join("; ")}`);
}
if (bad > 0) {
  console.error(
    `check-commits: ${bad} of ${commits.length} commits after ${shortBase} need a subject of at most ` +
      `${MAX_SUBJECT} characters, a blank line, and a body (reword them with git rebase -i)`,
  );
  process.exit(1);
}
console.log(`check-commits: ${commits.length} commits after ${shortBase}, each a short subject and a body`);
