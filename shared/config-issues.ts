import { didYouMean } from "./suggest.js";

/*
 * Config errors, one line per problem, for both sides (zod on the coordinator, zod/mini in the
 * agent, whose bundle carries this file: keep it small). Zod reports the unknown keys of an object
 * as one issue with the object's path; here each key gets its own line at its full path, with the
 * closest key the object declares:
 *
 *   tagz: unknown key; did you mean "tags"?
 *   agentID: unknown key; did you mean "agentId"? (agentId is required)
 *
 * Parse with `{ error: unknownKeys }` (alone or before another error map), then format the issues
 * with `issueLines` (or `keyedIssues`).
 */

/** The parts of a zod issue read here, as both zod and zod/mini report them. */
export interface IssueLike {
  readonly code: string;
  readonly path: readonly PropertyKey[];
  readonly message: string;
  readonly keys?: readonly string[];
}

/**
 * An error map for zod's `error` parse option: the message of an unknown-keys issue, one line per
 * key, naming the closest key of the object's shape (read from the schema that raised it, so it
 * works at every nesting level). Undefined for any other issue, so another map can follow.
 */
export function unknownKeys(issue: {
  readonly code?: string;
  readonly keys?: readonly string[];
  readonly inst?: unknown;
}): string | undefined {
  if (issue.code !== "unrecognized_keys") return undefined;
  const shape = (issue.inst as { _zod?: { def?: { shape?: object } } } | undefined)?._zod?.def
    ?.shape;
  const known = Object.keys(shape ?? {});
  return (issue.keys ?? []).map((k) => `unknown key${didYouMean(k, known)}`).join("\n");
}

/** An issue at one path: an unknown-keys issue becomes one per key. */
export interface KeyedIssue {
  path: PropertyKey[];
  message: string;
}

/**
 * The issues with each unknown key on its own, at its full path. A required key that is missing
 * while its near miss is there is said once, at the key given: `agentID: unknown key; did you
 * mean "agentId"? (agentId is required)`. `input` is what was parsed, to tell a missing key from a
 * bad one.
 */
export function keyedIssues(
  issues: readonly IssueLike[],
  input?: unknown,
  /** Where `input` sits in the whole file, so that the hint names the key by its full path. */
  root: readonly PropertyKey[] = [],
): KeyedIssue[] {
  const all: KeyedIssue[] = [];
  for (const i of issues) {
    if (i.code !== "unrecognized_keys" || !i.keys) {
      all.push({ path: [...i.path], message: i.message });
      continue;
    }
    // Without the map above the message is zod's own, one line for every key.
    const lines = i.message.split("\n");
    const mapped =
      lines.length === i.keys.length && lines.every((l) => l.startsWith("unknown key"));
    i.keys.forEach((k, n) => {
      all.push({ path: [...i.path, k], message: (mapped && lines[n]) || "unknown key" });
    });
  }
  const dropped = new Set<KeyedIssue>();
  for (const i of all) {
    const meant = / did you mean "(.+)"\?$/.exec(i.message)?.[1];
    if (meant === undefined) continue;
    const path = [...i.path.slice(0, -1), meant];
    const target = pathText(path);
    const missing = all.find(
      (o) => o !== i && pathText(o.path) === target && valueAt(input, path) === undefined,
    );
    if (missing === undefined) continue;
    dropped.add(missing);
    i.message += ` (${pathText([...root, ...path])} is required)`;
  }
  return all.filter((i) => !dropped.has(i));
}

const pathText = (path: readonly PropertyKey[]) => path.map(String).join(".") || "(root)";

/** `path: problem` lines, one per issue (see {@link keyedIssues}). */
export function issueLines(issues: readonly IssueLike[], input?: unknown): string[] {
  return keyedIssues(issues, input).map((i) => `${pathText(i.path)}: ${i.message}`);
}

function valueAt(value: unknown, path: readonly PropertyKey[]): unknown {
  let v = value;
  for (const k of path) {
    if (typeof v !== "object" || v === null) return undefined;
    v = (v as Record<PropertyKey, unknown>)[k];
  }
  return v;
}
