/** The shared line chart on a hand-worked case: where points land, which lines and bands are drawn, what is escaped. */
import { describe, expect, it } from "vitest";

import { lineChart } from "../../src/util/chart.js";

/** The `points` attribute of each element of a kind, by series. */
function shapes(svg: string, kind: "polyline" | "polygon"): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of svg.matchAll(new RegExp(`<${kind} points="([^"]*)"[^>]*data-series="([^"]*)"`, "g")))
    out[m[2]!] = m[1]!;
  return out;
}

describe("lineChart", () => {
  // 400 × 300 without legend or title: plot area x ∈ [64, 384], y ∈ [16, 252]; y range fixed to [0, 1].
  const o = {
    xLabel: "depth",
    xTicks: [0, 0.5, 1].map((x) => ({ x, label: x.toFixed(1) })),
    width: 400,
    height: 300,
    legend: false,
    yRange: [0, 1] as [number, number],
  };

  it("maps x over the ticks' range and y over the given range, band from high to low", () => {
    const svg = lineChart(
      [
        {
          name: "a",
          points: [
            { x: 0.5, value: 0.5, low: 0.25, high: 0.75 },
            { x: 1, value: 1, low: 0.5, high: 1 },
          ],
        },
      ],
      o,
    );
    // x: 64 + x·320; y: 16 + (1 − v)·236.
    expect(shapes(svg, "polyline")).toEqual({ a: "224.0,134.0 384.0,16.0" });
    expect(shapes(svg, "polygon")).toEqual({ a: "224.0,75.0 384.0,16.0 384.0,134.0 224.0,193.0" });
    expect(svg.match(/<circle /g)).toHaveLength(2);
    expect(svg).toContain(`<text x="64.0" y="268" text-anchor="middle">0.0</text>`);
    expect(svg).not.toContain('<polyline points=""');
  });

  it("skips missing values and intervals, and draws no line through a single point", () => {
    const svg = lineChart(
      [
        {
          name: "gaps",
          points: [
            { x: 0, value: 0.2, low: null, high: null },
            { x: 0.5, value: null, low: 0.1, high: 0.3 },
            { x: 1, value: 0.4, low: 0.3, high: 0.5 },
          ],
        },
        { name: "one", points: [{ x: 0.5, value: 0.5, low: 0.4, high: 0.6 }] },
      ],
      o,
    );
    expect(shapes(svg, "polyline")).toEqual({ gaps: "64.0,204.8 384.0,157.6" });
    expect(shapes(svg, "polygon")).toEqual({ gaps: "224.0,181.2 384.0,134.0 384.0,181.2 224.0,228.4" });
    expect(svg.match(/<circle /g)).toHaveLength(3);
  });

  it("escapes names and labels, and lists each series in the legend", () => {
    const svg = lineChart(
      [
        {
          name: 'a<b & "c"',
          points: [
            { x: 0, value: 0, low: null, high: null },
            { x: 1, value: 1, low: null, high: null },
          ],
        },
      ],
      { ...o, legend: true, title: "t<" },
    );
    expect(svg).toContain('data-series="a&lt;b &amp; &quot;c&quot;"');
    expect(svg).toContain(">a&lt;b &amp; &quot;c&quot;</text>");
    expect(svg).toContain(">t&lt;</text>");
    expect(svg).not.toMatch(/<[^/a-z!]/);
  });
});
