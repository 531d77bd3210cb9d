/**
 * Summarises a V8 `.cpuprofile` (node --cpu-prof) of the bundled coordinator worker: self time by
 * function and by source file, and inclusive time of the project's functions. Samples in the
 * bundle are attributed to their source file by the `// path/to/file.ts` lines esbuild writes at
 * the start of every module in an unminified bundle.
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}

interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface ProfileRow {
  /** `function (file)`; native leaves say which project function called them. */
  name: string;
  ms: number;
  pct: number;
}

export interface ProfileSummary {
  /** Sampled time summarised, ms (without the profiler's own start and stop). */
  sampledMs: number;
  /** Share of the sampled time the thread was idle (waiting in the event loop). */
  idlePct: number;
  gcPct: number;
  topSelf: ProfileRow[];
  /** Self time by source file; native leaves (SQLite, JSON) are charged to their caller's file. */
  byFile: ProfileRow[];
  /** Inclusive time of coordinator/ and shared/ functions (synchronous parts of async ones). */
  topInclusive: ProfileRow[];
  /** Inclusive ms of every JS function (any file) at 0.5 % of the samples or more, by label. */
  inclusiveMs: Record<string, number>;
  /** Self ms by the labels of `topSelf`, for every one at 0.5 % of the samples or more. */
  selfMs: Record<string, number>;
}

/** Maps a line of the bundle to the source file esbuild put there. */
function moduleMap(bundlePath: string): (line: number) => string {
  const marks: [number, string][] = [];
  readFileSync(bundlePath, "utf8")
    .split("\n")
    .forEach((text, i) => {
      const m = /^\/\/ ((?:coordinator|shared|agent|bench|node_modules)\/\S+)$/.exec(text);
      if (m) marks.push([i, m[1] as string]);
    });
  return (line) => {
    let lo = 0;
    let hi = marks.length - 1;
    let found = "bundle";
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const mark = marks[mid] as [number, string];
      if (mark[0] <= line) {
        found = mark[1];
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return found;
  };
}

/** Helpers whose anonymous callbacks are named after the caller instead (see `label`). */
const WRAPPERS = new Set(["wrap", "write", "transaction", "sqliteTransaction"]);

/** Reads a profile of the bundled worker and summarises it. */
export function summariseProfile(
  profilePath: string,
  bundlePath: string,
  top = 15,
): ProfileSummary {
  const p = JSON.parse(readFileSync(profilePath, "utf8")) as CpuProfile;
  const lineToModule = moduleMap(bundlePath);
  const bundleUrl = new URL(`file://${bundlePath}`).href;
  const root = fileURLToPath(new URL("..", import.meta.url));
  const nodes = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const n of p.nodes) {
    nodes.set(n.id, n);
    for (const c of n.children ?? []) parent.set(c, n.id);
  }

  const fileOf = (f: CallFrame): string => {
    if (f.url === bundleUrl) return lineToModule(f.lineNumber);
    if (f.url === "") return "native";
    if (f.url.startsWith("node:")) return "node:internal";
    const path = f.url.startsWith("file://") ? fileURLToPath(f.url) : f.url;
    const rel = path.startsWith(root) ? path.slice(root.length) : path;
    // A package counts as one file: node_modules/mqtt, node_modules/@scope/name.
    const pkg = /^node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(rel);
    return pkg ? `node_modules/${pkg[1]}` : rel;
  };
  /**
   * `function (file)`. An anonymous function is named after its nearest named caller that is not
   * a generic wrapper: the store's `wrap(() => db.prepare(…).all())` callbacks, where SQLite's
   * time is charged (the native call has no frame of its own), read `(anonymous in listJobsDueBy)`.
   */
  const label = (id: number): string => {
    const f = (nodes.get(id) as ProfileNode).callFrame;
    if (f.functionName) return `${f.functionName} (${fileOf(f)})`;
    for (let up = parent.get(id); up !== undefined; up = parent.get(up)) {
      const g = (nodes.get(up) as ProfileNode).callFrame;
      const js = g.url !== "" && !g.url.startsWith("node:");
      if (js && g.functionName && !WRAPPERS.has(g.functionName)) {
        return `(anonymous in ${g.functionName}) (${fileOf(f)})`;
      }
    }
    return `(anonymous) (${fileOf(f)})`;
  };
  const stackHas = (id: number, test: (f: CallFrame) => boolean): boolean => {
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      if (test((nodes.get(at) as ProfileNode).callFrame)) return true;
    }
    return false;
  };
  const self = new Map<string, number>();
  const byFile = new Map<string, number>();
  const inclusive = new Map<string, number>();
  let total = 0;
  let idle = 0;
  let gc = 0;
  for (let i = 0; i < p.samples.length; i++) {
    const dt = p.timeDeltas[i] ?? 0;
    const leaf = nodes.get(p.samples[i] as number);
    if (!leaf) continue;
    const name = leaf.callFrame.functionName;
    // The profiler's own start and stop (an inspector call from the worker) are not the
    // coordinator's work.
    if (stackHas(leaf.id, (f) => f.url === "node:inspector")) continue;
    total += dt;
    if (name === "(idle)") {
      idle += dt;
      continue;
    }
    if (name === "(garbage collector)") gc += dt;
    // Walk to the root: the first JS caller of a native leaf, and every project frame once.
    let caller: number | undefined;
    const seen = new Set<string>();
    for (let id = parent.get(leaf.id); id !== undefined; id = parent.get(id)) {
      const f = (nodes.get(id) as ProfileNode).callFrame;
      if (caller === undefined && f.url !== "" && !f.functionName.startsWith("(")) caller = id;
      if (f.url !== "") seen.add(label(id));
    }
    if (leaf.callFrame.url !== "") seen.add(label(leaf.id));
    for (const s of seen) inclusive.set(s, (inclusive.get(s) ?? 0) + dt);
    const native = leaf.callFrame.url === "" && !name.startsWith("(");
    const callerFrame =
      caller === undefined ? undefined : (nodes.get(caller) as ProfileNode).callFrame;
    const selfName =
      native && caller !== undefined
        ? `${name || "(anonymous)"} (native) ← ${label(caller)}`
        : label(leaf.id);
    self.set(selfName, (self.get(selfName) ?? 0) + dt);
    const file = name.startsWith("(")
      ? name
      : native && callerFrame
        ? fileOf(callerFrame)
        : fileOf(leaf.callFrame);
    byFile.set(file, (byFile.get(file) ?? 0) + dt);
  }
  const atLeastHalfPercent = (m: Map<string, number>): Record<string, number> =>
    Object.fromEntries(
      [...m]
        .filter(([, us]) => us >= total * 0.005)
        .sort((a, b) => b[1] - a[1])
        .map(([name, us]) => [name, Math.round(us / 100) / 10]),
    );
  const rows = (m: Map<string, number>): ProfileRow[] =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, us]) => ({ name, ms: us / 1000, pct: total ? (100 * us) / total : 0 }));
  return {
    sampledMs: total / 1000,
    idlePct: total ? (100 * idle) / total : 0,
    gcPct: total ? (100 * gc) / total : 0,
    topSelf: rows(self),
    byFile: rows(byFile),
    topInclusive: rows(
      new Map([...inclusive].filter(([name]) => /\((coordinator|shared)\/[^)]*\)$/.test(name))),
    ),
    inclusiveMs: atLeastHalfPercent(inclusive),
    selfMs: atLeastHalfPercent(self),
  };
}
