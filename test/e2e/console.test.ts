import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type BrowserContext, chromium, type Locator, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AgentProcess, spawnAgentProcess } from "../../coordinator/cli/agent-process.js";
import type { Coordinator } from "../../coordinator/coordinator.js";
import { type HttpServer, startHttpServer } from "../../coordinator/http/server.js";
import {
  startTestCoordinator,
  type TestBroker,
  tempDir,
  testBroker,
  waitForAgentsOnline,
} from "../helpers/env.js";

/**
 * The web console in headless Chromium (Debian's package, driven by playwright-core), against a
 * real coordinator, broker and agent process. The browser is AX_TEST_CHROMIUM, else Debian's
 * /usr/bin/chromium. Where there is none the tests are skipped with a note, except in CI (`CI`
 * set), where a missing browser fails the run: CI installs it, so its absence is a fault there,
 * not a reason to test less. With AX_SCREENSHOTS=1 the screenshots are written to docs/ (the
 * README links them); otherwise to the test's temp folder.
 */
const CHROMIUM =
  process.env.AX_TEST_CHROMIUM ||
  ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => existsSync(p));
const IN_CI = Boolean(process.env.CI) && process.env.CI !== "false";
const NO_BROWSER =
  "no Chromium found (set AX_TEST_CHROMIUM to its path, or install Debian's chromium package)";

if (CHROMIUM === undefined) {
  if (IN_CI) {
    describe("console in headless Chromium", () => {
      it("has a browser to run in", () => {
        throw new Error(`${NO_BROWSER}; CI must run the console's end-to-end tests`);
      });
    });
  } else {
    console.warn(`console end-to-end tests skipped: ${NO_BROWSER}`);
  }
}

