/**
 * The report in a real browser: Debian's chromium (/usr/bin/chromium, no
 * browser download) driven by playwright-core, on a report of three generated
 * models run by runStudy over the demo bank. Checks that no request leaves the
 * page, that every chart has each model's line and band, that choosing two
 * models fills the comparison with the precomputed values (signs flipped when
 * B comes first), that opening a fact shows every model's answer, and that the
 * console stays clean. Screenshots go under the test's temporary folder (and,
 * with HSM_KEEP_SCREENSHOTS=DIR, are copied there). Without chromium the test
 * is skipped, unless HSM_REQUIRE_BROWSER=1 (as in CI) makes that a failure.
 */
import { cpSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import { chromium, type BrowserContext, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { writeTinyModel } from "../../src/synthetic/llama.js";
import { compareModels } from "../../src/report/compare.js";
import { writeReport } from "../../src/report/build.js";
import { runStudy } from "../../src/pipeline/study.js";
import { tempDir } from "../helpers/tmp.js";

const CHROMIUM = "/usr/bin/chromium";
const present = existsSync(CHROMIUM);
if (!present && process.env.HSM_REQUIRE_BROWSER === "1")
  throw new Error(`HSM_REQUIRE_BROWSER=1 but ${CHROMIUM} is missing (apt-get install chromium)`);

const BANK = fileURLToPath(new URL("../../data/demo-bank.jsonl", import.meta.url));
/** Three blocks: the default layer rule stores layers 1 and 2, so every chart has a line, not a point. */
const TINY = { layers: 3, hidden: 32, heads: 2, kvHeads: 1 } as const;
const MODELS = ["tiny-a", "tiny-b", "tiny-c"];
const REPLICATES = 200;
const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

const dir = tempDir("hsm-report-browser-");
const outputs = join(dir, "out");
const shots = join(dir, "screenshots");
const report = join(dir, "report.html");

describe.skipIf(!present)("the report in chromium", () => {
  let context: BrowserContext;
  let page: Page;
  const requests: string[] = [];
  const problems: string[] = [];

  beforeAll(async () => {
    const lines = MODELS.map((name, i) => `  - { name: ${name}, model_dir: models/${i} }`);
    for (let i = 0; i < MODELS.length; i++)
      await writeTinyModel(join(dir, "models", String(i)), { ...TINY, seed: i + 1 });
    writeFileSync(
      join(dir, "study.yaml"),
      `bank: ${BANK}\noutputs: out\nrun: { batch_size: 8, threads: 1 }\nmodels:\n${lines.join("\n")}\n`,
    );
    expect((await runStudy(join(dir, "study.yaml"))).ok).toBe(true);
    await writeReport(outputs, { out: report, replicates: REPLICATES });
    mkdirSync(shots);
    context = await chromium.launchPersistentContext(join(dir, "profile"), {
      executablePath: CHROMIUM,
      headless: true,
      args: FLAGS,
      viewport: { width: 1200, height: 900 },
    });
    await context.route("**/*", (route) => {
      requests.push(route.request().url());
      return route.request().url() === pathToFileURL(report).href ? route.continue() : route.abort();
    });
    page = await context.newPage();
    page.on(
      "console",
      (m) => (m.type() === "error" || m.type() === "warning") && problems.push(`${m.type()}: ${m.text()}`),
    );
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    page.on("request", (r) => requests.push(r.url()));
    await page.goto(pathToFileURL(report).href);
    await page.screenshot({ path: join(shots, "first-view.png") });
  }, 300_000);

  afterAll(async () => {
    await context?.close();
    if (process.env.HSM_KEEP_SCREENSHOTS && existsSync(shots))
      cpSync(shots, process.env.HSM_KEEP_SCREENSHOTS, { recursive: true });
  });

  it("shows accuracy for every model and family", async () => {
    const header = await page
      .locator("h2#accuracy ~ table")
      .first()
      .locator("tr")
      .first()
      .locator("th")
      .allTextContents();
    expect(header).toEqual(["family", ...MODELS]);
    const families = await page.locator("h2#accuracy ~ table").first().locator("tr td:first-child").allTextContents();
    expect(families).toEqual([
      "anchor",
      "distractor",
      "paraphrase",
      "reorder",
      "reverse",
      "translation",
      "typo",
      "all",
    ]);
    // Random weights answer nothing right: 0 of n with Wilson's upper end above 0.
    expect(
      await page.locator("h2#accuracy ~ table").first().locator("tr").nth(1).locator("td").nth(1).textContent(),
    ).toMatch(/^0\.0000 \[0\.0000, 0\.1\d{3}\] 0\/20$/);
  });

  it("draws every ISS chart with each model's line and band, and says why KTS has none", async () => {
    const charts = page.locator("figure.chart");
    const families = await charts.evaluateAll((figs) => figs.map((f) => f.getAttribute("data-family")));
    expect(families).toEqual(["distractor", "paraphrase", "reorder", "translation", "typo", "all"]);
    for (let i = 0; i < families.length; i++) {
      const chart = charts.nth(i);
      expect(
        await chart.locator("polyline.line").evaluateAll((ls) => ls.map((l) => l.getAttribute("data-series"))),
      ).toEqual(MODELS);
      expect(
        await chart.locator("polygon.band").evaluateAll((ls) => ls.map((l) => l.getAttribute("data-series"))),
      ).toEqual(MODELS);
      for (const line of await chart
        .locator("polyline.line")
        .evaluateAll((ls) => ls.map((l) => l.getAttribute("points")!)))
        expect(line.split(" ")).toHaveLength(2);
    }
    expect(await page.locator("h2#kts + p + p + p.note").textContent()).toMatch(
      /^No KTS values: the probe cannot be trained/,
    );
    await charts.first().screenshot({ path: join(shots, "iss-chart.png") });
    // The ISS section, heading to last panel (the README's picture).
    const top = (await page.locator("h2#iss").boundingBox())!;
    const grid = (await page.locator("h2#iss ~ div.grid").first().boundingBox())!;
    const scroll = (await page.evaluate("window.scrollY")) as number;
    await page.screenshot({
      path: join(shots, "iss-charts.png"),
      fullPage: true,
      clip: { x: 12, y: top.y + scroll - 8, width: 1060, height: grid.y + grid.height - top.y + 16 },
    });
  });

  it("fills the comparison table from the precomputed pair, signs flipped when B is the first model", async () => {
    await page.selectOption("#model-a", "2");
    await page.selectOption("#model-b", "1");
    const expected = await compareModels(outputs, "tiny-b", "tiny-c", { replicates: REPLICATES });
    const rows = page.locator("#cmp-depth tbody tr");
    expect(await rows.count()).toBe(expected.depth.length);
    const all = expected.depth.find((d) => d.family === "all" && d.layerA === 2)!;
    const sgn = (v: number) => `${v >= 0 ? "+" : ""}${v.toFixed(4)}`;
    const cells = await page.locator("#cmp-depth tbody tr", { hasText: /^all/ }).last().locator("td").allTextContents();
    expect(cells.slice(0, 4)).toEqual([
      "all",
      "2 (1.000)",
      "2 (1.000)",
      `${sgn(-all.iss.difference!)} [${sgn(-all.iss.high!)}, ${sgn(-all.iss.low!)}]`,
    ]);
    expect(await page.locator("#cmp-families tbody tr").count()).toBe(8);
    expect(await page.locator("#cmp-families tbody tr").first().locator("td").allTextContents()).toEqual([
      "anchor",
      "0.0000 [0.0000, 0.1611]",
      "0.0000 [0.0000, 0.1611]",
      "+0.0000",
      "0",
      "0",
      "1.0000",
      "1.0000",
    ]);
    await page.locator("#compare").scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(shots, "compare.png") });
  });

  it("opens a fact with every model's answer to each of its queries", async () => {
    await page.fill("#fact-search", "fact_000003");
    await page.locator("#fact-list button").first().click();
    await page.locator("#fact .q").first().waitFor();
    const scored = MODELS.map((m) =>
      readFileSync(join(outputs, "evaluation", `${m}.scored.jsonl`), "utf8")
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l))
        .filter((r) => r.fact_id === "fact_000003")
        .sort((x, y) => (x.query_id < y.query_id ? -1 : 1)),
    );
    const blocks = page.locator("#fact .q");
    expect(await blocks.count()).toBe(scored[0]!.length);
    for (let q = 0; q < scored[0]!.length; q++) {
      const answers = await blocks.nth(q).locator("tr.model-answer td.answer").allTextContents();
      expect(answers).toEqual(scored.map((rows) => rows.find((r) => r.query_id === scored[0]![q]!.query_id).span));
      expect(await blocks.nth(q).locator("tr.model-answer td:first-child").allTextContents()).toEqual(MODELS);
    }
    await page.locator("#facts").scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(shots, "fact.png") });
  });

  it("made no request beyond the page itself and logged no error", () => {
    expect([...new Set(requests)]).toEqual([pathToFileURL(report).href]);
    expect(problems).toEqual([]);
  });
});
