import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import { agentConfigSchema } from "../agent/config.js";
import { AGENT_FIELD_DOCS, AGENT_PATH_FIELDS } from "../agent/config-docs.js";
import {
  COORDINATOR_PATH_FIELDS,
  coordinatorConfigSchema,
  DEPRECATED_KEYS,
  type FieldDoc,
  tokensAuthSchema,
} from "./config.js";
import { durationSchema } from "./domain/duration.js";

/*
 * docs/config.md's tables, generated from the zod schemas of both configs: every field, its type,
 * its default and what it means. The coordinator's meanings are the schemas' `.meta()`; the
 * agent's are in agent/config-docs.ts (kept out of the agent bundle). The rest of the page is
 * written by hand; only the blocks between `<!-- config:NAME -->` and `<!-- /config:NAME -->`
 * are generated. `npm run docs:config` rewrites them; config-docs.test.ts fails when the page
 * differs from what this makes.
 */

export const CONFIG_DOC = fileURLToPath(new URL("../docs/config.md", import.meta.url));

/** The parts of a zod or zod/mini schema read here. */
interface Node {
  _zod: { def: Def };
}
interface Def {
  type: string;
  shape?: Record<string, Node>;
  innerType?: Node;
  in?: Node;
  element?: Node;
  valueType?: Node;
  options?: Node[];
  entries?: Record<string, string | number>;
  values?: unknown[];
  defaultValue?: unknown;
  format?: string;
  checks?: { _zod: { def: CheckDef } }[];
}
interface CheckDef {
  check: string;
  format?: string;
  value?: number;
  minimum?: number;
  maximum?: number;
}

/** One field, as its row of a table shows it. */
export interface FieldRow {
  path: string;
  type: string;
  default: string;
  doc: FieldDoc | undefined;
}

interface WalkOptions {
  /** The field's meaning, by its path and the schema nodes around it (outermost first). */
  docOf(path: string, nodes: readonly Node[]): FieldDoc | undefined;
  /** Fields that name a file or folder (`[]` for a list's items). */
  paths: ReadonlySet<string>;
  /** Fields whose schema hides their shape (a transform), and the schema that has it. */
  expand?: Readonly<Record<string, { schema: Node; type: string }>>;
}

const asNode = (schema: unknown) => schema as Node;
const DURATION = asNode(durationSchema);

/** Walks a config schema and lists every field. */
export function fieldRows(schema: unknown, options: WalkOptions): FieldRow[] {
  const rows: FieldRow[] = [];
  const root = unwrap(asNode(schema));
  for (const [key, node] of Object.entries(root.core._zod.def.shape ?? {})) {
    walk(node, key, rows, options);
  }
  return rows;
}

interface Unwrapped {
  core: Node;
  nodes: Node[];
  optional: boolean;
  hasDefault: boolean;
  defaultValue: unknown;
  duration: boolean;
}

/** Looks through optional, default and pipe (transform) wrappers to the schema of the value. */
function unwrap(node: Node): Unwrapped {
  const out: Unwrapped = {
    core: node,
    nodes: [],
    optional: false,
    hasDefault: false,
    defaultValue: undefined,
    duration: false,
  };
  let n: Node | undefined = node;
  while (n) {
    out.nodes.push(n);
    out.core = n;
    if (n === DURATION) out.duration = true;
    const def: Def = n._zod.def;
    if (def.type === "optional") {
      out.optional = true;
      n = def.innerType;
    } else if (def.type === "default" || def.type === "prefault") {
      if (!out.hasDefault) {
        out.hasDefault = true;
        out.defaultValue = def.defaultValue;
      }
      n = def.innerType;
    } else if (def.type === "pipe") {
      n = def.in;
    } else {
      n = undefined;
    }
  }
  return out;
}

function walk(node: Node, path: string, rows: FieldRow[], o: WalkOptions): void {
  const u = unwrap(node);
  const expanded = o.expand?.[path];
  const def = u.core._zod.def;
  const type = expanded?.type ?? typeName(u, o.paths.has(path));
  rows.push({
    path,
    type,
    default: defaultText(u, type),
    doc: o.docOf(path, u.nodes),
  });
  const shape = expanded
    ? unwrap(expanded.schema).core._zod.def.shape
    : def.type === "object"
      ? def.shape
      : def.type === "array" && def.element
        ? objectShape(def.element)
        : undefined;
  const prefix = def.type === "array" ? `${path}[]` : path;
  for (const [key, child] of Object.entries(shape ?? {})) walk(child, `${prefix}.${key}`, rows, o);
}

function objectShape(node: Node): Record<string, Node> | undefined {
  const core = unwrap(node).core._zod.def;
  return core.type === "object" ? core.shape : undefined;
}

function checksOf(def: Def): CheckDef[] {
  const own = def.format === undefined ? [] : [{ check: "number_format", format: def.format }];
  return [...own, ...(def.checks ?? []).map((c) => c._zod.def)];
}

