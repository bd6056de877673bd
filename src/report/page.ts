/**
 * The report's HTML: static sections rendered here (accuracy, charts,
 * provenance), the comparison and the fact drill-down filled by a small inline
 * script (src/report/client/main.ts) from inline data. A
 * Content-Security-Policy forbids every request, so the page works from
 * file:// and never reaches the network.
 */
import { CHART_COLORS, escapeXml as esc } from "../util/chart.js";
import { CLIENT_SCRIPT } from "./client-script.js";
import type { ClientData, DrillDown, PageData } from "./page-data.js";

const LABEL_COLORS: Record<string, string> = {
  correct: "#2ca02c",
  incorrect: "#d62728",
  ambiguous: "#ff7f0e",
  abstain: "#7f7f7f",
  unparseable: "#9467bd",
};

const CSS = `
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 20px 40px;color:#222}
h1{font-size:22px;margin:20px 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.meta{color:#666;font-size:12px}nav a{margin-right:14px}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}td,th{padding:3px 8px;border-bottom:1px solid #eee;text-align:right;vertical-align:top}
td:first-child,th:first-child{text-align:left}th{background:#f6f6f6}
.mix{display:flex;width:120px;height:6px;margin:3px 0 0 auto;background:#eee}.mix span{display:block;height:100%}
.grid{display:flex;flex-wrap:wrap;gap:8px}.chart{margin:0;border:1px solid #eee}.chart figcaption{font-weight:600;padding:4px 8px}
.legend span{display:inline-block;margin-right:16px}.legend i{display:inline-block;width:18px;height:3px;vertical-align:middle;margin-right:5px}
.note{color:#666;font-style:italic}select,input{font:inherit;padding:2px 4px}
#fact-list{max-height:260px;overflow:auto;border:1px solid #eee;padding:0;margin:6px 0;list-style:none}
#fact-list button{all:unset;cursor:pointer;display:block;padding:2px 8px;width:100%;box-sizing:border-box}#fact-list button:hover{background:#eef}
.q{margin:10px 0;border:1px solid #eee}.q pre{margin:0;padding:6px 8px;background:#fafafa;white-space:pre-wrap}
.answer{max-width:560px;text-align:left;white-space:pre-wrap;word-break:break-word}.label{font-weight:600}
code{font-size:12px;word-break:break-all}details{margin:4px 0}
`;

function accuracySection(d: PageData): string {
  const head = `<tr><th>family</th>${d.models.map((m) => `<th>${esc(m.name)}</th>`).join("")}</tr>`;
  const rows = d.families.map((family) => {
    const cells = d.models.map((m) => {
      const a = m.accuracy.find((r) => r.family === family)!;
      const mix = a.mix as Record<string, number>;
      const n = a.n as number;
      const bar = d.labels
        .map((l) =>
          mix[l]
            ? `<span style="width:${((100 * mix[l]) / n).toFixed(2)}%;background:${LABEL_COLORS[l]}" title="${l}: ${mix[l]}"></span>`
            : "",
        )
        .join("");
      const acc =
        a.accuracy === null
          ? "—"
          : `${(a.accuracy as number).toFixed(4)} [${(a.low as number).toFixed(4)}, ${(a.high as number).toFixed(4)}]`;
      return `<td>${acc} <span class="meta">${a.correct}/${n}</span><div class="mix">${bar}</div></td>`;
    });
    return `<tr><td>${esc(family)}</td>${cells.join("")}</tr>`;
  });
  const key = d.labels.map((l) => `<span><i style="background:${LABEL_COLORS[l]}"></i>${l}</span>`).join("");
  return `<h2 id="accuracy">Accuracy per condition family</h2><p class="meta">Wilson 95% intervals; "all" pools the non-anchor families. Bars: the label mix.</p><p class="legend">${key}</p><table>${head}${rows.join("")}</table>`;
}

function legend(d: PageData): string {
  return `<p class="legend">${d.models.map((m, i) => `<span><i style="background:${CHART_COLORS[i % CHART_COLORS.length]}"></i>${esc(m.name)}</span>`).join("")}</p>`;
}

function chartsSection({ id, title, charts, notes }: PageData["charts"][number], d: PageData): string {
  const shown = charts.filter((c) => c.svg !== null);
  const figures = shown
    .map(
      (c) =>
        `<figure class="chart" data-family="${esc(c.family)}"><figcaption>${esc(c.family)}</figcaption>${c.svg}</figure>`,
    )
    .join("");
  const empty =
    shown.length === 0
      ? `<p class="note">No ${esc(title)} values${notes.length ? `: ${notes.map(esc).join("; ")}` : ""}.</p>`
      : "";
  return `<h2 id="${esc(id)}">${esc(title)} by normalized depth l/(L−1)</h2><p class="meta">One panel per family, models overlaid; bands: the metric's 95% bootstrap interval over facts.</p>${legend(d)}${empty}<div class="grid">${figures}</div>`;
}

