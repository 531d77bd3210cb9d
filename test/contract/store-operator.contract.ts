import { describe, expect, it } from "vitest";
import type { ExecutionRecord, NewExecution, Store } from "../../coordinator/store/port.js";
import type { ExecState } from "../../shared/fsm.js";

/**
 * What the operator surface needs of a store — deleting jobs, paging executions, counting open
 * ones — as part of the Store contract. Called inside `storeContract` with its fresh store, and
 * its helpers (passed in, so this file does not import the suite that imports it).
 */
export function operatorContract(
  current: () => Store,
  helpers: {
    jobDef: (id: string, over?: Record<string, unknown>) => Parameters<Store["putJob"]>[0];
    newExecution: (id: string, over?: Partial<NewExecution>) => NewExecution;
  },
): void {
  const { jobDef, newExecution } = helpers;

  /** Moves an execution to `state` (one write, as a transition would), on `agentId`. */
  async function moveTo(id: string, state: ExecState, agentId: string | null = null) {
    const store = current();
    const e = (await store.getExecution(id)) as ExecutionRecord;
    const ok = await store.applyTransition({
      executionId: id,
      expected: { state: e.state, round: e.round },
      next: {
        state,
        round: e.round + 1,
        attempt: e.attempt,
        maxAttempts: e.maxAttempts,
        dispatches: e.dispatches + 1,
        maxDispatches: e.maxDispatches,
      },
      patch: agentId === null ? {} : { agentId },
      at: 2_000,
      event: "test",
    });
    expect(ok).toBe(true);
  }

  describe("deleting jobs", () => {
    it("deleteJob removes the job, leaves its executions, and says whether it existed", async () => {
      const store = current();
      await store.putJob(jobDef("job-a"), 1_000, 10);
      await store.putJob(jobDef("job-b"), 1_000, 10);
      await store.createExecution(newExecution("ex-1", { jobId: "job-a" }), 20);
      expect(await store.deleteJob("job-a")).toBe(true);
      expect(await store.getJob("job-a")).toBeUndefined();
      expect((await store.listJobs()).map((j) => j.id)).toEqual(["job-b"]);
      expect((await store.listDueFires(10_000)).map((f) => f.jobId)).toEqual(["job-b"]);
      expect((await store.getExecution("ex-1"))?.jobId).toBe("job-a");
      expect(await store.deleteJob("job-a")).toBe(false);
      expect(await store.deleteJob("never")).toBe(false);
    });

    it("a job created again continues its versions and never refires a nominal time", async () => {
      const store = current();
      await store.putJob(jobDef("job-a"), 1_000, 10);
      await store.putJob(jobDef("job-a", { priority: 3 }), 1_000, 11);
      // Job a's nominal time 1000, fired as execution `id`.
      const fire1000 = (id: string, at: number) =>
        store.recordFire({
          jobId: "job-a",
          scheduledFor: 1_000,
          nextFireAt: 2_000,
          execution: newExecution(id, { jobId: "job-a" }),
          at,
        });
      expect(await fire1000("ex-1", 990)).toBe(true);
      await store.deleteJob("job-a");
      const again = await store.putJob(jobDef("job-a"), 1_000, 20);
      expect(again.version).toBe(3);
      // The fire ledger outlives the job: 1000 was fired by the deleted one.
      expect(await fire1000("ex-2", 995)).toBe(false);
      expect(await store.getExecution("ex-2")).toBeUndefined();
    });
  });

  describe("paging executions", () => {
    /**
     * 23 executions: created at 100, 110, … with three ties (same createdAt, ordered by id);
     * jobs j1 and j2 and commands; some dispatched to agents.
     */
    async function seed(): Promise<string[]> {
      const store = current();
      const created: { id: string; createdAt: number }[] = [];
      for (let i = 0; i < 23; i++) {
        const id = `ex-${String(i).padStart(2, "0")}`;
        const createdAt = 100 + Math.floor(i / 2) * 10; // pairs share a creation time
        const command = i % 5 === 4;
        await store.createExecution(
          newExecution(id, {
            createdAt,
            kind: command ? "command" : "job",
            jobId: command ? null : i % 2 === 0 ? "j1" : "j2",
            targetAgentId: command ? "ag-c" : null,
          }),
          1,
        );
        created.push({ id, createdAt });
      }
      // Newest first: createdAt descending, then id descending.
      return created
        .sort((a, b) => b.createdAt - a.createdAt || (a.id < b.id ? 1 : -1))
        .map((e) => e.id);
    }

    async function all(query: Omit<Parameters<Store["pageExecutions"]>[0], "cursor">) {
      const store = current();
      const ids: string[] = [];
      let cursor: string | undefined;
      let pages = 0;
      for (;;) {
        const page = await store.pageExecutions({ ...query, ...(cursor ? { cursor } : {}) });
        expect(page.items.length).toBeLessThanOrEqual(query.limit);
        ids.push(...page.items.map((e) => e.id));
        pages++;
        if (page.nextCursor === null) break;
        expect(page.items).toHaveLength(query.limit);
        cursor = page.nextCursor;
      }
      return { ids, pages };
    }

    it("pages newest first through every execution, ties by id, no repeat and no gap", async () => {
      const expected = await seed();
      const { ids, pages } = await all({ limit: 5 });
      expect(ids).toEqual(expected);
      expect(pages).toBe(5);
      // A page size that divides the total ends with an empty-free last page.
      expect((await all({ limit: 23 })).pages).toBe(1);
      expect((await all({ limit: 1 })).ids).toEqual(expected);
    });

    it("new executions created between pages do not shift the pages", async () => {
      const expected = await seed();
      const store = current();
      const first = await store.pageExecutions({ limit: 4 });
      await store.createExecution(newExecution("ex-new", { createdAt: 10_000 }), 1);
      const rest = await all({ limit: 4 });
      expect(rest.ids[0]).toBe("ex-new");
      const second = await store.pageExecutions({ limit: 100, cursor: first.nextCursor as string });
      expect([...first.items, ...second.items].map((e) => e.id)).toEqual(expected);
    });

    it("filters by job, states, agent (or a command's target), kind and creation time", async () => {
      const expected = await seed();
      const store = current();
      await moveTo("ex-00", "DISPATCHED", "ag-1");
      await moveTo("ex-01", "DISPATCHED", "ag-2");
      await moveTo("ex-02", "DISPATCHED", "ag-1");
      await moveTo("ex-02", "SUCCEEDED");
      const byId = new Map(
        await Promise.all(
          expected.map(
            async (id) => [id, (await store.getExecution(id)) as ExecutionRecord] as const,
          ),
        ),
      );
      const expect_ = (pred: (e: ExecutionRecord) => boolean) =>
        expected.filter((id) => pred(byId.get(id) as ExecutionRecord));

      expect((await all({ limit: 3, jobId: "j1" })).ids).toEqual(expect_((e) => e.jobId === "j1"));
      expect((await all({ limit: 3, states: ["DISPATCHED", "SUCCEEDED"] })).ids).toEqual([
        "ex-02",
        "ex-01",
        "ex-00",
      ]);
      expect((await all({ limit: 3, agentId: "ag-1" })).ids).toEqual(["ex-02", "ex-00"]);
      // Commands not dispatched yet count as their target agent's.
      const commands = expect_((e) => e.kind === "command");
      expect(commands.length).toBe(4);
      expect((await all({ limit: 3, agentId: "ag-c" })).ids).toEqual(commands);
      expect((await all({ limit: 3, kind: "command" })).ids).toEqual(commands);
      expect((await all({ limit: 2, createdFrom: 120, createdBefore: 150 })).ids).toEqual(
        expect_((e) => e.createdAt >= 120 && e.createdAt < 150),
      );
      expect(
        (await all({ limit: 2, jobId: "j2", states: ["PENDING"], createdBefore: 140 })).ids,
      ).toEqual(expect_((e) => e.jobId === "j2" && e.state === "PENDING" && e.createdAt < 140));
      expect((await all({ limit: 5, jobId: "nope" })).ids).toEqual([]);
    });

    it("refuses a cursor it did not make with AX_STORE_BAD_CURSOR", async () => {
      await seed();
      const store = current();
      for (const cursor of ["not a cursor", "e30", Buffer.from("[1]").toString("base64url")]) {
        await expect(store.pageExecutions({ limit: 5, cursor })).rejects.toMatchObject({
          code: "AX_STORE_BAD_CURSOR",
        });
      }
    });
  });

  describe("counting open executions", () => {
    it("counts each open state and leaves out finished ones", async () => {
      const store = current();
      for (const id of ["a", "b", "c", "d", "e"]) await store.createExecution(newExecution(id), 1);
      await moveTo("a", "DISPATCHED", "ag-1");
      await moveTo("b", "DISPATCHED", "ag-1");
      await moveTo("b", "RUNNING");
      await moveTo("c", "CANCELED");
      expect(await store.countOpenExecutions()).toEqual({ PENDING: 2, DISPATCHED: 1, RUNNING: 1 });
    });
  });
}
