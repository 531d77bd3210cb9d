import { describe, expect, it } from "vitest";
import { AxError } from "../../../shared/errors.js";
import { CommitTracker } from "./commits.js";

/** A write whose outcome the test decides. */
function deferred() {
  let resolve!: () => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Lets every queued microtask and promise reaction run. */
const drain = () => new Promise<void>((resolve) => setImmediate(resolve));

describe("CommitTracker", () => {
  const tracker = () => {
    const errors: Error[] = [];
    const t = new CommitTracker((err) => errors.push(err));
    const write = () => {
      const d = deferred();
      t.track(d.promise).catch(() => {});
      return d;
    };
    return { t, errors, write };
  };

  it("runs after-commit work at once when nothing is in flight", async () => {
    const { t } = tracker();
    const ran: string[] = [];
    t.afterCommit(() => ran.push("a"));
    expect(ran).toEqual([]);
    await drain();
    expect(ran).toEqual(["a"]);
  });

  it("waits for the writes started before it, in any order, and not for later ones", async () => {
    const { t, write } = tracker();
    const ran: string[] = [];
    const [w1, w2] = [write(), write()];
    t.afterCommit(() => ran.push("after 1-2"));
    const w3 = write();
    t.afterCommit(() => ran.push("after 1-3"));
    w2.resolve();
    await drain();
    expect(ran).toEqual([]);
    w1.resolve();
    await drain();
    expect(ran).toEqual(["after 1-2"]);
    expect(t.pending).toBe(1);
    w3.resolve();
    await drain();
    expect(ran).toEqual(["after 1-2", "after 1-3"]);
    expect(t.pending).toBe(0);
  });

  it("drops the work that waited for a write that failed, and only that", async () => {
    const { t, errors, write } = tracker();
    const ran: string[] = [];
    const early = write();
    early.reject(new Error("early"));
    await drain();
    // Settled (failed) before the next work was asked for: it does not drop it.
    const w1 = write();
    t.afterCommit(() => ran.push("waits for w1"));
    const w2 = write();
    t.afterCommit(() => ran.push("waits for w1, w2"));
    const w3 = write();
    t.afterCommit(() => ran.push("waits for w1-w3"));
    w1.resolve();
    w2.reject(new Error("w2"));
    w3.resolve();
    await drain();
    expect(ran).toEqual(["waits for w1"]);
    expect(errors.map((e) => e.message)).toEqual(["early", "w2"]);
    // A failure settled before this was asked for holds nothing back.
    t.afterCommit(() => ran.push("later"));
    await drain();
    expect(ran).toEqual(["waits for w1", "later"]);
  });

  it("a refusal (a conflict) is an answer: it neither drops work nor reaches onError", async () => {
    const { t, errors, write } = tracker();
    const ran: string[] = [];
    const w = write();
    t.afterCommit(() => ran.push("a"));
    w.reject(new AxError("AX_STORE_CONFLICT", "changed meanwhile"));
    await drain();
    expect(ran).toEqual(["a"]);
    expect(errors).toEqual([]);
  });

  it("runs after the continuation of the write it waited for", async () => {
    const { t } = tracker();
    const order: string[] = [];
    const d = deferred();
    const tracked = t.track(d.promise);
    t.afterCommit(() => order.push("after commit"));
    const caller = tracked.then(() => order.push("caller"));
    d.resolve();
    await caller;
    await drain();
    expect(order).toEqual(["caller", "after commit"]);
  });

  it("flush rejects with a failure of a write in flight; settle waits for them all", async () => {
    const { t, write } = tracker();
    const [a, b] = [write(), write()];
    const flushed = t.flush();
    const settled = t.settle();
    b.reject(new Error("b"));
    a.resolve();
    await expect(flushed).rejects.toThrow("b");
    await expect(settled).resolves.toBeUndefined();
  });

  it("keeps every piece of work once, in order, with thousands of writes in flight", async () => {
    const { t, write } = tracker();
    const writes = Array.from({ length: 5_000 }, () => write());
    const ran: number[] = [];
    for (let i = 0; i < 5_000; i++) t.afterCommit(() => ran.push(i));
    // Settled from the last to the first: nothing can run before the first settles.
    for (let i = writes.length - 1; i > 0; i--) (writes[i] as ReturnType<typeof write>).resolve();
    await drain();
    expect(ran).toEqual([]);
    (writes[0] as ReturnType<typeof write>).resolve();
    await drain();
    expect(ran).toEqual(Array.from({ length: 5_000 }, (_, i) => i));
    expect(t.pending).toBe(0);
  });
});