function compareSection(d: PageData): string {
  const options = (selected: number) =>
    d.models.map((m, i) => `<option value="${i}"${i === selected ? " selected" : ""}>${esc(m.name)}</option>`).join("");
  return `<h2 id="compare">Paired comparison</h2>
<p>A <select id="model-a">${options(0)}</select> B <select id="model-b">${options(Math.min(1, d.models.length - 1))}</select></p>
<p id="cmp-note" class="meta"></p>
<table id="cmp-families"><thead><tr><th>family</th><th>accuracy A [95%]</th><th>accuracy B [95%]</th><th>A − B</th><th>A only right</th><th>B only right</th><th>McNemar p</th><th>BH p</th></tr></thead><tbody></tbody></table>
<p class="meta">ISS and KTS at matched depth: for each stored layer of the first model of the pair, the other's layer nearest in l/(L−1).</p>
<table id="cmp-depth"><thead><tr><th>family</th><th>layer A (depth)</th><th>layer B (depth)</th><th>ΔISS [95%]</th><th>ΔKTS [95%]</th><th>facts</th></tr></thead><tbody></tbody></table>`;
}

function provenanceSection(d: PageData): string {
  const json = (v: unknown) => `<code>${esc(JSON.stringify(v))}</code>`;
  const blocks = d.models.map((m, i) => {
    const p = d.provenance[i]!;
    const files = (p.files as [string, string, number | null][])
      .map(([n, sha, bytes]) => `<tr><td>${esc(n)}</td><td><code>${esc(sha)}</code></td><td>${bytes ?? "—"}</td></tr>`)
      .join("");
    return `<h3>${esc(m.name)}</h3><p>store <code>${esc(String(p.store))}</code>: <b>${esc(String(p.verify))}</b></p>
<p>written by ${esc(String(p.tool_version))}; model sha256 <code>${esc(String(p.model_sha256))}</code>${
      p.model_source ? `, from <code>${esc(String(p.model_source))}</code>` : ""
    }</p>
<details><summary>store settings</summary>${json(p.settings)}</details>
<details><summary>metrics settings</summary>${json(p.metrics)}</details>
${p.selfCheck ? `<details open><summary>self-check</summary>${json(p.selfCheck)}</details>` : ""}
<details><summary>checksums (${(p.files as unknown[]).length} files)</summary><table><tr><th>file</th><th>sha256</th><th>bytes</th></tr>${files}</table></details>`;
  });
  return `<h2 id="provenance">Provenance</h2><p>report written by ${esc(d.tool_version)} at ${esc(d.written_at)} from <code>${esc(d.outputs)}</code>${d.bank ? `; bank <code>${esc(String(d.bank))}</code>` : ""}</p><p>decoding: ${d.generation ? json(d.generation) : "greedy, as recorded in each store"}</p>${blocks.join("")}`;
}

/** JSON safe inside a script element. */
function scriptJson(v: unknown): string {
  return JSON.stringify(v).replace(/</g, "\\u003c");
}

/** The whole page, and how many of its bytes the first view reads (all but the fact chunks). */
export function renderPage(d: PageData, drill: DrillDown): { html: string; firstViewBytes: number } {
  const client: ClientData = {
    models: d.models.map((m) => m.name),
    families: d.families,
    labels: d.labels,
    labelColors: LABEL_COLORS,
    pairs: d.pairs,
    facts: drill.facts,
    anchors: drill.anchors,
    deepest: drill.deepest,
    perChunk: drill.perChunk,
  };
  const head = `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<link rel="icon" href="data:,"><title>${esc(d.title)}</title><style>${CSS}</style></head><body>
<h1>${esc(d.title)}</h1><p class="meta">${d.models.length} models · ${drill.facts.length} facts · ${esc(d.outputs)}</p>${d.notes.map((n) => `<p class="note">${esc(n)}</p>`).join("")}
<nav><a href="#accuracy">accuracy</a>${d.charts.map((c) => `<a href="#${esc(c.id)}">${esc(c.title)}</a>`).join("")}<a href="#compare">compare</a><a href="#facts">facts</a><a href="#provenance">provenance</a></nav>
${accuracySection(d)}${d.charts.map((c) => chartsSection(c, d)).join("")}${compareSection(d)}
<h2 id="facts">Facts</h2><p class="meta">Search fact ids or anchor questions; open a fact for every model's answer to its anchor and each perturbation.</p>
<input id="fact-search" type="search" placeholder="fact id or question" size="40"><ul id="fact-list"></ul><div id="fact"></div>
${provenanceSection(d)}
<script type="application/json" id="hsm-data">${scriptJson(client)}</script>
`;
  const chunks = drill.chunks
    .map((c, i) => `<script type="application/octet-stream" id="chunk-${i}">${c}</script>`)
    .join("\n");
  const tail = `\n<script>${CLIENT_SCRIPT}</script></body></html>\n`;
  return { html: head + chunks + tail, firstViewBytes: Buffer.byteLength(head) + Buffer.byteLength(tail) };
}
