import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { AxError } from "../../shared/errors.js";

/** The file name of better-sqlite3's addon, in node_modules and in a bundle. */
export const NATIVE_BINDING_FILE = "better_sqlite3.node";

/** What an addon was built for, read from the file itself. */
export interface BindingTarget {
  platform: "linux";
  /** Node's name for the CPU: x64, arm64, arm, ia32, riscv64, … */
  arch: string;
  /** glibc or musl: which C library the addon links against. */
  libc: "glibc" | "musl" | "unknown";
  /** NODE_MODULE_VERSION the addon registers for; only Node with that ABI can load it. */
  nodeAbi: number | null;
  /** The Node versions with that ABI, e.g. ">=20.0.0 <21.0.0". */
  nodeRange: string | null;
}

/** ELF e_machine values (System V gABI) and Node's names for them. */
const ELF_MACHINES: Record<number, string> = {
  3: "ia32",
  40: "arm",
  62: "x64",
  183: "arm64",
  243: "riscv64",
};

/** NODE_MODULE_VERSION per Node major (nodejs/node doc/abi_version_registry.json). */
const NODE_ABI_MAJOR: Record<number, number> = {
  108: 18,
  115: 20,
  120: 21,
  127: 22,
  131: 23,
  137: 24,
  141: 25,
};

/** better-sqlite3's addon as installed for this machine's Node. */
export function localBindingPath(): string {
  const require = createRequire(import.meta.url);
  const pkg = require.resolve("better-sqlite3/package.json");
  return join(dirname(pkg), "build", "Release", NATIVE_BINDING_FILE);
}

/**
 * Reads what an addon was built for: the CPU from its ELF header, the Node ABI from the
 * `node_register_module_vNNN` symbol every addon exports, the C library from its dependencies.
 */
export function inspectBinding(path: string): BindingTarget {
  let bytes: Buffer;
  try {
    bytes = readFileSync(path);
  } catch (err) {
    throw new AxError(
      "AX_BUNDLE_BUILD",
      `${path}: cannot read the native binding: ${(err as Error).message}`,
      { cause: err },
    );
  }
  // ELF magic 0x7f 'E' 'L' 'F' [ELF(5) "e_ident"]
  if (bytes.length < 20 || bytes.readUInt32BE(0) !== 0x7f454c46) {
    throw new AxError(
      "AX_BUNDLE_BUILD",
      `${path}: not a Linux shared object (ELF); a bundle needs better-sqlite3 built for Linux`,
    );
  }
  const littleEndian = bytes[5] === 1;
  const machine = littleEndian ? bytes.readUInt16LE(18) : bytes.readUInt16BE(18);
  const text = bytes.toString("latin1");
  const abiMatch = /node_register_module_v(\d+)/.exec(text);
  const nodeAbi = abiMatch ? Number(abiMatch[1]) : null;
  const major = nodeAbi === null ? undefined : NODE_ABI_MAJOR[nodeAbi];
  return {
    platform: "linux",
    arch: ELF_MACHINES[machine] ?? `elf-machine-${machine}`,
    libc: text.includes("libc.musl-") ? "musl" : text.includes("libc.so.6") ? "glibc" : "unknown",
    nodeAbi,
    nodeRange: major === undefined ? null : `>=${major}.0.0 <${major + 1}.0.0`,
  };
}
