#!/usr/bin/env node
// npm run bench:report — `hsm report` at the benchmark's scale: three synthetic
// models of 44,416 scored queries each (6,543 facts, 28 stored layers of a
// 46-block model, d = 16 so the stores stay small; the report's size does not
// depend on d), with generations files holding the real prompts. Measures the
// build (wall time, peak memory), the file's size and the part the first view
// reads, then opens it in Debian's chromium (playwright-core, no network):
// time to the load event and to the first contentful paint, and time to open
// a fact. Prints one JSON object.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import { chromium } from "playwright-core";

import { median, timed } from "./bench-util.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const benchDir = join(process.env.HSM_BENCH_DIR ?? join(root, ".bench"), "report");
const outputs = join(benchDir, "outputs");
const bin = join(root, "bin", "hsm.js");
const models = ["model-a", "model-b", "model-c"];
const replicates = process.env.HSM_BENCH_REPLICATES ?? "1000";
const chromiumPath = process.env.HSM_CHROMIUM ?? "/usr/bin/chromium";
const { buildPrompt } = await import(pathToFileURL(join(root, "dist", "bank", "prompt.js")).href);

const hsm = (args) => {
  const r = spawnSync(process.execPath, [bin, ...args], { stdio: ["ignore", "ignore", "inherit"] });
  if (r.status !== 0) throw new Error(`hsm ${args.join(" ")} failed`);
};

// Each model: a fixture at the bank's scale laid out as hsm run writes it, its metrics, and its generations' prompts.
mkdirSync(outputs, { recursive: true });
for (const [i, name] of models.entries()) {
  const store = join(outputs, "hidden", name);
  if (existsSync(join(store, "index.json"))) continue;
  const fx = join(benchDir, `fixture-${name}`);
  hsm(["fixture", fx, "--facts", "6543", "--d", "16", "--layers-total", "46", "--seed", String(i + 1), "--quiet"]);
  mkdirSync(join(outputs, "evaluation"), { recursive: true });
  mkdirSync(join(outputs, "hidden"), { recursive: true });
  renameSync(join(fx, "store"), store);
  renameSync(join(fx, "scored.jsonl"), join(outputs, "evaluation", `${name}.scored.jsonl`));
  const bank = readFileSync(join(fx, "bank.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
  const generations = bank.map((r) =>
    JSON.stringify({
      query_id: r.query_id,
      fact_id: r.fact_id,
      condition_family: r.condition_family,
      model: name,
      prompt: buildPrompt(r),
      raw_response: "",
    }),
  );
  writeFileSync(join(outputs, "evaluation", `${name}.jsonl`), generations.join("\n") + "\n");
  hsm([
    "metrics",
    store,
    "--scored",
    join(outputs, "evaluation", `${name}.scored.jsonl`),
    "--out",
    join(outputs, "metrics", name),
    "--quiet",
  ]);
}

const html = join(benchDir, "report.html");
const build = timed(process.execPath, [bin, "report", outputs, "--out", html, "--bootstrap", replicates, "--quiet"]);
const text = readFileSync(html, "utf8");
const chunkBytes = [
  ...text.matchAll(/<script type="application\/octet-stream" id="chunk-\d+">([^<]*)<\/script>/g),
].reduce((s, m) => s + m[0].length, 0);

const context = await chromium.launchPersistentContext(join(benchDir, `profile-${process.pid}`), {
  executablePath: chromiumPath,
  headless: true,
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
const views = [];
for (let run = 0; run < 3; run++) {
  const page = await context.newPage();
  await page.goto(pathToFileURL(html).href, { waitUntil: "load" });
  const timing = await page.evaluate(`(() => {
    const nav = performance.getEntriesByType("navigation")[0];
    const fcp = performance.getEntriesByName("first-contentful-paint")[0];
    return { load_ms: nav.loadEventEnd, first_contentful_paint_ms: fcp ? fcp.startTime : null };
  })()`);
  const t0 = Date.now();
  await page.locator("#fact-list button").nth(100).click();
  await page.locator("#fact .q").first().waitFor();
  views.push({ ...timing, open_fact_ms: Date.now() - t0 });
  await page.close();
}
await context.close();

console.log(
  JSON.stringify(
    {
      date: new Date().toISOString(),
      models: models.length,
      queries_per_model: 44416,
      stored_layers: 28,
      replicates: Number(replicates),
      build_seconds: build.secs,
      build_peak_mb: Math.round(build.mb),
      file_mb: Number((statSync(html).size / 1e6).toFixed(2)),
      first_view_mb: Number(((Buffer.byteLength(text) - chunkBytes) / 1e6).toFixed(2)),
      load_ms: median(views.map((v) => v.load_ms)),
      first_contentful_paint_ms: median(views.map((v) => v.first_contentful_paint_ms)),
      open_fact_ms: median(views.map((v) => v.open_fact_ms)),
    },
    null,
    2,
  ),
);
