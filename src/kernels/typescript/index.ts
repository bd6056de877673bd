/** Every kernel in plain TypeScript: the reference, and the fallback every other backend names. */
import type { Kernels } from "../types.js";
import { bootstrapAurocTs, bootstrapMeanTs } from "./bootstrap.js";
import { f16Stats, f16ToF32, f32ToF16 } from "./float16.js";
import { headArgmaxTs, prepareHeadTs } from "./head.js";
import { rowsTimesTs, rowsTransposeTimesTs, syncProducts } from "./products.js";
import { rankTs } from "./rank.js";
import { sha256StatsTs } from "./sha256.js";
import { anchorCosinesTs, centreRowsTs, foldMomentsTs, standardizeRowsTs } from "./rows.js";

export const typescriptKernels: Kernels = {
  f32ToF16,
  f16ToF32,
  f16Stats,
  sha256Stats: sha256StatsTs,
  centreRows: centreRowsTs,
  rank: rankTs,
  anchorCosines: anchorCosinesTs,
  standardizeRows: standardizeRowsTs,
  foldMoments: foldMomentsTs,
  products: (h, n, d) => syncProducts(h, n, d, rowsTimesTs, rowsTransposeTimesTs),
  rowsTimes: rowsTimesTs,
  bootstrapMean: bootstrapMeanTs,
  bootstrapAuroc: bootstrapAurocTs,
  prepareHead: prepareHeadTs,
  headArgmax: headArgmaxTs,
};
