import type { Command } from "commander";

import { examineDevices, type DeviceReport } from "../../index.js";
import { out } from "../print.js";

function printDevices(r: DeviceReport): void {
  const width = Math.max(...r.findings.map((f) => f.name.length));
  for (const f of r.findings) {
    out(`${f.name.padEnd(width)}  ${f.available ? "yes" : "no "}  ${f.detail}`);
    if (f.fix) out(`${" ".repeat(width + 7)}to add it: ${f.fix}`);
  }
  if (!r.adapter) return;
  out(`adapter features: ${r.adapter.features.join(", ") || "none"}`);
  out(
    `adapter limits: ${Object.entries(r.adapter.limits)
      .map(([k, v]) => `${k} ${v}`)
      .join(", ")}`,
  );
}

export function doctorCommand(program: Command): void {
  program
    .command("doctor")
    .summary("print the devices and backends this machine offers hsm, and how to add the missing ones")
    .description(
      "Look for everything hsm can compute on here: the native core; onnxruntime's CPU, CUDA and WebGPU execution " +
        "providers (--device); the WebGPU adapter Dawn finds, with its features (shader-f16 or not) and key limits; " +
        "and the TensorFlow.js backends of hsm metrics (--backend wasm, webgpu, tfjs-node, tfjs-node-gpu). Each one " +
        "missing comes with the command or step that adds it. GPU probes run in child processes with a time limit, " +
        "so a broken driver can neither hang this command nor fill the terminal. Exits 0 whatever it finds.",
    )
    .option("--json", "print as JSON")
    .action(async (opts: { json?: boolean }) => {
      const report = await examineDevices();
      if (opts.json) out(JSON.stringify(report, null, 2));
      else printDevices(report);
    });
}
