import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { startDemo } from "../helpers/demo.js";
import { waitFor } from "../helpers/env.js";

const AX = fileURLToPath(new URL("../../bin/ax.js", import.meta.url));
const SUMMARY = /^demo: (\d+) executions, (\d+) succeeded, (\d+) failed$/;
const EXECUTION_ID = /\bex_[0-9a-z]{21}\b/g;
/** util-linux's script(1) runs a command on a pseudo-terminal. */
const SCRIPT = ["/usr/bin/script", "/bin/script"].find((p) => existsSync(p));
const ESC = "\x1b";
/** The live table's redraw: the cursor up over the last drawing (CUU), then clear below (ED). */
const REDRAW = new RegExp(`${ESC}\\[\\d+A${ESC}\\[J`);

describe("ax demo's output", () => {
  it("is plain lines with full ids when not a terminal, ids that ax exec show takes", async () => {
    const demo = await startDemo(8);
    const { url, tokenFile } = demo;
    const out = () => demo.output();
    try {
      // A line for an execution that finished: its id as printed, pasted into ax exec show.
      const line = await waitFor("a finished execution's line", () =>
        out()
          .split("\n")
          .find((l) => /^ex_\S+ {2}demo-echo {2}SUCCEEDED {2}/.test(l)),
      );
      const id = line.split(" ")[0] as string;
      const show = spawnSync(process.execPath, [AX, "exec", "show", id], {
        encoding: "utf8",
        env: { ...process.env, AX_URL: url, AX_TOKEN_FILE: tokenFile },
        timeout: 30_000,
      });
      expect(show.stderr).toBe("");
      expect(show.status).toBe(0);
      expect(show.stdout).toMatch(new RegExp(`^execution +${id}$`, "m"));
      expect(show.stdout).toMatch(/^state +SUCCEEDED$/m);
    } finally {
      expect(await demo.exited).toBe(0);
    }
    expect(out()).not.toContain(ESC);
    expect(out()).not.toContain("…");
    const lines = out().trim().split("\n");
    expect(lines.at(-1)).toMatch(SUMMARY);
    // One line per execution and state seen, each starting with the full id.
    const rows = lines.filter((l) => l.startsWith("ex_"));
    expect(rows.length).toBeGreaterThan(2);
    expect(new Set(rows).size).toBe(rows.length);
    for (const row of rows) expect(row).toMatch(/^ex_[0-9a-z]{21} {2}\S+ {2}[A-Z_]+ {2}agent /);
    expect(out()).toContain("command→demo-agent-2");
  }, 60_000);

  it.skipIf(SCRIPT === undefined)(
    "is a table redrawn in place on a terminal, fitted to its width, ids whole",
    () => {
      // 70 columns: narrower than the whole table, so the fire time goes and the job shortens.
      const r = spawnSync(
        SCRIPT as string,
        [
          "-qfec",
          `stty cols 70 rows 30; "${process.execPath}" "${AX}" demo --duration 6`,
          "/dev/null",
        ],
        { encoding: "utf8", timeout: 60_000 },
      );
      expect(r.status).toBe(0);
      // Without carriage returns and the clear-line before the summary.
      const out = r.stdout.replaceAll("\r", "").replaceAll(`${ESC}[K`, "");
      // Redrawn in place: back up over the last drawing, clear, draw again.
      expect(out).toMatch(REDRAW);
      const screens = out.split(REDRAW);
      const last = (screens.at(-1) as string).trim().split("\n");
      expect(last.at(-1)).toMatch(SUMMARY);
      expect(last[0]).toMatch(/^execution {2,}job {2,}state {2,}agent {2,}late$/);
      for (const l of last.slice(1, -1)) {
        expect(l.length).toBeLessThanOrEqual(70);
        expect(l).toMatch(/^ex_[0-9a-z]{21} {2}/);
      }
      expect(out.match(EXECUTION_ID)?.length).toBeGreaterThan(2);
    },
    90_000,
  );
});
