#!/usr/bin/env node
// `npm run lint`: ESLint, Prettier's check and clang-format's check, side by side since each uses one core.
// Each one's output is printed whole when it ends; the exit status is 1 if any of them failed.
// `npm run format` (`--write`): Prettier and clang-format rewrite the same files in place.
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const bin = (name) => join(root, "node_modules", ".bin", name);

// Prettier owns the TypeScript, the scripts and the config files; .prettierignore names the exceptions.
const prettierFiles = ["src", "test", "scripts", "bin", "*.{js,ts,json}"];
const cppFiles = "--glob=native/*.{cc,h}";

const write = process.argv.includes("--write");
const jobs = write
  ? [
      ["prettier", bin("prettier"), ["--cache", "--log-level", "warn", "--write", ...prettierFiles]],
      ["clang-format", bin("clang-format"), [cppFiles, "-i"]],
    ]
  : [
      ["eslint", bin("eslint"), ["--cache", "--cache-location", "node_modules/.cache/eslint/", "."]],
      ["prettier", bin("prettier"), ["--cache", "--check", ...prettierFiles]],
      ["clang-format", bin("clang-format"), [cppFiles, "--dry-run", "--Werror"]],
    ];

/** Runs one tool to its end; resolves with its name, exit status, seconds and output. */
function run([name, command, args]) {
  const start = performance.now();
  return new Promise((done) => {
    const child = spawn(command, args, { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
    const out = [];
    child.stdout.on("data", (b) => out.push(b));
    child.stderr.on("data", (b) => out.push(b));
    child.on("error", (e) => done({ name, status: 1, seconds: 0, output: `${e.message}\n` }));
    child.on("close", (status) => {
      const seconds = (performance.now() - start) / 1000;
      done({ name, status: status ?? 1, seconds, output: Buffer.concat(out).toString() });
    });
  });
}

const results = await Promise.all(jobs.map(run));
for (const r of results) {
  if (r.output.trim() !== "") process.stdout.write(r.output.endsWith("\n") ? r.output : `${r.output}\n`);
  const verdict = r.status !== 0 ? "FAILED" : write ? "done" : "passed";
  console.log(`${write ? "format" : "lint"}: ${r.name} ${verdict} (${r.seconds.toFixed(1)} s)`);
}
process.exitCode = results.every((r) => r.status === 0) ? 0 : 1;
