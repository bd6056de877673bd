/** Named fixture sizes and the writer's options. Light: loaded with "hsm" itself, which is why the fixture writer is not imported here. */

/** What `writeFixture` (store.ts) makes: sizes, seed and progress. */
export interface FixtureOptions {
  facts?: number;
  d?: number;
  layersTotal?: number;
  seed?: number;
  /** Rows outside the main forward pass (reverse questions); default in the real bank's proportion. */
  extraRows?: number;
  /**
   * Main-forward rows beyond six per fact: a second paraphrase for each of the
   * first `extraMainRows` facts (at most one per fact); default in the real
   * bank's proportion.
   */
  extraMainRows?: number;
  /** Rows of the last stored layer to fill with ±inf, to exercise non-finite handling. */
  nonfiniteRows?: number;
  /** Progress callback: phase and fraction done. */
  onProgress?: (phase: string, done: number, total: number) => void;
}

/**
 * The real bank: 44,416 rows, of which 39,260 are main-forward. The fixture
 * matches it with 6,543 facts × 6 main-forward rows, a second paraphrase for
 * 2 of them (39,260) and 5,156 reverse rows outside the main forward pass.
 */
export const REAL_BANK = { facts: 6543, extraMainRows: 2, extraRows: 5156 } as const;

/** Benchmark scale: the real bank's 44,416 rows, 39,260 main-forward, d = 1024, 8 stored layers. */
export const BENCH_FIXTURE: FixtureOptions = { ...REAL_BANK, d: 1024, layersTotal: 14 };

/**
 * Full scale: the bench fixture's rows at the width and depth of the real
 * stores (d = 4608, L = 46, so 28 stored layers, 18…45): about 10 GB.
 */
export const FULL_FIXTURE: FixtureOptions = { ...BENCH_FIXTURE, d: 4608, layersTotal: 46 };

export const FIXTURE_PRESETS = { bench: BENCH_FIXTURE, full: FULL_FIXTURE } as const;
export type FixturePreset = keyof typeof FIXTURE_PRESETS;

/** The preset's options, overridden by every option given (undefined ones do not count). */
export function withPreset(options: FixtureOptions & { preset?: FixturePreset }): FixtureOptions {
  const { preset, ...given } = options;
  const defined = Object.entries(given).filter(([, v]) => v !== undefined);
  return { ...(preset ? FIXTURE_PRESETS[preset] : {}), ...Object.fromEntries(defined) };
}
