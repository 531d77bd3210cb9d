import {
  chmodSync,
  copyFileSync,
  existsSync,
  readdirSync,
  readFileSync,
  writeFileSync,
} from "node:fs";
import { basename, join } from "node:path";
import { fileURLToPath } from "node:url";

const SCRIPT_SOURCE = fileURLToPath(new URL("./chaos-effect.sh", import.meta.url));

/**
 * The side effects of a chaos run. Each execution carries a **tag** in its params, chosen by the
 * scenario when it creates the work, so an effect can be traced to it even when the handler is
 * not told its execution id:
 *
 * - `exec` runs the effect script `SCRIPT MARKER TAG SECONDS`: it appends `begin TAG …` to the
 *   marker file, sleeps SECONDS, then appends `end TAG …` and exits 0. An `end` line is the
 *   effect; it is written last, so a run cut off before it had no effect.
 * - `file.write` appends one line to `EFFECTS/TAG` (the file's name is the tag).
 *
 * A job's executions share their params, so they share a tag: their effects are counted together.
 */
export interface Effects {
  script: string;
  marker: string;
  dir: string;
}

/** Copies the effect script (chaos-effect.sh) and an empty marker file into `dir`. */
export function setUpEffects(dir: string): Effects {
  const script = join(dir, "chaos-effect.sh");
  const marker = join(dir, "effects.log");
  const effectsDir = join(dir, "effects");
  copyFileSync(SCRIPT_SOURCE, script);
  chmodSync(script, 0o755);
  writeFileSync(marker, "");
  return { script, marker, dir: effectsDir };
}

/** Params for an `exec` of the effect script under `tag` that runs `seconds` before its effect. */
export function execParams(fx: Effects, tag: string, seconds = 0): Record<string, unknown> {
  return { command: fx.script, args: [fx.marker, tag, String(seconds)] };
}

/** Params for a `file.write` that appends one line to the tag's file. */
export function fileParams(fx: Effects, tag: string): Record<string, unknown> {
  return { path: join(fx.dir, tag), value: `${tag}\n`, append: true };
}

/** The tag of an execution's params, as {@link execParams} or {@link fileParams} set it. */
export function tagOf(handler: string, params: Record<string, unknown>): string | undefined {
  if (handler === "exec" && Array.isArray(params.args) && typeof params.args[1] === "string") {
    return params.args[1];
  }
  if (handler === "file.write" && typeof params.path === "string") return basename(params.path);
  return undefined;
}

/** How often each tag's effect happened (`end` lines and file lines), and how often it began. */
export function countEffects(fx: Effects): {
  done: Map<string, number>;
  begun: Map<string, number>;
} {
  const done = new Map<string, number>();
  const begun = new Map<string, number>();
  const add = (m: Map<string, number>, k: string) => m.set(k, (m.get(k) ?? 0) + 1);
  for (const line of readFileSync(fx.marker, "utf8").split("\n")) {
    const [what, tag] = line.split(" ");
    if (!tag) continue;
    if (what === "begin") add(begun, tag);
    else if (what === "end") add(done, tag);
  }
  if (existsSync(fx.dir)) {
    for (const name of readdirSync(fx.dir)) {
      const lines = readFileSync(join(fx.dir, name), "utf8").split("\n").filter(Boolean).length;
      done.set(name, (done.get(name) ?? 0) + lines);
      begun.set(name, (begun.get(name) ?? 0) + lines);
    }
  }
  return { done, begun };
}
