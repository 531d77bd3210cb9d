import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { ERROR_CODES } from "./errors.js";
import { DEFAULT_MAX_PAYLOAD_BYTES, envelopeShape } from "./protocol/envelope.js";
import { LOCAL_STATES, OUTCOMES, REJECT_REASONS } from "./protocol/execution.js";
import { SCHEMAS_BY_CHANNEL } from "./protocol/messages.js";

const errorsDoc = readFileSync(new URL("../docs/errors.md", import.meta.url), "utf8");
const protocolDoc = readFileSync(new URL("../docs/protocol.md", import.meta.url), "utf8");

/** The text under a heading, up to the next heading of the same or a higher level. */
function section(doc: string, heading: string): string {
  const lines = doc.split("\n");
  const start = lines.indexOf(heading);
  if (start === -1) return "";
  const level = heading.indexOf(" ");
  const end = lines.findIndex(
    (line, i) => i > start && /^#{1,6} /.test(line) && line.indexOf(" ") <= level,
  );
  return lines.slice(start + 1, end === -1 ? undefined : end).join("\n");
}

/** The part of a zod/mini schema's definition this test reads. */
interface SchemaNode {
  def: {
    type: string;
    shape?: Record<string, SchemaNode>;
    innerType?: SchemaNode;
    element?: SchemaNode;
  };
}

/** The keys of the object a field holds, looking through optional and array wrappers. */
function nestedKeys(node: SchemaNode): string[] {
  const { def } = node;
  if (def.type === "optional" && def.innerType) return nestedKeys(def.innerType);
  if (def.type === "array" && def.element) return nestedKeys(def.element);
  if (def.type === "object" && def.shape) return Object.keys(def.shape);
  return [];
}

const ENVELOPE_FIELDS = new Set([...Object.keys(envelopeShape), "type"]);

const messages = Object.entries(SCHEMAS_BY_CHANNEL).flatMap(([channel, schemas]) =>
  Object.entries(schemas).map(([type, schema]) => ({
    channel,
    type,
    shape: (schema as unknown as SchemaNode).def.shape ?? {},
  })),
);

describe("docs/errors.md", () => {
  it.each(Object.keys(ERROR_CODES))("documents %s", (code) => {
    const asHeading = errorsDoc.split("\n").includes(`### ${code}`);
    const asTableRow = new RegExp(`^\\|\\s*\`${code}\`\\s*\\|`, "m").test(errorsDoc);
    expect(asHeading || asTableRow, `${code} has no heading or table row`).toBe(true);
    if (asHeading) expect(section(errorsDoc, `### ${code}`).trim().length).toBeGreaterThan(40);
  });

  it("documents no code that does not exist", () => {
    const documented = [...errorsDoc.matchAll(/^### (AX_[A-Z_]+)$/gm)].map((m) => m[1]);
    expect(documented.filter((code) => !Object.hasOwn(ERROR_CODES, code as string))).toEqual([]);
  });
});

describe("docs/protocol.md", () => {
  it("reads the schemas' shapes (guards the test itself)", () => {
    expect(messages.length).toBe(17);
    for (const { type, shape } of messages) expect(Object.keys(shape), type).toContain("msgId");
  });

  it("documents the envelope fields", () => {
    const envelope = section(protocolDoc, "## Envelope");
    for (const field of ENVELOPE_FIELDS) expect(envelope, field).toContain(`\`${field}\``);
  });

  it.each(messages)("documents $channel message $type and all its fields", ({ type, shape }) => {
    const body = section(protocolDoc, `### \`${type}\``);
    expect(body, `no "### \`${type}\`" section`).not.toBe("");
    for (const [field, node] of Object.entries(shape)) {
      if (ENVELOPE_FIELDS.has(field)) continue;
      expect(body, `${type}.${field}`).toContain(`\`${field}\``);
      for (const key of nestedKeys(node)) {
        expect(body, `${type}.${field}.${key}`).toMatch(new RegExp(`\\b${key}\\b`));
      }
    }
  });

  it("has a message section only for real message types", () => {
    const types = new Set(messages.map((m) => m.type));
    const headed = [...protocolDoc.matchAll(/^### `([^`]+)`$/gm)].map((m) => m[1] as string);
    expect(headed.filter((t) => !types.has(t))).toEqual([]);
  });

  it("lists every reject reason, outcome and local state", () => {
    for (const value of [...REJECT_REASONS, ...OUTCOMES, ...LOCAL_STATES]) {
      expect(protocolDoc, value).toContain(`\`${value}\``);
    }
  });

  it("explains every protocol error code and the size limit", () => {
    const errors = section(protocolDoc, "## Validation and decode errors");
    for (const code of Object.keys(ERROR_CODES).filter((c) => c.startsWith("AX_PROTO_"))) {
      expect(errors, code).toContain(`\`${code}\``);
    }
    expect(DEFAULT_MAX_PAYLOAD_BYTES).toBe(64 * 1024);
    expect(section(protocolDoc, "## Size limit")).toContain("64 KiB");
  });

  it("states the clock formulas", () => {
    const clock = section(protocolDoc, "## Clock exchange");
    expect(clock).toContain("offset = ((t1 − t0) + (t2 − t3)) / 2");
    expect(clock).toContain("rtt    = (t3 − t0) − (t2 − t1)");
  });

  it("restates the thirteen normative rules", () => {
    const rules = section(protocolDoc, "## Rules (normative)");
    for (let n = 1; n <= 13; n++) expect(rules).toMatch(new RegExp(`^${n}\\. \\*\\*`, "m"));
  });
});
