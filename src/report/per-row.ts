/**
 * The per-row values behind ISS and KTS, which iss.json and kts.json only hold
 * aggregated: each query row's ISS margin and rank, and each labelled row's
 * out-of-fold KTS probe score. Paired bootstraps over facts need them. Both
 * are metric units run by `computeMetrics` over the store that call ISS's and
 * KTS's own scoring (`issQueryScores`, `ktsScores`), so the fact-macro mean of
 * the margins is the `iss` of iss.json for the same store, and the scores are
 * those behind kts.json's AUROCs.
 */
import { computeMetrics, type MetricsOptions } from "../metrics/compute.js";
import { issQueryScores } from "../metrics/iss.js";
import { ktsScores } from "../metrics/kts.js";
import { ALL_FAMILIES, type LayerData, type Metric, type MetricRow, type MetricSettings } from "../metrics/metric.js";

/** One layer's ISS rows: the store row of each query row, its margin `own − other` (float64) and rank (1 = own anchor first). */
export interface IssRowValues extends MetricRow {
  rows: Int32Array;
  margin: Float64Array;
  rank: Int32Array;
}

/** One layer's KTS rows: each labelled store row, its out-of-fold probe score and label (1 correct, 0 incorrect); empty when no probe could be trained. */
export interface KtsRowValues extends MetricRow {
  rows: Int32Array;
  score: Float64Array;
  label: Uint8Array;
}

async function issRowValues(data: LayerData): Promise<IssRowValues[]> {
  const { rows, above, ownCos, otherCos } = await issQueryScores(data);
  return [
    {
      layer: data.layer,
      family: ALL_FAMILIES,
      rows,
      margin: ownCos.map((o, i) => o - otherCos[i]!),
      rank: above.map((a) => a + 1),
    },
  ];
}

async function ktsRowValues(data: LayerData, s: MetricSettings): Promise<KtsRowValues[]> {
  const { layout, score, nullReason } = await ktsScores(data, s);
  const rows = nullReason ? new Int32Array(0) : layout.labelled;
  return [
    {
      layer: data.layer,
      family: ALL_FAMILIES,
      rows,
      score: Float64Array.from(rows, (i) => score[i]!),
      label: Uint8Array.from(rows, (i) => data.labels![i]!),
    },
  ];
}

/** ISS's per-row margins and ranks, as a metric unit. */
const ISS_ROWS: Metric<IssRowValues> = {
  name: "iss",
  title: "ISS per row",
  description: "each query row's ISS margin and rank",
  tableTitle: "ISS per row",
  needs: [],
  compute: issRowValues,
  columns: { value: "margin", low: "margin", high: "margin" },
};

/** KTS's per-row out-of-fold probe scores, as a metric unit. */
const KTS_ROWS: Metric<KtsRowValues> = {
  name: "kts",
  title: "KTS per row",
  description: "each labelled row's out-of-fold KTS probe score",
  tableTitle: "KTS per row",
  needs: ["labels"],
  compute: ktsRowValues,
  columns: { value: "score", low: "score", high: "score" },
};

/** A store's per-row values for every stored layer, with the row order's facts, families and query ids. */
export interface StoreRowValues {
  layers: number[];
  /** The model's number of blocks L (normalized depth is l/(L−1)). */
  numLayers: number;
  queryIds: readonly string[];
  facts: readonly string[];
  families: readonly string[];
  iss: Map<number, IssRowValues>;
  /** Absent without a scored file. */
  kts: Map<number, KtsRowValues>;
}

/** Runs {@link ISS_ROWS} (and {@link KTS_ROWS} with `scored`) over a store with the metrics' settings. */
export async function storeRowValues(
  store: string,
  o: Pick<
    MetricsOptions,
    | "scored"
    | "backend"
    | "threads"
    | "probeC"
    | "folds"
    | "abstainAsIncorrect"
    | "allowMissingLabels"
    | "allowIncomplete"
    | "layers"
    | "onProgress"
  > = {},
): Promise<StoreRowValues> {
  const r = await computeMetrics(store, {
    ...o,
    registry: [ISS_ROWS, KTS_ROWS] as Metric<MetricRow>[],
    metrics: o.scored ? ["iss", "kts"] : ["iss"],
    onBackendSkipped: () => {},
  });
  const m = r.manifest;
  const n = r.config.rows as number;
  return {
    layers: r.config.layers as number[],
    numLayers: m.num_layers,
    queryIds: m.query_ids.slice(0, n),
    facts: m.fact_ids.slice(0, n),
    families: m.condition_families.slice(0, n),
    iss: new Map((r.rows.iss as IssRowValues[]).map((x) => [x.layer, x])),
    kts: new Map(((r.rows.kts ?? []) as KtsRowValues[]).map((x) => [x.layer, x])),
  };
}
