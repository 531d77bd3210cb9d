import { describe, expect, it } from "vitest";
import * as z from "zod/mini";
import { BUILTIN_HANDLERS, echoHandler, failHandler, sleepHandler } from "./builtins.js";
import { defineHandler, type HandlerContext, HandlerFailure, HandlerRegistry } from "./registry.js";

function context(signal: AbortSignal = new AbortController().signal): HandlerContext {
  return {
    executionId: "e1",
    attempt: 1,
    round: 1,
    shard: undefined,
    signal,
    progress: () => {},
    log: () => {},
  };
}

describe("defineHandler and HandlerRegistry", () => {
  it("defines a handler with its name, params schema and run", async () => {
    const add = defineHandler(
      "math.add",
      z.object({ a: z.number(), b: z.number() }),
      async (_ctx, p) => ({
        sum: p.a + p.b,
      }),
    );
    expect(add.name).toBe("math.add");
    expect(add.params.safeParse({ a: 1, b: 2 }).success).toBe(true);
    expect(add.params.safeParse({ a: 1 }).success).toBe(false);
    await expect(add.run(context(), { a: 1, b: 2 })).resolves.toEqual({ sum: 3 });
  });

  it("looks handlers up by name and lists the names sorted", () => {
    const zeta = defineHandler("zeta", z.object({}), async () => undefined);
    const registry = new HandlerRegistry([zeta, ...BUILTIN_HANDLERS]);
    expect(registry.names()).toEqual(["echo", "fail", "sleep", "zeta"]);
    expect(registry.get("sleep")).toBe(sleepHandler);
    expect(registry.get("nope")).toBeUndefined();
    const alpha = defineHandler("alpha", z.object({}), async () => undefined);
    registry.add(alpha);
    expect(registry.names()).toEqual(["alpha", "echo", "fail", "sleep", "zeta"]);
  });

  it("refuses a name the protocol would refuse in hello", () => {
    const noop = async () => undefined;
    for (const name of ["1 bad/name", "", "a".repeat(65), "-x", "x y"]) {
      expect(() => new HandlerRegistry([defineHandler(name, z.object({}), noop)]), name).toThrow(
        TypeError,
      );
    }
    expect(
      new HandlerRegistry([defineHandler("site.valve-2_open", z.object({}), noop)]).names(),
    ).toEqual(["site.valve-2_open"]);
  });

  it("refuses a name defined twice", () => {
    const again = defineHandler("echo", z.object({}), async () => undefined);
    expect(() => new HandlerRegistry([echoHandler, again])).toThrow(
      new TypeError('handler "echo" is defined twice'),
    );
    const registry = new HandlerRegistry([echoHandler]);
    expect(() => registry.add(again)).toThrow(TypeError);
    expect(registry.get("echo")).toBe(echoHandler);
  });

  it("HandlerFailure is retryable unless told otherwise", () => {
    expect(new HandlerFailure("x").retryable).toBe(true);
    expect(new HandlerFailure("x", { retryable: false }).retryable).toBe(false);
    const cause = new Error("root");
    const err = new HandlerFailure("x", { cause });
    expect(err.cause).toBe(cause);
    expect(err.name).toBe("HandlerFailure");
    expect(err).toBeInstanceOf(Error);
  });
});

describe("built-in handlers (rule 11)", () => {
  it("echo returns { echo: params }", async () => {
    const params = { a: 1, nested: { b: [1, 2] } };
    await expect(echoHandler.run(context(), params)).resolves.toEqual({ echo: params });
    expect(echoHandler.params.safeParse("not an object").success).toBe(false);
  });

  it("sleep takes { ms } within 0..86 400 000", () => {
    expect(sleepHandler.params.safeParse({ ms: 0 }).success).toBe(true);
    expect(sleepHandler.params.safeParse({ ms: 86_400_000 }).success).toBe(true);
    expect(sleepHandler.params.safeParse({ ms: 86_400_001 }).success).toBe(false);
    expect(sleepHandler.params.safeParse({ ms: -1 }).success).toBe(false);
    expect(sleepHandler.params.safeParse({ ms: "x" }).success).toBe(false);
    expect(sleepHandler.params.safeParse({}).success).toBe(false);
  });

  it("sleep resolves after ms on the real clock", async () => {
    const started = performance.now();
    await expect(sleepHandler.run(context(), { ms: 30 })).resolves.toEqual({ sleptMs: 30 });
    // Node may fire a timer up to ~1 ms early; no upper bound on a loaded machine.
    expect(performance.now() - started).toBeGreaterThanOrEqual(28);
  });

  it("sleep rejects promptly on abort", async () => {
    const abort = new AbortController();
    const started = performance.now();
    const run = sleepHandler.run(context(abort.signal), { ms: 60_000 });
    setTimeout(() => abort.abort(), 10);
    await expect(run).rejects.toThrow(new HandlerFailure("aborted"));
    expect(performance.now() - started).toBeLessThan(10_000);
  });

  it("sleep rejects at once when already aborted", async () => {
    const abort = new AbortController();
    abort.abort();
    await expect(sleepHandler.run(context(abort.signal), { ms: 60_000 })).rejects.toBeInstanceOf(
      HandlerFailure,
    );
  });

  it("fail throws a HandlerFailure with the given message and retryability", async () => {
    await expect(failHandler.run(context(), {})).rejects.toMatchObject({
      name: "HandlerFailure",
      message: "failed on purpose",
      retryable: true,
    });
    await expect(
      failHandler.run(context(), { retryable: false, message: "told to" }),
    ).rejects.toMatchObject({ message: "told to", retryable: false });
    expect(failHandler.params.safeParse({ retryable: "no" }).success).toBe(false);
    expect(failHandler.params.safeParse({ message: "x".repeat(1025) }).success).toBe(false);
  });
});