describe.skipIf(CHROMIUM === undefined)("console in headless Chromium", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  let coordinator: Coordinator;
  let http: HttpServer;
  let agent: AgentProcess;
  let context: BrowserContext;
  let page: Page;
  let shots: string;
  /** Every file the browser asked for and got a 404, as "status url". */
  const notFound: string[] = [];

  beforeAll(async () => {
    broker = await testBroker();
    tmp = tempDir("ax-console-");
    coordinator = await startTestCoordinator(broker, tmp.dir, 500);
    http = await startHttpServer(coordinator, { port: 0 });
    agent = spawnAgentProcess(tmp.dir, {
      agentId: "console-agent-1",
      mqtt: { url: broker.url, prefix: broker.prefix },
      heartbeatMs: 500,
      tags: { site: "north" },
    });
    await waitForAgentsOnline(coordinator, 1);
    shots =
      process.env.AX_SCREENSHOTS === "1"
        ? fileURLToPath(new URL("../../docs/", import.meta.url))
        : join(tmp.dir, "shots");
    mkdirSync(shots, { recursive: true });
    // An empty profile folder of its own; no background traffic to Google's hosts.
    context = await chromium.launchPersistentContext(join(tmp.dir, "profile"), {
      executablePath: CHROMIUM as string,
      headless: true,
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-quic",
      ],
      viewport: { width: 1280, height: 800 },
    });
    page = context.pages()[0] ?? (await context.newPage());
    // A 404 from the API is an answer (a deleted job); one for a file is a broken page.
    context.on("response", (r) => {
      if (r.status() === 404 && !new URL(r.url()).pathname.startsWith("/api/")) {
        notFound.push(`${r.status()} ${r.url()}`);
      }
    });
  }, 90_000);

  afterAll(async () => {
    await context?.close();
    await agent?.stop(3_000);
    await http?.close();
    await coordinator?.close();
    await broker?.close();
    tmp?.cleanup();
  });

  it("asks for a token on 401, keeps it in sessionStorage and sends it as a header", async () => {
    await page.goto(`${http.url}/#/fleet`);
    await expect
      .poll(() => page.locator("#status.error").textContent())
      .toContain("401: the API needs a token");
    const admin = readFileSync(join(tmp.dir, "ax-secrets", "admin.token"), "utf8").trim();
    await page.locator("#token").fill(admin);
    await page.locator("#token").dispatchEvent("change");
    await page.locator('tr[data-agent="console-agent-1"]').waitFor();
    expect(await page.evaluate("sessionStorage.getItem('ax.token')")).toBe(admin);
    expect(await page.evaluate("localStorage.getItem('ax.token')")).toBeNull();
    expect((await context.cookies()).length).toBe(0);
  });

  it("shows the fleet with the agent online, its profile and clock offset", async () => {
    await page.goto(`${http.url}/#/fleet`);
    const row = page.locator('tr[data-agent="console-agent-1"]');
    await row.waitFor();
    await expect.poll(() => row.locator(".state").textContent()).toBe("online");
    expect(await row.textContent()).toMatch(/ms/);
    await page.screenshot({ path: join(shots, "console-fleet.png") });
  });

  it("opens an agent's page from the fleet: its version, native target and update history", async () => {
    await page.goto(`${http.url}/#/fleet`);
    await page.locator('tr[data-agent="console-agent-1"] a').first().click();
    await page.waitForURL(/#\/fleet\/console-agent-1$/);
    await expect.poll(() => page.locator("h2").first().textContent()).toContain("console-agent-1");
    const facts = await page.locator("dl.facts").textContent();
    expect(facts).toContain(`${process.platform}-${process.arch}-`);
    expect(facts).toContain("echo");
    expect(await page.locator("#agent-updates").textContent()).toContain(
      "No agent.update sent to this agent.",
    );
  });

  it("creates a job, triggers it, opens its execution and shows the timeline to SUCCEEDED", async () => {
    await page.goto(`${http.url}/#/jobs`);
    const definition = {
      id: "console-hello",
      handler: "echo",
      trigger: { type: "cron", expr: "0 0 1 1 *", tz: "Europe/London" },
      params: { message: "hello from the console" },
    };
    await page.locator("#new-job textarea").fill(JSON.stringify(definition, null, 2));
    await page.locator("#new-job button[type=submit]").click();
    // A new job opens on its own page.
    await page.waitForURL(/#\/jobs\/console-hello$/);
    await page.locator("#job-definition").waitFor();
    expect((await coordinator.store.getJob("console-hello"))?.version).toBe(1);
    await page.goto(`${http.url}/#/jobs`);
    const row = page.locator('tr[data-job-row="console-hello"]');
    await row.waitFor();
    expect(await row.textContent()).toContain("cron 0 0 1 1 * (Europe/London)");
    await page.screenshot({ path: join(shots, "console-jobs.png") });

    await row.locator('button[data-act="trigger"]').click();
    await page.waitForURL(/#\/executions\/ex_/);
    const id = decodeURIComponent(page.url().split("/").at(-1) as string);
    // Live updates: the page follows the execution until it ends.
    await expect
      .poll(() => page.locator("h2 .state").first().textContent(), { timeout: 15_000 })
      .toBe("SUCCEEDED");
    const events = await page.locator("tr.timeline-entry td:nth-child(3)").allTextContents();
    expect(events).toEqual(["created", "dispatch", "accepted", "started", "finished"]);
    expect((await coordinator.store.getExecution(id))?.state).toBe("SUCCEEDED");
    expect(await page.locator("pre").first().textContent()).toContain("hello from the console");
    await page.screenshot({ path: join(shots, "console-execution.png"), fullPage: true });
  });

  it("lists executions live, filtered by job", async () => {
    await page.goto(`${http.url}/#/executions`);
    await page.locator("#filters input[name=job]").fill("console-hello");
    await page.locator("#filters button").click();
    const rows = page.locator("tr[data-execution]");
    await expect.poll(() => rows.count()).toBe(1);
    // A new run of the job appears without reloading the page.
    await coordinator.triggerJob("console-hello");
    await expect.poll(() => rows.count(), { timeout: 10_000 }).toBe(2);
  });

  it("sends a device command to agents by tag and links its execution", async () => {
    await page.goto(`${http.url}/#/command`);
    await page.locator("#command input[name=tags]").fill("site=north");
    await page.locator("#command textarea[name=params]").fill('{"n": 7}');
    await page.locator("#command button[type=submit]").click();
    const link = page.locator("#sent a");
    await link.waitFor();
    const id = (await link.textContent()) as string;
    await expect
      .poll(async () => (await coordinator.store.getExecution(id))?.state, { timeout: 15_000 })
      .toBe("SUCCEEDED");
    expect((await coordinator.store.getExecution(id))?.targetAgentId).toBe("console-agent-1");
  });

  it("refuses a device command for an agent the coordinator does not know, and creates nothing", async () => {
    const before = (await coordinator.store.listExecutions({ limit: 1_000_000 })).length;
    await page.goto(`${http.url}/#/command`);
    await page.locator("#command input[name=agentId]").fill("no-such-agent");
    await page.locator("#command button[type=submit]").click();
    await expect
      .poll(() => page.locator("#status.error").textContent())
      .toContain('agent "no-such-agent" is not known');
    expect(await page.locator("#sent a").count()).toBe(0);
    expect((await coordinator.store.listExecutions({ limit: 1_000_000 })).length).toBe(before);
  });

  /**
   * Clicks `button` while the answers to requests for `url` are lost on their way back (each
   * reaches the coordinator; the browser sees the connection fail), and waits for the console
   * to say so.
   */
  async function clickAnswerLost(button: Locator, url: string): Promise<void> {
    await page.route(url, async (route) => {
      await route.fetch();
      await route.abort("failed");
    });
    await button.click();
    await expect
      .poll(() => page.locator("#status.error").textContent())
      .toContain("no answer from the coordinator");
    await page.unroute(url);
  }

  it("makes a device command once: a second submit while it waits, and Send again after a lost answer", async () => {
    const count = async () => (await coordinator.store.listExecutions({ limit: 1_000_000 })).length;
    const before = await count();
    await page.goto(`${http.url}/#/command`);
    await page.locator("#command input[name=agentId]").fill("");
    await page.locator("#command input[name=tags]").fill("site=north");
    await page.locator("#command textarea[name=params]").fill('{"n": 8}');
    // The coordinator makes the command, and its answer is lost on the way back.
    const keys: string[] = [];
    await page.route("**/api/commands", async (route) => {
      keys.push(route.request().headers()["idempotency-key"] ?? "");
      await route.fetch();
      await route.abort("failed");
    });
    await page.locator("#command button[type=submit]").click();
    await expect
      .poll(() => page.locator("#status.error").textContent())
      .toContain("no answer from the coordinator");
    expect(await count()).toBe(before + 1);
    await page.unroute("**/api/commands");
    await page.route("**/api/commands", async (route) => {
      keys.push(route.request().headers()["idempotency-key"] ?? "");
      await route.continue();
    });
    // Send again, the form unchanged: the same request, answered with what was made.
    await page.locator("#command button[type=submit]").click();
    await expect.poll(() => page.locator("#status.ok").textContent()).toContain("made once");
    const made = (await coordinator.store.listExecutions({ limit: 1_000_000 })).filter(
      (e) => (e.params as { n?: number } | undefined)?.n === 8,
    );
    expect(made.map((e) => e.id)).toEqual([await page.locator("#sent a").textContent()]);
    expect(await count()).toBe(before + 1);
    expect(keys).toHaveLength(2);
    expect(keys[0]).toMatch(/^console-/);
    expect(keys[1]).toBe(keys[0]);

    // Another command, submitted twice before the first answer: sent once.
    await page.locator("#command textarea[name=params]").fill('{"n": 9}');
    await page.evaluate(`(() => {
      const form = document.querySelector("#command");
      form.requestSubmit();
      form.requestSubmit();
    })()`);
    await page.locator("#sent a").waitFor();
    await expect.poll(() => page.locator("#status.ok").textContent()).toBe("Sent to 1 agent(s)");
    expect(await count()).toBe(before + 2);
    expect(keys).toHaveLength(3);
    expect(keys[2]).not.toBe(keys[0]);
    await page.unroute("**/api/commands");
  });

  it("triggers a job once when the answer to Trigger now was lost", async () => {
    const runs = async () =>
      (await coordinator.store.listExecutions({ jobId: "console-hello", limit: 1_000 })).map(
        (e) => e.id,
      );
    const before = await runs();
    await page.goto(`${http.url}/#/jobs`);
    const button = page.locator('tr[data-job-row="console-hello"] button[data-act="trigger"]');
    await clickAnswerLost(button, "**/api/jobs/console-hello/trigger");
    const after = await runs();
    expect(after).toHaveLength(before.length + 1);
    const made = after.find((id) => !before.includes(id));
    await button.click();
    await page.waitForURL(/#\/executions\/ex_/);
    expect(decodeURIComponent(page.url().split("/").at(-1) as string)).toBe(made);
    expect(await runs()).toHaveLength(before.length + 1);
  });

  it("retries an execution once when the answer to Retry was lost", async () => {
    const at = Date.now() + 3_600_000;
    const first = await coordinator.sendCommand({
      agentId: "console-agent-1",
      handler: "echo",
      params: { retried: "from the console" },
      at,
      deadline: at + 60_000,
    });
    await coordinator.cancelExecution(first);
    // A retry is a copy of the execution: its params tell it apart.
    const retries = async () =>
      (await coordinator.store.listExecutions({ limit: 1_000_000 }))
        .filter(
          (e) =>
            e.id !== first &&
            (e.params as { retried?: string } | undefined)?.retried === "from the console",
        )
        .map((e) => e.id);
    await page.goto(`${http.url}/#/executions/${encodeURIComponent(first)}`);
    const button = page.locator('button[data-act="retry"]');
    await clickAnswerLost(button, "**/api/executions/*/retry");
    const made = await retries();
    expect(made).toHaveLength(1);
    await button.click();
    await page.waitForURL((url) => !url.hash.endsWith(encodeURIComponent(first)));
    expect(decodeURIComponent(page.url().split("/").at(-1) as string)).toBe(made[0]);
    expect(await retries()).toEqual(made);
  });

  it("previews a cron expression in its time zone, and names the problem in a bad one", async () => {
    await page.goto(`${http.url}/#/preview`);
    await page.locator("#preview input[name=expr]").fill("30 9 * * 1-5");
    await page.locator("#preview input[name=tz]").fill("America/New_York");
    await page.locator("#preview button[type=submit]").click();
    const times = page.locator("tr.preview-time");
    await expect.poll(() => times.count()).toBe(10);
    expect(await times.first().textContent()).toMatch(/09:30:00/);
    await page.screenshot({ path: join(shots, "console-preview.png") });

    await page.locator("#preview input[name=expr]").fill("30 9 *");
    await page.locator("#preview button[type=submit]").click();
    // Named by the form's label, not by the API's path for it (body.trigger.expr).
    await expect
      .poll(() => page.locator("#status").textContent())
      .toMatch(/^400 AX_API_INVALID_REQUEST: Expression: must have 5 fields/);
  });

  it("opens a job's page from the jobs list and from an execution's job link", async () => {
    await page.goto(`${http.url}/#/jobs`);
    await page.locator('tr[data-job-row="console-hello"] a[href="#/jobs/console-hello"]').click();
    await page.waitForURL(/#\/jobs\/console-hello$/);
    await page.locator("#job-definition").waitFor();

    const [id] = await coordinator.triggerJobAll("console-hello");
    await page.goto(`${http.url}/#/executions/${id}`);
    await page.locator(".card a", { hasText: "console-hello" }).click();
    await page.waitForURL(/#\/jobs\/console-hello$/);
    await expect
      .poll(() => page.locator("h2").first().textContent())
      .toContain("Job console-hello");
  });

  it("shows a job's definition, versions, next fire times and recent executions", async () => {
    // A second version, so the page has versions to list.
    const stored = await coordinator.store.getJob("console-hello");
    await coordinator.putJob(
      { ...stored?.definition, params: { message: "hello again" } },
      "console-test",
    );
    const ids = (await coordinator.store.listExecutions({ limit: 100 }))
      .filter((e) => e.jobId === "console-hello")
      .map((e) => e.id);
    expect(ids.length).toBeGreaterThanOrEqual(2);

    await page.goto(`${http.url}/#/jobs/console-hello`);
    await page.reload(); // the previous test left the browser on this page
    const definition = page.locator("#job-definition");
    await definition.waitFor();
    expect(await page.locator("h2").first().textContent()).toContain("v2");
    const facts = await definition.locator("dl").textContent();
    expect(facts).toContain("echo");
    expect(facts).toContain("cron 0 0 1 1 * (Europe/London)");
    expect(facts).toContain("hello again");
    const raw = JSON.parse((await definition.locator("details pre").textContent()) as string);
    expect(raw.trigger).toEqual({ type: "cron", expr: "0 0 1 1 *", tz: "Europe/London" });

    // Versions, newest first: updated to v2 by the test, created as v1.
    const versions = await page.locator("tr.job-version").allTextContents();
    expect(versions.find((v) => v.includes("updated"))).toMatch(/v2.*console-test/);
    expect(versions.some((v) => v.includes("created") && v.includes("v1"))).toBe(true);

    // Next fires: every 1 January at midnight in London, in UTC and in London.
    const fires = page.locator("tr.next-fire");
    await expect.poll(() => fires.count()).toBe(10);
    const first = (await fires.first().locator("td").allTextContents()).map((t) => t.trim());
    expect(first[1]).toMatch(/^\d{4}-01-01 00:00:00\.000Z$/);
    expect(first[2]).toMatch(/^1 Jan \d{4}, 00:00:00 GMT$/);
    expect(await page.locator("th").allTextContents()).toContain("local (Europe/London)");

    // Its executions, each linking to its own page.
    const rows = page.locator("#job-executions tr[data-execution]");
    await expect.poll(() => rows.count()).toBe(ids.length);
    const newest = ids[0] as string;
    await page.screenshot({ path: join(shots, "console-job.png"), fullPage: true });
    await rows.first().locator(`a[href="#/executions/${newest}"]`).click();
    await page.waitForURL(new RegExp(`#/executions/${newest}$`));
    await expect.poll(() => page.locator("h2").first().textContent()).toContain(newest);
  });

  it("keeps a deleted job's page: its history and executions, and says it was deleted", async () => {
    await coordinator.putJob({ id: "console-gone", handler: "echo", trigger: { type: "manual" } });
    const [id] = await coordinator.triggerJobAll("console-gone");
    await coordinator.deleteJob("console-gone", "console-test");
    await page.goto(`${http.url}/#/executions/${id}`);
    await page.locator(".card a", { hasText: "console-gone" }).click();
    await page.waitForURL(/#\/jobs\/console-gone$/);
    await expect
      .poll(() => page.locator("#job-deleted").textContent())
      .toContain("by console-test");
    const changes = await page.locator("tr.job-version td:nth-child(3)").allTextContents();
    expect(changes).toEqual(["deleted", "triggered", "created"]);
    expect(
      await page.locator("#job-executions tr[data-execution]").getAttribute("data-execution"),
    ).toBe(id);

    await page.goto(`${http.url}/#/jobs/no-such-job`);
    await expect
      .poll(() => page.locator("#status.error").textContent())
      .toBe('404 AX_JOB_NOT_FOUND: no job "no-such-job"');
  });

  it("names a problem by the field's label or its path in the request, never by body.", async () => {
    await page.goto(`${http.url}/#/preview`);
    await page.locator("#preview input[name=tz]").fill("Mars/Olympus");
    await page.locator("#preview button[type=submit]").click();
    const status = page.locator("#status.error");
    await expect.poll(() => status.textContent()).toContain("Time zone:");
    expect(await status.textContent()).toContain('"Mars/Olympus" is not a known IANA time zone');
    expect(await status.textContent()).not.toContain("body.");

    // The new-job form takes JSON, so its problems are named by their path in that JSON.
    await page.goto(`${http.url}/#/jobs`);
    const bad = {
      id: "bad-zone",
      handler: "echo",
      trigger: { type: "cron", expr: "* * * * *", tz: "Mars/Olympus" },
    };
    await page.locator("#new-job textarea").fill(JSON.stringify(bad));
    await page.locator("#new-job button[type=submit]").click();
    await expect.poll(() => status.textContent()).toMatch(/^400 \S+: trigger\.tz: /);
    expect(await status.textContent()).not.toContain("body.");
  });

  it("lets the executions table use the page: its last row shows by scrolling, on a laptop and a phone", async () => {
    // More executions than fit on one screen.
    await Promise.all(Array.from({ length: 30 }, () => coordinator.triggerJob("console-hello")));
    for (const viewport of [
      { width: 1280, height: 800 },
      { width: 390, height: 844 },
    ]) {
      await page.setViewportSize(viewport);
      await page.goto(`${http.url}/#/executions`);
      const rows = page.locator("tr[data-execution]");
      await expect.poll(() => rows.count()).toBeGreaterThanOrEqual(30);
      // One synchronous look, so the live refresh cannot redraw the table halfway through.
      const seen = (await page.evaluate(`(() => {
        const box = document.querySelector(".table-box");
        const rows = box.querySelectorAll("tr[data-execution]");
        const last = rows[rows.length - 1];
        const link = last.querySelector("a");
        link.scrollIntoView({ block: "end", inline: "start" });
        const r = link.getBoundingClientRect();
        const hit = document.elementFromPoint(r.left + 2, r.top + r.height / 2);
        return {
          maxHeight: getComputedStyle(box).maxHeight,
          box: box.clientHeight,
          table: box.querySelector("table").offsetHeight,
          page: document.documentElement.scrollHeight,
          pageWidth: document.documentElement.scrollWidth,
          scrolled: window.scrollY,
          last: last.dataset.execution,
          shown: hit && hit.closest("tr") ? hit.closest("tr").dataset.execution : null,
        };
      })()`)) as Record<string, number | string | null>;
      const at = `${viewport.width}×${viewport.height}: ${JSON.stringify(seen)}`;
      // Nothing caps the table's height: its box is as tall as the table, and the page scrolls.
      expect(seen.maxHeight, at).toBe("none");
      expect(seen.box, at).toBeGreaterThanOrEqual(seen.table as number);
      expect(seen.page, at).toBeGreaterThan(viewport.height);
      expect(seen.scrolled, at).toBeGreaterThan(0);
      // The page itself never scrolls sideways; a table wider than a phone scrolls in its box.
      expect(seen.pageWidth, at).toBeLessThanOrEqual(viewport.width);
      // The bottom row, scrolled to, is on the screen and not under anything.
      expect(seen.shown, at).toBe(seen.last);
    }
    await page.setViewportSize({ width: 1280, height: 800 });
  });

  it("counts, filters, searches and pages a fleet of 251 agents, and keeps the filters in the hash", async () => {
    // 250 offline agents beside the real one, written to the store and read into the fleet as a
    // coordinator does at start. Their site is not north, so no command by tag reaches them.
    const real = (await coordinator.store.listAgents()).find(
      (a) => a.agentId === "console-agent-1",
    );
    if (!real) throw new Error("console-agent-1 is not in the store");
    for (let i = 0; i < 250; i++) {
      const id = `seed-${String(i).padStart(3, "0")}`;
      await coordinator.store.putAgent({
        ...real,
        agentId: id,
        instanceId: id,
        journalId: id,
        status: "offline",
        tags: { site: i % 2 === 0 ? "east" : "south" },
      });
    }
    await coordinator.fleet.load();
    const admin = readFileSync(join(tmp.dir, "ax-secrets", "admin.token"), "utf8").trim();
    const probe = await fetch(`${http.url}/api/agents?limit=100`, {
      headers: { authorization: `Bearer ${admin}` },
    });
    // Whether the coordinator pages GET /api/agents (else it answers every agent at once).
    const paged = typeof ((await probe.json()) as { nextCursor?: unknown }).nextCursor === "string";

    const counts = async () =>
      Object.fromEntries(
        await Promise.all(
          ["online", "offline", "total"].map(async (k) => [
            k,
            Number(await page.locator(`#fleet-counts [data-count="${k}"]`).textContent()),
          ]),
        ),
      );
    const rows = page.locator("tr[data-agent]");
    const ids = () =>
      page.evaluate(`[...document.querySelectorAll("tr[data-agent]")].map((r) => r.dataset.agent)`);
    const pager = page.locator("#fleet-page");

    await page.goto(`${http.url}/#/fleet`);
    await expect.poll(counts, { timeout: 10_000 }).toEqual({ online: 1, offline: 250, total: 251 });
    await expect.poll(() => rows.count()).toBe(paged ? 100 : 251);
    expect(await pager.textContent()).toBe(
      paged ? "page 1 · showing 1–100 of 251" : "page 1 · showing 1–251 of 251",
    );
    expect(await page.locator("#fleet-previous").isDisabled()).toBe(true);
    expect(await page.locator("#fleet-next").isDisabled()).toBe(!paged);

    if (paged) {
      // Sorted by id: console-agent-1, then seed-000 to seed-249.
      await page.locator("#fleet-next").click();
      await expect.poll(() => pager.textContent()).toBe("page 2 · showing 101–200 of 251");
      expect((await ids()) as string[]).toHaveLength(100);
      expect(((await ids()) as string[])[0]).toBe("seed-099");
      await page.locator("#fleet-next").click();
      await expect.poll(() => pager.textContent()).toBe("page 3 · showing 201–251 of 251");
      expect(await rows.count()).toBe(51);
      expect(await page.locator("#fleet-next").isDisabled()).toBe(true);
      await page.locator("#fleet-previous").click();
      await expect.poll(() => pager.textContent()).toBe("page 2 · showing 101–200 of 251");
      // The live refresh keeps the page it is on.
      await page.waitForTimeout(2_500);
      expect(await pager.textContent()).toBe("page 2 · showing 101–200 of 251");
      expect(((await ids()) as string[])[0]).toBe("seed-099");
    }

    // By status: the real agent goes from the list.
    await page.locator("#fleet-filters select[name=status]").selectOption("offline");
    await page.locator("#fleet-filters button").click();
    await page.waitForURL(/#\/fleet\?status=offline$/);
    await expect.poll(counts, { timeout: 10_000 }).toEqual({ online: 0, offline: 250, total: 250 });
    expect(await page.locator('tr[data-agent="console-agent-1"]').count()).toBe(0);
    expect(await pager.textContent()).toMatch(/^page 1 · showing 1–\d+ of 250$/);

    // By tag: only the real agent is at site=north.
    await page.locator("#fleet-filters select[name=status]").selectOption("");
    await page.locator("#fleet-filters input[name=tag]").fill("site=north");
    await page.locator("#fleet-filters input[name=tag]").press("Enter");
    await page.waitForURL(/#\/fleet\?tag=site%3Dnorth$/);
    await expect.poll(ids).toEqual(["console-agent-1"]);
    expect(await counts()).toEqual({ online: 1, offline: 0, total: 1 });

    // By a piece of the id, in any case, and a tag: seed-240 to seed-249 at site=east.
    await page.locator("#fleet-filters input[name=q]").fill("SEED-24");
    await page.locator("#fleet-filters input[name=tag]").fill("site=east");
    await page.locator("#fleet-filters button").click();
    await page.waitForURL(/#\/fleet\?q=SEED-24&tag=site%3Deast$/);
    const east = ["seed-240", "seed-242", "seed-244", "seed-246", "seed-248"];
    await expect.poll(ids).toEqual(east);
    expect(await counts()).toEqual({ online: 0, offline: 5, total: 5 });

    // A reload keeps the filters, and so does the live refresh, which leaves a half-typed search.
    await page.reload();
    await expect.poll(ids).toEqual(east);
    expect(await page.locator("#fleet-filters input[name=q]").inputValue()).toBe("SEED-24");
    expect(await page.locator("#fleet-filters input[name=tag]").inputValue()).toBe("site=east");
    let refreshes = 0;
    const count = (r: { url(): string }) => {
      if (new URL(r.url()).pathname === "/api/agents") refreshes++;
    };
    page.on("request", count);
    await page.locator("#fleet-filters input[name=q]").fill("seed-1");
    await expect.poll(() => refreshes, { timeout: 10_000 }).toBeGreaterThanOrEqual(2);
    page.off("request", count);
    expect(await ids()).toEqual(east);
    expect(await page.locator("#fleet-filters input[name=q]").inputValue()).toBe("seed-1");
    expect(page.url()).toMatch(/#\/fleet\?q=SEED-24&tag=site%3Deast$/);

    if (paged) {
      // A tag that is not K=V is refused by the coordinator, named by the form's label.
      await page.locator("#fleet-filters input[name=tag]").fill("site");
      await page.locator("#fleet-filters button").click();
      await expect
        .poll(() => page.locator("#status.error").textContent())
        .toMatch(/^400 \S+: tag: /);
    }

    // The nav link is the whole fleet again.
    await page.locator('nav a[data-nav="fleet"]').click();
    await expect.poll(counts, { timeout: 10_000 }).toEqual({ online: 1, offline: 250, total: 251 });
    expect(await page.locator("#fleet-filters input[name=q]").inputValue()).toBe("");
  });

  it("lists a rollout, opens it, resumes and aborts it, and follows its state live", async () => {
    const admin = readFileSync(join(tmp.dir, "ax-secrets", "admin.token"), "utf8").trim();
    const call = async (path: string, body?: unknown) => {
      const res = await fetch(`${http.url}${path}`, {
        method: body === undefined ? "GET" : "POST",
        headers: {
          authorization: `Bearer ${admin}`,
          ...(body === undefined ? {} : { "content-type": "application/json" }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };
    const rolloutState = async () =>
      ((await call("/api/rollouts/console-rollout")).body.rollout as { state: string }).state;
    // No agent is at site=nowhere, so it reaches none and sends the real agent nothing.
    const created = await call("/api/rollouts", {
      id: "console-rollout",
      description: '<em class="injected">not emphasised</em>',
      selector: { tags: { site: "nowhere" } },
      command: { handler: "echo", params: { message: "never sent" } },
      start: false,
    });
    expect(created.status).toBe(201);
    expect(created.body.state).toBe("CREATED");

    await page.goto(`${http.url}/#/rollouts`);
    const row = page.locator('tr[data-rollout="console-rollout"]');
    await row.waitFor();
    const cells = (await row.locator("td").allTextContents()).map((t) => t.trim());
    expect(cells.slice(0, 6)).toEqual([
      "console-rollout",
      "CREATED",
      "1 of 1 (100%)",
      "0 / 0",
      "0",
      "0",
    ]);

    // The state filter is kept in the hash; no rollout is COMPLETED yet.
    const filter = async (state: string) => {
      await page.locator("#rollout-filters select[name=state]").selectOption(state);
      await page.locator("#rollout-filters button").click();
      await page.waitForURL(new RegExp(`#/rollouts\\?state=${state}$`));
    };
    await filter("COMPLETED");
    await expect.poll(() => page.locator("#rollout-list td.muted").textContent()).toBe("none");
    await filter("CREATED");
    await row.waitFor();

    await row.locator("a").click();
    await page.waitForURL(/#\/rollouts\/console-rollout$/);
    const head = page.locator("#rollout-head .state");
    const buttons = () => page.locator("#rollout-buttons button").allTextContents();
    await expect.poll(() => head.textContent()).toBe("CREATED");
    expect(await buttons()).toEqual(["Pause", "Resume", "Abort"]);
    const spec = await page.locator("#rollout-spec").textContent();
    expect(spec).toContain("tags site=nowhere");
    expect(spec).toContain("echo");
    expect(spec).toContain("1 min"); // startWithin's default
    // The API's text is shown as text, never as markup.
    expect(spec).toContain('<em class="injected">not emphasised</em>');
    expect(await page.locator(".injected").count()).toBe(0);

    await page.locator('#rollout-buttons button[data-act="resume"]').click();
    await expect.poll(() => head.textContent()).toBe("IN_PROGRESS");
    expect(await rolloutState()).toBe("IN_PROGRESS");
    expect(await page.locator("#status").textContent()).toBe("console-rollout resumed");
    expect(await buttons()).toEqual(["Pause", "Abort"]);

    // Paused and resumed elsewhere: the page follows without a reload.
    const paused = await call("/api/rollouts/console-rollout/pause", {
      reason: "held <for> a look",
    });
    expect(paused.body.state).toBe("PAUSED");
    await expect.poll(() => head.textContent(), { timeout: 10_000 }).toBe("PAUSED");
    expect(await buttons()).toEqual(["Resume", "Abort"]);
    expect(await page.locator("#rollout-spec").textContent()).toContain("held <for> a look");
    expect((await call("/api/rollouts/console-rollout/resume", {})).body.state).toBe("IN_PROGRESS");
    await expect.poll(() => head.textContent(), { timeout: 10_000 }).toBe("IN_PROGRESS");

    await page.locator("#rollout-actions input[name=reason]").fill("not today");
    await page.locator('#rollout-buttons button[data-act="abort"]').click();
    await expect.poll(() => head.textContent()).toBe("ABORTED");
    expect(await rolloutState()).toBe("ABORTED");
    expect(await page.locator("#rollout-actions").isHidden()).toBe(true);
    expect(await buttons()).toEqual([]);
    const timeline = page.locator("tr.timeline-entry");
    const to = await timeline.locator("td:nth-child(5)").allTextContents();
    expect(to).toEqual(["CREATED", "IN_PROGRESS", "PAUSED", "IN_PROGRESS", "ABORTED"]);
    const reasons = await timeline.locator("td:nth-child(7)").allTextContents();
    expect(reasons[2]).toBe("held <for> a look");
    expect(reasons[4]).toBe("not today");

    // Final, and settled (it left nothing open to cancel): the page says so and stops asking.
    await expect.poll(() => page.locator("#rollout-head .muted").textContent()).toBe("");
    let asked = 0;
    const count = (r: { url(): string }) => {
      if (new URL(r.url()).pathname === "/api/rollouts/console-rollout") asked++;
    };
    page.on("request", count);
    await page.waitForTimeout(4_500);
    page.off("request", count);
    expect(asked).toBe(0);

    await page.goto(`${http.url}/#/rollouts`);
    await expect.poll(() => row.locator(".state").textContent()).toBe("ABORTED");
  });

  it("has an icon, and the browser met no missing file on any page", async () => {
    await page.goto(`${http.url}/#/fleet`);
    expect(await page.locator('link[rel="icon"]').getAttribute("href")).toBe("/assets/favicon.svg");
    const icon = await fetch(`${http.url}/assets/favicon.svg`);
    expect(icon.status).toBe(200);
    expect(icon.headers.get("content-type")).toBe("image/svg+xml");
    expect(await icon.text()).toContain("<svg");
    expect(notFound).toEqual([]);
  });
});
