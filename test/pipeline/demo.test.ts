/** runDemo's own decision: write the model only when nothing is there, and never mistake an unreadable model for a missing one. */
import { existsSync, mkdirSync, readdirSync, symlinkSync } from "node:fs";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { HsmError } from "../../src/errors.js";
import { runDemo } from "../../src/pipeline/demo.js";
import { tempDir } from "../helpers/tmp.js";

const dir = tempDir("hsm-demo-");

describe("runDemo", () => {
  it("stops on a model file it cannot read instead of writing a new model over it", async () => {
    const out = join(dir, "demo");
    const onnx = join(out, "model", "model.onnx");
    mkdirSync(join(out, "model"), { recursive: true });
    symlinkSync(onnx, onnx);
    const steps: string[] = [];
    const err = await runDemo({ out, log: (step) => steps.push(step) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(HsmError);
    expect((err as Error).message).toBe(
      `${onnx}: the demo model cannot be read (ELOOP: too many symbolic links encountered)`,
    );
    expect(steps).toEqual([]);
    expect(readdirSync(out)).toEqual(["model"]);
    expect(existsSync(join(out, "evaluation"))).toBe(false);
  });
});
