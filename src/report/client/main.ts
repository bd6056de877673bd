"use strict";
/**
 * The report page's script, run by the browser: fills the paired comparison
 * from the precomputed pairs and opens facts, inflating their chunk on demand.
 * Type-checked against the DOM by this folder's tsconfig.json (Node code never
 * sees DOM globals); scripts/build-page-script.mjs strips the types and writes
 * the JavaScript, inlined by src/report/page.ts, to src/report/client-script.ts.
 */
import type { ClientData, DifferenceView, FactChunk } from "../page-data.js";

/** The fact list shows at most this many matches: enough to scan, few enough to redraw at every keystroke. */
const LISTED_FACTS = 200;
const ENTITIES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" };

const D = JSON.parse(document.getElementById("hsm-data")!.textContent!) as ClientData;
const $ = <E extends Element = HTMLElement>(s: string): E => document.querySelector<E>(s)!;
const esc = (s: unknown): string => String(s).replace(/[&<>"]/g, (c) => ENTITIES[c]!);
const num = (v: number | null | undefined): string => (v === null || v === undefined ? "—" : v.toFixed(4));
const sgn = (v: number | null | undefined): string =>
  v === null || v === undefined ? "—" : (v >= 0 ? "+" : "") + v.toFixed(4);
const pv = (p: number | null): string => (p === null ? "—" : p < 1e-4 ? p.toExponential(1) : p.toFixed(4));

/** A − B with its interval, or B − A (bounds swapped) when `flip`. */
function diff(d: DifferenceView | null, flip: boolean): string {
  if (!d || d.difference === null) return "—";
  return flip
    ? sgn(-d.difference) + " [" + sgn(-d.high!) + ", " + sgn(-d.low!) + "]"
    : sgn(d.difference) + " [" + sgn(d.low) + ", " + sgn(d.high) + "]";
}

/** The comparison tables for the two models selected; a pair is stored once, as i < j. */
function fillCompare(): void {
  const a = Number($<HTMLSelectElement>("#model-a").value),
    b = Number($<HTMLSelectElement>("#model-b").value);
  const fam = $("#cmp-families tbody"),
    dep = $("#cmp-depth tbody");
  if (a === b) {
    fam.innerHTML = dep.innerHTML = "";
    $("#cmp-note").textContent = "Choose two different models.";
    return;
  }
  const flip = a > b,
    c = D.pairs[Math.min(a, b) + ":" + Math.max(a, b)]!;
  $("#cmp-note").textContent =
    D.models[a] +
    " (A) vs " +
    D.models[b] +
    " (B); differences A − B; " +
    c.replicates +
    " bootstrap replicates over facts, seed " +
    c.seed +
    ".";
  fam.innerHTML = c.families
    .map((f) => {
      const [x, y] = flip ? [f.b, f.a] : [f.a, f.b];
      const [onlyA, onlyB] = flip ? [f.paired.onlyB, f.paired.onlyA] : [f.paired.onlyA, f.paired.onlyB];
      const d = f.paired.difference === null ? null : flip ? -f.paired.difference : f.paired.difference;
      return (
        "<tr><td>" +
        esc(f.family) +
        "</td><td>" +
        num(x.accuracy) +
        " [" +
        num(x.low) +
        ", " +
        num(x.high) +
        "]</td><td>" +
        num(y.accuracy) +
        " [" +
        num(y.low) +
        ", " +
        num(y.high) +
        "]</td><td>" +
        sgn(d) +
        "</td><td>" +
        onlyA +
        "</td><td>" +
        onlyB +
        "</td><td>" +
        pv(f.paired.p) +
        "</td><td>" +
        pv(f.pAdjusted) +
        "</td></tr>"
      );
    })
    .join("");
  dep.innerHTML = c.depth
    .map((d) => {
      const [la, lb, da, db] = flip
        ? [d.layerB, d.layerA, d.depthB, d.depthA]
        : [d.layerA, d.layerB, d.depthA, d.depthB];
      return (
        "<tr><td>" +
        esc(d.family) +
        "</td><td>" +
        la +
        " (" +
        da.toFixed(3) +
        ")</td><td>" +
        lb +
        " (" +
        db.toFixed(3) +
        ")</td><td>" +
        diff(d.iss, flip) +
        "</td><td>" +
        diff(d.kts, flip) +
        "</td><td>" +
        d.iss.nFacts +
        "</td></tr>"
      );
    })
    .join("");
}

/** Chunk i, inflated once and kept for its other facts. */
const chunks = new Map<number, Promise<FactChunk>>();
async function chunk(i: number): Promise<FactChunk> {
  if (!chunks.has(i)) {
    const bytes = Uint8Array.from(atob(document.getElementById("chunk-" + i)!.textContent!), (ch) => ch.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate-raw"));
    chunks.set(i, new Response(stream).text().then(JSON.parse));
  }
  return chunks.get(i)!;
}

/** Shows fact f: each of its queries, with every model's answer, label, alias and rank. */
async function openFact(f: number): Promise<void> {
  const c = await chunk(Math.floor(f / D.perChunk));
  const k = f % D.perChunk;
  let start = 0;
  for (let j = 0; j < k; j++) start += c.sizes[j]!;
  const parts = ["<h3>" + esc(D.facts[f]) + "</h3>"];
  for (let r = start; r < start + c.sizes[k]!; r++) {
    const rows = D.models.map((name, m) => {
      const x = c.models[m]!,
        label = x.label[r]! < 0 ? "—" : D.labels[x.label[r]!]!;
      return (
        '<tr class="model-answer"><td>' +
        esc(name) +
        '</td><td class="answer">' +
        esc(x.answer[r] ?? "—") +
        '</td><td class="label" style="color:' +
        (D.labelColors[label] || "#222") +
        '">' +
        esc(label) +
        "</td><td>" +
        esc(x.alias[r] ?? "—") +
        "</td><td>" +
        (x.rank[r] ?? "—") +
        "</td></tr>"
      );
    });
    parts.push(
      '<div class="q"><pre><b>' +
        esc(D.families[c.family[r]!]) +
        "</b> · " +
        esc(c.q[r]) +
        "\n" +
        esc(c.prompt[r]) +
        "</pre><table><thead><tr><th>model</th><th>answer</th><th>label</th>" +
        "<th>matched alias</th><th>ISS rank (layer " +
        [...new Set(D.deepest)].join(", ") +
        ")</th></tr></thead>" +
        "<tbody>" +
        rows.join("") +
        "</tbody></table></div>",
    );
  }
  $("#fact").innerHTML = parts.join("");
}

/** The facts whose id or anchor question contains the search text (all of them, when it is empty). */
function listFacts(): void {
  const needle = $<HTMLInputElement>("#fact-search").value.trim().toLowerCase();
  const hits: number[] = [];
  for (let f = 0; f < D.facts.length && hits.length < LISTED_FACTS; f++) {
    if (!needle || D.facts[f]!.toLowerCase().includes(needle) || D.anchors[f]!.toLowerCase().includes(needle)) {
      hits.push(f);
    }
  }
  const question = (f: number) => D.anchors[f]!.split("\n").find((l) => l.startsWith("Question:")) || D.anchors[f];
  const item = (f: number) =>
    '<li><button data-fact="' + f + '">' + esc(D.facts[f]) + " — " + esc(question(f)) + "</button></li>";
  $("#fact-list").innerHTML = hits.map(item).join("");
}

$("#fact-list").addEventListener("click", (e) => {
  const b = (e.target as Element).closest("button");
  if (b) void openFact(Number(b.dataset.fact));
});
$("#fact-search").addEventListener("input", listFacts);
$("#model-a").addEventListener("change", fillCompare);
$("#model-b").addEventListener("change", fillCompare);
listFacts();
fillCompare();
