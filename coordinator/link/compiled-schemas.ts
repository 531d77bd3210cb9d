import type * as z from "zod/mini";
import * as core from "zod/v4/core";
import { SCHEMAS_BY_CHANNEL, type SchemaTable } from "../../shared/protocol/index.js";

/**
 * The protocol's schemas (shared/protocol, zod/mini) rebuilt so that every object in them checks
 * its fields with code zod generates for that object's shape (`$ZodObjectJIT`), as zod's classic
 * `z.object` does, instead of zod/mini's loop over the shape. Same definitions, same checks, same
 * issues; a heartbeat's fields are checked in about half the time. zod/mini leaves the generator out
 * to keep the agent's bundle small: only the coordinator, which checks every message of a fleet,
 * takes it.
 *
 * Only the kinds of schema the protocol uses are rebuilt around what they hold (objects, arrays,
 * records, optional, nullable, unions); any other is kept as it is, which is still correct.
 */
export function compileSchemas(table: SchemaTable = SCHEMAS_BY_CHANNEL): SchemaTable {
  const done = new Map<core.$ZodType, core.$ZodType>();
  const out: Record<string, Record<string, z.ZodMiniType>> = {};
  for (const [channel, byType] of Object.entries(table)) {
    const compiled: Record<string, z.ZodMiniType> = {};
    for (const [type, schema] of Object.entries(byType)) {
      compiled[type] = compile(schema, done) as z.ZodMiniType;
    }
    out[channel] = compiled;
  }
  return out as unknown as SchemaTable;
}

/** The protocol's schemas, compiled once for every decode of this process. */
export const COMPILED_SCHEMAS: SchemaTable = compileSchemas();

type AnyDef = core.$ZodTypeDef & Record<string, unknown>;

function compile(schema: core.$ZodType, done: Map<core.$ZodType, core.$ZodType>): core.$ZodType {
  const hit = done.get(schema);
  if (hit !== undefined) return hit;
  const def = schema._zod.def as AnyDef;
  const sub = (s: unknown) => compile(s as core.$ZodType, done);
  let made: core.$ZodType;
  switch (def.type) {
    case "object": {
      const shape: Record<string, core.$ZodType> = {};
      for (const [key, field] of Object.entries(def.shape as Record<string, core.$ZodType>)) {
        shape[key] = sub(field);
      }
      const next: AnyDef = { ...def, shape };
      if (def.catchall !== undefined) next.catchall = sub(def.catchall);
      made = new core.$ZodObjectJIT(next as unknown as core.$ZodObjectDef);
      break;
    }
    case "array":
      made = rebuild(schema, { ...def, element: sub(def.element) });
      break;
    case "record":
      made = rebuild(schema, { ...def, keyType: sub(def.keyType), valueType: sub(def.valueType) });
      break;
    case "optional":
    case "nullable":
      made = rebuild(schema, { ...def, innerType: sub(def.innerType) });
      break;
    case "union":
      made = rebuild(schema, { ...def, options: (def.options as unknown[]).map(sub) });
      break;
    default:
      made = schema;
  }
  done.set(schema, made);
  return made;
}

/** The same kind of schema as `schema`, made again from `def`. */
function rebuild(schema: core.$ZodType, def: AnyDef): core.$ZodType {
  const Made = schema._zod.constr as new (def: AnyDef) => core.$ZodType;
  return new Made(def);
}
