/**
 * A single-host SLURM cluster for tests: munged, slurmctld and slurmd on this
 * machine, each with its own key, socket, ports, state and logs in a temporary
 * folder and started with its own slurm.conf (SLURM_CONF), so no system
 * service is used or changed. Needs root (SlurmUser=root) and Debian's
 * slurm-wlm and munge; they are installed where missing only when
 * HSM_REQUIRE_SLURM=1. Stopped by pid afterwards.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { cpus, hostname, tmpdir, totalmem } from "node:os";
import { join } from "node:path";

export interface SlurmCluster {
  /** The environment that reaches this cluster: process.env with SLURM_CONF. */
  env: NodeJS.ProcessEnv;
  dir: string;
  stop(): void;
}

const PROGRAMS = [
  "/usr/sbin/munged",
  "/usr/sbin/mungekey",
  "/usr/sbin/slurmctld",
  "/usr/sbin/slurmd",
  "/usr/bin/sbatch",
];

function missing(): string[] {
  return PROGRAMS.filter((p) => !existsSync(p));
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

function pidIn(file: string): number | undefined {
  try {
    const pid = Number(readFileSync(file, "utf8").trim());
    return pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** Sends `sig` to `pid`; false when there is no such process. */
function signal(pid: number, sig: NodeJS.Signals | 0): boolean {
  try {
    process.kill(pid, sig);
    return true;
  } catch {
    return false;
  }
}

/**
 * Starts the cluster and waits until `sinfo` shows its node idle; returns why
 * it could not where it cannot (not root, slurm missing and not to be installed, a daemon that would not start).
 */
export async function startSlurm(): Promise<SlurmCluster | string> {
  if (process.getuid?.() !== 0) return "the test cluster runs its daemons as root (SlurmUser=root); not root here";
  if (missing().length) {
    if (process.env.HSM_REQUIRE_SLURM !== "1")
      return `${missing().join(", ")} missing: apt-get install slurm-wlm munge (or set HSM_REQUIRE_SLURM=1 to install them)`;
    const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
    spawnSync("apt-get", ["update", "-qq"], { env, stdio: "ignore" });
    spawnSync("apt-get", ["install", "-y", "-qq", "slurm-wlm", "munge"], { env, stdio: "ignore" });
    if (missing().length) return `${missing().join(", ")} still missing after apt-get install slurm-wlm munge`;
  }
  const dir = mkdtempSync(join(tmpdir(), "hsm-slurm-"));
  for (const sub of ["munge", "state", "spool", "log"]) mkdirSync(join(dir, sub));
  chmodSync(join(dir, "munge"), 0o700);
  const socket = join(dir, "munge", "munge.sock");
  const pids = [join(dir, "munge", "munged.pid"), join(dir, "slurmctld.pid"), join(dir, "slurmd.pid")];
  const conf = join(dir, "slurm.conf");
  const env = { ...process.env, SLURM_CONF: conf };
  const stop = () => {
    spawnSync("scancel", ["--full", "--quiet", "--user", "root"], { env, stdio: "ignore", timeout: 5000 });
    // A running job's slurmstepd ends once slurmd has its step's end: stopped before that, both are left running.
    for (const t0 = Date.now(); Date.now() - t0 < 10_000; spawnSync("sleep", ["0.1"])) {
      const r = spawnSync("squeue", ["--noheader", "--format=%i"], { env, encoding: "utf8", timeout: 5000 });
      if (r.status !== 0 || r.stdout.trim() === "") break;
    }
    const running = [...pids].reverse().flatMap((file) => pidIn(file) ?? []);
    for (const pid of running) signal(pid, "SIGTERM");
    // The daemons write their state as they stop: wait for them before removing it.
    for (const t0 = Date.now(); running.some((pid) => signal(pid, 0)) && Date.now() - t0 < 10_000;)
      spawnSync("sleep", ["0.1"]);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    execFileSync("/usr/sbin/mungekey", ["--create", `--keyfile=${join(dir, "munge", "munge.key")}`, "--force"]);
    execFileSync("/usr/sbin/munged", [
      "--force",
      `--socket=${socket}`,
      `--key-file=${join(dir, "munge", "munge.key")}`,
      `--log-file=${join(dir, "log", "munged.log")}`,
      `--pid-file=${pids[0]}`,
      `--seed-file=${join(dir, "munge", "seed")}`,
    ]);
    const [ctldPort, dPort] = [await freePort(), await freePort()];
    // RealMemory a little under the machine's, as slurmd reports it.
    const memory = Math.floor((totalmem() / 2 ** 20) * 0.9);
    writeFileSync(
      conf,
      [
        "ClusterName=hsmtest",
        "SlurmctldHost=localhost",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        `AuthInfo=socket=${socket}`,
        `SlurmctldPort=${ctldPort}`,
        `SlurmdPort=${dPort}`,
        `StateSaveLocation=${join(dir, "state")}`,
        `SlurmdSpoolDir=${join(dir, "spool")}`,
        `SlurmctldPidFile=${pids[1]}`,
        `SlurmdPidFile=${pids[2]}`,
        `SlurmctldLogFile=${join(dir, "log", "slurmctld.log")}`,
        `SlurmdLogFile=${join(dir, "log", "slurmd.log")}`,
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/backfill",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "MinJobAge=300",
        `NodeName=localhost NodeHostname=${hostname()} NodeAddr=127.0.0.1 CPUs=${cpus().length} RealMemory=${memory} State=UNKNOWN`,
        "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
        "",
      ].join("\n"),
    );
    execFileSync("/usr/sbin/slurmctld", ["-c"], { env });
    execFileSync("/usr/sbin/slurmd", ["-c", "-N", "localhost"], { env });
    for (let t0 = Date.now(); ;) {
      const r = spawnSync("sinfo", ["--noheader", "--format=%t"], { env, encoding: "utf8" });
      if (r.stdout?.trim() === "idle") break;
      if (Date.now() - t0 > 30_000) throw new Error(`sinfo shows "${r.stdout?.trim()}" ${r.stderr?.trim() ?? ""}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  } catch (err) {
    const logs = ["munged", "slurmctld", "slurmd"]
      .map((d) => join(dir, "log", `${d}.log`))
      .filter(existsSync)
      .map((f) => readFileSync(f, "utf8").trim().split("\n").slice(-2).join(" / "));
    stop();
    return `the test cluster did not start: ${(err as Error).message.split("\n")[0]} (${logs.join("; ")})`;
  }
  return { env, dir, stop };
}
