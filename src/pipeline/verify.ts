/** `hsm verify` as a library call: the store folder checked first, then every promise of the store. */
import { storeKernels } from "../kernels/default.js";
import { verifyStore, type VerifyOptions, type VerifyReport } from "../store/verify.js";
import { requireStoreFolder } from "./paths.js";

/**
 * {@link verifyStore} for a folder the user named: a missing folder is a usage
 * error, an unreadable one says why, and a missing native core is announced
 * once, here, before the hashing workers start. `seconds` is the time spent verifying.
 */
export async function verifyStoreFolder(
  store: string,
  options: VerifyOptions = {},
): Promise<{ report: VerifyReport; seconds: number }> {
  await requireStoreFolder(store);
  storeKernels();
  const t0 = performance.now();
  const report = await verifyStore(store, options);
  return { report, seconds: (performance.now() - t0) / 1000 };
}
