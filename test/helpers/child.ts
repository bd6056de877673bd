/**
 * A child process run without blocking the test worker. Vitest's worker answers its runner over an RPC channel with
 * a one-minute timeout; a synchronous spawn that takes longer (a demo, a matrix of extractions on a software GPU)
 * starves that channel and fails the run with "Timeout calling onTaskUpdate" though every test passed.
 */
import { spawn } from "node:child_process";

export interface ChildResult {
  status: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs `command args` to its end (killed after `timeout` ms, if given); its exit status and output as text. */
export function runChild(
  command: string,
  args: string[],
  options: { env?: NodeJS.ProcessEnv; cwd?: string; timeout?: number } = {},
): Promise<ChildResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { env: options.env, cwd: options.cwd, stdio: ["ignore", "pipe", "pipe"] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on("data", (b: Buffer) => out.push(b));
    child.stderr.on("data", (b: Buffer) => err.push(b));
    const timer = options.timeout === undefined ? undefined : setTimeout(() => child.kill("SIGTERM"), options.timeout);
    child.on("error", reject);
    child.on("close", (status, signal) => {
      clearTimeout(timer);
      resolve({
        status,
        signal,
        stdout: Buffer.concat(out).toString("utf8"),
        stderr: Buffer.concat(err).toString("utf8"),
      });
    });
  });
}