/** `integer, 1 to 3600`, `string of 16+ characters`, `"NORMAL" or "FULL"` … */
function typeName(u: Unwrapped, isPath: boolean): string {
  if (u.duration) return "duration";
  const def = u.core._zod.def;
  const checks = checksOf(def);
  switch (def.type) {
    case "string": {
      if (isPath) return "path";
      const min = checks.find((c) => c.check === "min_length")?.minimum;
      return min !== undefined && min > 1 ? `string of ${min}+ characters` : "string";
    }
    case "number": {
      const int = checks.some((c) => c.check === "number_format" && /int/.test(c.format ?? ""));
      const min = checks.find((c) => c.check === "greater_than")?.value;
      const max = checks.find((c) => c.check === "less_than")?.value;
      const name = int ? "integer" : "number";
      if (min !== undefined && max !== undefined) return `${name}, ${min} to ${max}`;
      if (min !== undefined) return `${name}, at least ${min}`;
      return max !== undefined ? `${name}, at most ${max}` : name;
    }
    case "boolean":
      return "boolean";
    case "enum":
      return Object.values(def.entries ?? {})
        .map((v) => `\`${JSON.stringify(v)}\``)
        .join(" or ");
    case "literal":
      return (def.values ?? []).map((v) => `\`${JSON.stringify(v)}\``).join(" or ");
    case "record":
      return "object of strings";
    case "object":
      return "object";
    case "array": {
      const item = def.element ? unwrap(def.element) : undefined;
      const of = item ? typeName(item, isPath) : "values";
      const max = checks.find((c) => c.check === "max_length")?.maximum;
      const list = of === "object" ? "list of objects" : `list of ${of.replace(/^(\w+)/, "$1s")}`;
      return max === undefined ? list : `${list}, at most ${max}`;
    }
    default:
      return def.type;
  }
}

/**
 * The default as the table shows it: `` `5000` (5 s) `` for a duration, `` `"ax"` ``, `required`;
 * nothing for a section (its fields have theirs), `none` for an optional field.
 */
function defaultText(u: Unwrapped, type: string): string {
  if (!u.hasDefault) return u.optional ? "none" : "required";
  if (type === "object") return "";
  const v = u.defaultValue;
  const text = `\`${JSON.stringify(v)}\``;
  return u.duration && typeof v === "number" ? `${text} (${humanMs(v)})` : text;
}

function humanMs(ms: number): string {
  for (const [unit, size] of [
    ["h", 3_600_000],
    ["min", 60_000],
    ["s", 1000],
  ] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size} ${unit}`;
  }
  return `${ms} ms`;
}

/** The coordinator config's fields; their meanings are the schemas' `.meta()`. */
export function coordinatorRows(): FieldRow[] {
  return fieldRows(coordinatorConfigSchema, {
    docOf: (_path, nodes) => {
      for (const n of nodes) {
        const meta = z.globalRegistry.get(n as never) as FieldDoc | undefined;
        if (meta?.description !== undefined) return meta;
      }
      return undefined;
    },
    paths: new Set(COORDINATOR_PATH_FIELDS),
    expand: { "http.auth": { schema: asNode(tokensAuthSchema), type: '`"off"` or object' } },
  });
}

/** The agent config's fields (every handler and feature built in); meanings from config-docs. */
export function agentRows(): FieldRow[] {
  return fieldRows(agentConfigSchema(), {
    docOf: (path) => AGENT_FIELD_DOCS[path],
    paths: new Set(AGENT_PATH_FIELDS),
  });
}

const cell = (text: string) => text.replace(/\|/g, "\\|").replace(/\n/g, " ");

/** A Markdown table with its columns padded, as Prettier lays it out. */
export function markdownTable(header: readonly string[], rows: readonly string[][]): string {
  const all = [header, ...rows].map((r) => r.map(cell));
  const widths = header.map((_, i) => Math.max(3, ...all.map((r) => (r[i] ?? "").length)));
  const line = (r: readonly string[]) =>
    `| ${r.map((c, i) => c.padEnd(widths[i] ?? 0)).join(" | ")} |`;
  const [head, ...body] = all;
  return [
    line(head ?? []),
    `| ${widths.map((w) => "-".repeat(w)).join(" | ")} |`,
    ...body.map(line),
  ].join("\n");
}

function fieldTable(rows: readonly FieldRow[]): string {
  return markdownTable(
    ["field", "type", "default", "meaning"],
    rows.map((r) => [
      `\`${r.path}\``,
      r.type,
      r.doc?.defaultText ?? r.default,
      r.doc?.description ?? "",
    ]),
  );
}

/** The generated blocks of docs/config.md, by name. */
export function generatedBlocks(): Record<string, string> {
  return {
    coordinator: fieldTable(coordinatorRows()),
    "coordinator-deprecated": markdownTable(
      ["deprecated name", "read as"],
      Object.entries(DEPRECATED_KEYS).map(([old, now]) => [`\`${old}\``, `\`${now}\``]),
    ),
    agent: fieldTable(agentRows()),
  };
}

/** The page with each generated block replaced by what the schemas say now. */
export function renderConfigDoc(page: string): string {
  let out = page;
  for (const [name, body] of Object.entries(generatedBlocks())) {
    const start = `<!-- config:${name} -->`;
    const end = `<!-- /config:${name} -->`;
    const a = out.indexOf(start);
    const b = out.indexOf(end);
    if (a === -1 || b < a) throw new Error(`docs/config.md: no ${start} … ${end} block`);
    out = `${out.slice(0, a + start.length)}\n${body}\n${out.slice(b)}`;
  }
  return out;
}

// `npm run docs:config`: rewrites the generated blocks of docs/config.md.
if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const page = readFileSync(CONFIG_DOC, "utf8");
  const next = renderConfigDoc(page);
  if (next === page) process.stdout.write("docs/config.md is up to date\n");
  else {
    writeFileSync(CONFIG_DOC, next);
    process.stdout.write("docs/config.md regenerated\n");
  }
}
