import { describe, expect, it, vi } from "vitest";

import { createProgress } from "../../src/util/progress.js";

function sink(tty: boolean) {
  const lines: string[] = [];
  return {
    stream: { isTTY: tty, write: (s: string) => (lines.push(s), true) } as unknown as NodeJS.WriteStream,
    lines,
  };
}

describe("progress", () => {
  it("reports completion once, through end(), and nothing before anything is done", () => {
    const { stream, lines } = sink(false);
    const p = createProgress("work", 10, { stream });
    p.update(0);
    p.update(10);
    p.end();
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^work: 10 rows in \d+\.\d s\n$/);
  });

  it("ends silently with null, clearing a terminal line", () => {
    const plain = sink(false);
    createProgress("x", 1, { stream: plain.stream }).end(null);
    expect(plain.lines).toEqual([]);
    const tty = sink(true);
    createProgress("x", 1, { stream: tty.stream }).end(null);
    expect(tty.lines).toEqual(["\r\x1b[K"]);
  });

  it("writes plain lines, no escape sequence, to a terminal with TERM=dumb", () => {
    vi.stubEnv("TERM", "dumb");
    try {
      const { stream, lines } = sink(true);
      createProgress("x", 1, { stream }).end(null);
      createProgress("y", 1, { stream }).end("done");
      expect(lines).toEqual(["done\n"]);
    } finally {
      vi.unstubAllEnvs();
    }
  });

  it("prints nothing at all when quiet", () => {
    const { stream, lines } = sink(false);
    const p = createProgress("x", 2, { stream, quiet: true });
    p.update(1);
    p.end("done");
    expect(lines).toEqual([]);
  });
});
