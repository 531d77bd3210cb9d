import { readdirSync } from "node:fs";
import type { NativeTarget } from "../shared/update.js";

/**
 * What this device's native addons must be built for (hello `target`): Node's platform and CPU,
 * the C library, and the Node ABI. The C library is musl when the system has musl's dynamic
 * loader (`/lib/ld-musl-*`, as on Alpine), glibc otherwise on Linux.
 */
export function nativeTarget(): NativeTarget {
  let libc = "unknown";
  if (process.platform === "linux") {
    try {
      libc = readdirSync("/lib").some((n) => n.startsWith("ld-musl-")) ? "musl" : "glibc";
    } catch {
      libc = "glibc";
    }
  }
  const abi = Number(process.versions.modules);
  return {
    platform: process.platform,
    arch: process.arch,
    libc,
    nodeAbi: Number.isInteger(abi) && abi > 0 ? abi : null,
  };
}
