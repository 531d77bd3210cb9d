/**
 * Firmware profiles (DESIGN §2): one per device class, in firmware-profiles/NAME.json. A profile
 * says what an agent bundle contains (handlers, features), the agent's runtime defaults (wheel,
 * capacity, journal, heartbeat, keepalive), how Node is started (heap cap) and the budgets the
 * bundle must meet. docs/bundles.md documents every field.
 */
import * as z from "zod/mini";
import { AxError } from "./errors.js";
import { FEATURE_NAMES, HANDLER_NAMES } from "./profile-names.js";
import { describeIssue } from "./protocol/codec.js";

export {
  FEATURE_NAMES,
  type FeatureName,
  HANDLER_NAMES,
  type HandlerName,
} from "./profile-names.js";

/** A profile's name: also its file name and the bundle's folder name. */
export const PROFILE_NAME_PATTERN = /^[a-z0-9][a-z0-9-]{0,62}$/;

const int = (min: number, max: number) => z.int().check(z.gte(min), z.lte(max));

function unique<T>(what: string) {
  return z.refine<T[]>((list) => new Set(list).size === list.length, `must not repeat ${what}`);
}

/** The profile file's schema. Ranges match the agent config's, so a valid profile always applies. */
export const firmwareProfileSchema = z.strictObject({
  name: z.string().check(z.regex(PROFILE_NAME_PATTERN, "must be 1-63 of a-z 0-9 - (a file name)")),
  description: z.string().check(z.minLength(1), z.maxLength(500)),
  node: z.strictObject({
    /** Node's `--max-old-space-size`, in MiB, in the systemd unit's ExecStart. */
    maxOldSpaceMb: int(16, 65_536),
    /**
     * Node's `--max-semi-space-size`, in MiB: caps the young generation, which otherwise grows to
     * 2 × 16 MiB under a burst of messages and stays. @default V8's own
     */
    maxSemiSpaceMb: z.optional(int(1, 256)),
  }),
  wheel: z._default(
    z.strictObject({
      /** @default 20 */
      tickMs: z._default(int(1, 1000), 20),
      /** @default 512 */
      slots: z._default(int(16, 65_536), 512),
    }),
    { tickMs: 20, slots: 512 },
  ),
  capacity: z.strictObject({
    concurrency: int(1, 1024),
    queue: int(0, 100_000),
    maxPending: int(1, 1_000_000),
  }),
  journal: z.strictObject({
    /** Unacknowledged reports held at most before new dispatches are refused. */
    maxOutbox: int(100, 10_000_000),
    /** How long finished commands are kept to answer duplicates. */
    retainMs: z.int().check(z.gte(60_000)),
  }),
  heartbeatMs: int(100, 600_000),
  keepaliveS: int(1, 3600),
  handlers: z
    .array(
      z.enum(HANDLER_NAMES, {
        error: (issue) =>
          `unknown handler ${JSON.stringify(issue.input)}; known: ${HANDLER_NAMES.join(", ")}`,
      }),
    )
    .check(z.minLength(1), unique("a handler")),
  features: z._default(
    z
      .array(
        z.enum(FEATURE_NAMES, {
          error: (issue) =>
            `unknown feature ${JSON.stringify(issue.input)}; known: ${FEATURE_NAMES.join(", ")}`,
        }),
      )
      .check(unique("a feature")),
    [],
  ),
  budgets: z.strictObject({
    /** Bytes of the minified agent file (agent.mjs) at most. */
    bundleBytes: int(1024, 100_000_000),
    /** RSS of the idle agent, registered and settled, in MiB at most. */
    idleRssMb: z.number().check(z.gt(0)),
  }),
});

export type FirmwareProfileInput = z.input<typeof firmwareProfileSchema>;
export type FirmwareProfile = Readonly<z.output<typeof firmwareProfileSchema>>;

/**
 * Parses a profile; a bad one throws AX_PROFILE_INVALID naming `source`, each field's path and
 * its problem. `expectedName`, when given, must be the profile's `name` (its file name).
 */
export function parseFirmwareProfile(
  input: unknown,
  source: string,
  expectedName?: string,
): FirmwareProfile {
  const result = firmwareProfileSchema.safeParse(input, { error: describeIssue });
  const lines = result.success
    ? []
    : result.error.issues.map((i) => `${i.path.map(String).join(".") || "(root)"}: ${i.message}`);
  if (result.success && expectedName !== undefined && result.data.name !== expectedName) {
    lines.push(`name: must be "${expectedName}", the file's name, got "${result.data.name}"`);
  }
  if (!result.success || lines.length > 0) {
    throw new AxError(
      "AX_PROFILE_INVALID",
      `${source}: invalid firmware profile\n${lines.join("\n")}`,
      {
        context: { source },
      },
    );
  }
  return Object.freeze(result.data);
}

/**
 * The agent config defaults a profile sets (its runtime settings, in the agent config's shape).
 * A device's own config file overrides any of them (docs/bundles.md, "Precedence").
 */
export function profileAgentDefaults(p: FirmwareProfile): Record<string, unknown> {
  return {
    profile: p.name,
    tickMs: p.wheel.tickMs,
    wheelSlots: p.wheel.slots,
    capacity: { ...p.capacity },
    journal: { maxOutbox: p.journal.maxOutbox, retainMs: p.journal.retainMs },
    heartbeatMs: p.heartbeatMs,
    mqtt: { keepaliveS: p.keepaliveS },
  };
}
