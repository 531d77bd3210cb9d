import type * as z from "zod/mini";
import { describeIssue } from "../../../shared/protocol/codec.js";
import type { HandlerContext } from "../registry.js";

/** A HandlerContext for tests, with the AbortController behind its signal; progress and log do nothing. */
export function testContext(
  overrides: Partial<HandlerContext> = {},
): HandlerContext & { abort: AbortController } {
  const abort = new AbortController();
  return {
    executionId: "exec-1",
    attempt: 1,
    round: 1,
    shard: undefined,
    signal: abort.signal,
    progress: () => {},
    log: () => {},
    ...overrides,
    abort,
  };
}

/**
 * What the executor would answer for `input` (rule 6): the `invalid_params` message for the first
 * issue, as `params.<field>: <problem>`, or "ok" when the params pass.
 */
export function paramsError(schema: z.ZodMiniType, input: unknown): string {
  const result = schema.safeParse(input, { error: describeIssue });
  if (result.success) return "ok";
  const first = result.error.issues[0];
  return `${["params", ...(first?.path.map(String) ?? [])].join(".")}: ${first?.message}`;
}

/** The HandlerFailure `run` rejects with, as plain data to compare; throws if it resolves. */
export async function failureOf(
  run: Promise<unknown>,
): Promise<{ name: string; message: string; retryable: boolean }> {
  try {
    await run;
  } catch (err) {
    const e = err as { name: string; message: string; retryable: boolean };
    return { name: e.name, message: e.message, retryable: e.retryable };
  }
  throw new Error("expected the handler to fail, but it succeeded");
}
