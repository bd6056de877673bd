/**
 * Runs `fn` on every item: one after another where `parallel` is 1, else every call started at once (whoever runs
 * them queues them). Whatever fails, every call has settled before the first failure is thrown, so that nothing
 * still runs on what the caller then closes.
 */
export async function forEachSettled<T>(
  items: readonly T[],
  parallel: number,
  fn: (item: T) => Promise<void>,
): Promise<void> {
  if (parallel <= 1) {
    for (const item of items) await fn(item);
    return;
  }
  const settled = await Promise.allSettled(items.map(fn));
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === "rejected");
  if (failed) throw failed.reason;
}
