import { EventEmitter } from "node:events";
import { describe, expect, it } from "vitest";
import { type LiveRow, LiveTable, plainLine, renderLiveTable, screenRows } from "./live-table.js";

const ID1 = "ex_0mx4u175ebc42t30demhq";
const ID2 = "ex_0mx4u182we849f90j2zwq";

const ROWS: LiveRow[] = [
  {
    id: ID1,
    job: "command→demo-agent-2",
    state: "SUCCEEDED",
    agent: "demo-agent-2",
    late: "3.1 ms",
    fireAt: "15:12:01.250",
  },
  {
    id: ID2,
    job: "demo-echo",
    state: "RUNNING",
    agent: "demo-agent-1",
    late: "12.7 ms",
    fireAt: "15:12:02.000",
  },
];

describe("renderLiveTable", () => {
  it("shows every column, aligned, when the terminal is wide enough", () => {
    expect(renderLiveTable(ROWS, 120)).toEqual([
      "execution                 job                   state      agent         late     fire at (UTC)",
      `${ID1}  command→demo-agent-2  SUCCEEDED  demo-agent-2  3.1 ms   15:12:01.250`,
      `${ID2}  demo-echo             RUNNING    demo-agent-1  12.7 ms  15:12:02.000`,
    ]);
  });

  it("drops the fire time first, then shortens job and agent, never the id", () => {
    const at80 = renderLiveTable(ROWS, 80);
    expect(at80[0]).not.toContain("fire at");
    expect(at80[1]).toBe(`${ID1}  command→demo-agent-2  SUCCEEDED  demo-agent-2  3.1 ms`);

    const at64 = renderLiveTable(ROWS, 64);
    expect(at64.every((l) => l.length <= 64)).toBe(true);
    expect(at64[1]?.startsWith(`${ID1}  `)).toBe(true);
    expect(at64[1]).toContain("…");
    expect(at64[2]).toContain("12.7 ms");
  });

  it("drops the lateness last, and keeps the id whole on a terminal narrower than it", () => {
    const at48 = renderLiveTable(ROWS, 48);
    expect(at48[0]).toBe("execution                 job     state      agent");
    expect(at48[1]).toBe(`${ID1}  comma…  SUCCEEDED  demo-…`);
    const at20 = renderLiveTable(ROWS, 20);
    expect(at20[2]?.startsWith(`${ID2}  `)).toBe(true);
  });

  it("says so when there is nothing yet", () => {
    expect(renderLiveTable([], 80)).toEqual([
      "execution  job  state  agent  late  fire at (UTC)",
      "(no executions yet)",
    ]);
  });
});

describe("plainLine", () => {
  it("is the full id and the row's cells, with no escape codes", () => {
    expect(plainLine(ROWS[0] as LiveRow)).toBe(
      `${ID1}  command→demo-agent-2  SUCCEEDED  agent demo-agent-2  late 3.1 ms`,
    );
  });
});

/** A terminal's stream as far as LiveTable uses it: what was written, its size, resize events. */
class Screen extends EventEmitter {
  written: string[] = [];
  constructor(
    public columns: number,
    public rows: number,
  ) {
    super();
  }
  write(text: string): boolean {
    this.written.push(text);
    return true;
  }
}

describe("LiveTable", () => {
  it("draws, then moves back up over its last drawing and clears it before the next", () => {
    const screen = new Screen(120, 30);
    const live = new LiveTable(screen);
    live.draw(ROWS.slice(0, 1));
    expect(screen.written[0]).toBe(`${renderLiveTable(ROWS.slice(0, 1), 120).join("\n")}\n`);
    live.draw(ROWS);
    expect(screen.written[1]?.startsWith("\r\x1b[2A\x1b[J")).toBe(true);
    expect(
      screen.written[1]?.endsWith(
        `${ID2}  demo-echo             RUNNING    demo-agent-1  12.7 ms  15:12:02.000\n`,
      ),
    ).toBe(true);
    // The same rows again: nothing to redraw.
    live.draw(ROWS);
    expect(screen.written.length).toBe(2);
    live.close();
  });

  it("redraws at the new width on a resize, counting the old lines as the terminal re-wrapped them", () => {
    const screen = new Screen(120, 30);
    const live = new LiveTable(screen);
    live.draw(ROWS);
    screen.columns = 50;
    screen.emit("resize");
    // Three lines of up to 95 characters take two rows each at 50 columns.
    expect(screen.written[1]?.startsWith("\r\x1b[6A\x1b[J")).toBe(true);
    expect(screen.written[1]).toContain(`${ID1}  `);
    expect(screen.written[1]).not.toContain("fire at");
    live.close();
    screen.columns = 120;
    screen.emit("resize");
    expect(screen.written.length).toBe(2);
  });

  it("shows only the newest rows that fit under the header", () => {
    const screen = new Screen(120, 3);
    const live = new LiveTable(screen);
    expect(live.capacity).toBe(1);
    live.draw(ROWS);
    expect(screen.written[0]).toContain(ID2);
    expect(screen.written[0]).not.toContain(ID1);
    live.close();
  });
});

describe("screenRows", () => {
  it("counts a line as long as the terminal as one row, and a longer one as more", () => {
    expect(screenRows(["x".repeat(80), "", "x".repeat(81)], 80)).toBe(4);
  });
});
