import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type BrowserContext, chromium, type Page } from "playwright-core";
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
 * real coordinator, broker and agent process. Skipped where no Chromium is installed; CI installs
 * it. With AX_SCREENSHOTS=1 the screenshots are written to docs/ (the README links them);
 * otherwise to the test's temp folder.
 */
const CHROMIUM =
  process.env.AX_TEST_CHROMIUM ??
  ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => existsSync(p));

describe.skipIf(CHROMIUM === undefined)("console in headless Chromium", () => {
  let broker: TestBroker;
  let tmp: ReturnType<typeof tempDir>;
  let coordinator: Coordinator;
  let http: HttpServer;
  let agent: AgentProcess;
  let context: BrowserContext;
  let page: Page;
  let shots: string;

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
    const row = page.locator('tr[data-job-row="console-hello"]');
    await row.waitFor();
    expect(await row.textContent()).toContain("cron 0 0 1 1 * (Europe/London)");
    expect((await coordinator.store.getJob("console-hello"))?.version).toBe(1);
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
    await expect.poll(() => page.locator("#status").textContent()).toMatch(/400.*expr/);
  });
});
