/**
 * The shapes of what the report page carries: the data the page is rendered
 * from, and what its script reads (the inline JSON and the fact chunks). Types
 * only, importing nothing, so that the browser script (src/report/client/)
 * shares them without seeing any Node code.
 */

type Row = Record<string, unknown>;

/** What the page shows; built by src/report/build.ts. */
export interface PageData {
  title: string;
  /** What the reader should know of what the report leaves out, one sentence each. */
  notes: string[];
  outputs: string;
  tool_version: string;
  written_at: string;
  generation: unknown;
  bank: unknown;
  families: string[];
  labels: readonly string[];
  models: { name: string; L: number; layers: number[]; accuracy: Row[] }[];
  /** One entry per registered metric: its section's id and title, a chart per family, and why it has no values. */
  charts: { id: string; title: string; charts: { family: string; svg: string | null }[]; notes: string[] }[];
  /** The comparison of models i < j under the key `i:j` (src/report/compare.ts's Comparison). */
  pairs: Record<string, PairView>;
  provenance: Row[];
}

/** The drill-down: fact ids and anchor prompts for the list, and the deflated, base64 chunks of per-fact data. */
export interface DrillDown {
  facts: string[];
  anchors: string[];
  chunks: string[];
  /** Facts per chunk. */
  perChunk: number;
  /** Each model's deepest stored layer (where the rank shown was taken). */
  deepest: number[];
}

/** A paired difference A − B with its interval, as the comparison table shows it. */
export interface DifferenceView {
  difference: number | null;
  low: number | null;
  high: number | null;
  nFacts: number;
}

/** An accuracy with its Wilson interval, as the comparison table shows it. */
export interface AccuracyView {
  accuracy: number | null;
  low: number;
  high: number;
}

/** What the page's script reads of one pair's comparison (src/report/compare.ts's Comparison). */
export interface PairView {
  replicates: number;
  seed: number;
  families: {
    family: string;
    a: AccuracyView;
    b: AccuracyView;
    paired: { onlyA: number; onlyB: number; p: number | null; difference: number | null };
    pAdjusted: number | null;
  }[];
  depth: {
    family: string;
    layerA: number;
    layerB: number;
    depthA: number;
    depthB: number;
    iss: DifferenceView;
    kts: DifferenceView | null;
  }[];
}

/** The page's inline JSON (`#hsm-data`), all the script needs at first view. */
export interface ClientData extends Pick<DrillDown, "facts" | "anchors" | "perChunk" | "deepest"> {
  /** Model names, in the order of the selects and of a chunk's `models`. */
  models: string[];
  families: string[];
  labels: readonly string[];
  /** The colour of each label's name in the drill-down. */
  labelColors: Record<string, string>;
  pairs: PageData["pairs"];
}

/**
 * One drill-down chunk once inflated: column arrays over the queries of its
 * facts (`sizes[k]` queries for its k-th fact), family and label as indices
 * into ClientData's `families` and `labels` (label -1: not scored).
 */
export interface FactChunk {
  sizes: number[];
  q: string[];
  family: number[];
  prompt: string[];
  /** Per model, in ClientData's `models` order. */
  models: { answer: (string | null)[]; label: number[]; alias: (string | null)[]; rank: (number | null)[] }[];
}
