import type { ExecutionRecord } from "../store/port.js";

/** One execution as the demo shows it: every cell already text. */
export interface LiveRow {
  /** The full execution id, as `ax exec show` takes it; never shortened. */
  id: string;
  job: string;
  state: string;
  agent: string;
  late: string;
  fireAt: string;
}

/** An execution record as a row of the live table. */
export function liveRow(e: ExecutionRecord): LiveRow {
  return {
    id: e.id,
    job: e.jobId ?? `command→${e.targetAgentId ?? "?"}`,
    state: e.state,
    agent: e.agentId ?? "-",
    late: e.lateMs === null ? "-" : `${e.lateMs.toFixed(1)} ms`,
    fireAt: new Date(e.fireAt).toISOString().slice(11, 23),
  };
}

/** The same row as one plain line (no escape codes), for output that is not a terminal. */
export function plainLine(row: LiveRow): string {
  return [row.id, row.job, row.state, `agent ${row.agent}`, `late ${row.late}`].join("  ");
}

interface Column {
  key: keyof LiveRow;
  header: string;
  /** Shortened (with …) down to this width when the table is too wide; absent: never. */
  minWidth?: number;
}

/** In the order shown. The id comes first so that a clipped line still shows it whole. */
const COLUMNS: Column[] = [
  { key: "id", header: "execution" },
  { key: "job", header: "job", minWidth: 6 },
  { key: "state", header: "state" },
  { key: "agent", header: "agent", minWidth: 6 },
  { key: "late", header: "late" },
  { key: "fireAt", header: "fire at (UTC)" },
];

const GAP = 2;

function cut(text: string, width: number): string {
  return text.length <= width ? text : `${text.slice(0, Math.max(0, width - 1))}…`;
}

/**
 * The live table's lines for a terminal `width` columns wide: a header and one line per row,
 * columns two spaces apart. When the natural table is wider than the terminal, the fire time goes
 * first, then job and agent are shortened (ending in …) down to a few characters, then the
 * lateness goes. The id is never shortened, so any id on screen can be pasted into
 * `ax exec show`; on a terminal narrower than an id and a state, lines are longer than `width`.
 */
export function renderLiveTable(rows: LiveRow[], width: number): string[] {
  const widths = new Map<keyof LiveRow, number>(
    COLUMNS.map((c) => [c.key, Math.max(c.header.length, ...rows.map((r) => r[c.key].length))]),
  );
  const shown = () => COLUMNS.filter((c) => widths.has(c.key));
  const total = () =>
    shown().reduce((sum, c) => sum + (widths.get(c.key) ?? 0), 0) + GAP * (shown().length - 1);
  const shrinkable = () =>
    shown().filter((c) => c.minWidth !== undefined && (widths.get(c.key) ?? 0) > c.minWidth);

  if (total() > width) widths.delete("fireAt");
  // Narrow the widest of job and agent one column at a time, so both keep what they can.
  for (let over = total() - width; over > 0; over--) {
    const widest = shrinkable().sort((a, b) => (widths.get(b.key) ?? 0) - (widths.get(a.key) ?? 0));
    const c = widest[0];
    if (c === undefined) break;
    widths.set(c.key, (widths.get(c.key) ?? 0) - 1);
  }
  if (total() > width) widths.delete("late");

  const line = (cells: (c: Column) => string) =>
    shown()
      .map((c) => cut(cells(c), widths.get(c.key) ?? 0).padEnd(widths.get(c.key) ?? 0))
      .join(" ".repeat(GAP))
      .trimEnd();
  return [
    line((c) => c.header),
    ...(rows.length === 0 ? ["(no executions yet)"] : rows.map((r) => line((c) => r[c.key]))),
  ];
}

/** Where the live table is drawn: a terminal's stream, or anything with the same few members. */
export interface LiveOutput {
  write(text: string): unknown;
  columns?: number;
  rows?: number;
  on(event: "resize", listener: () => void): unknown;
  off(event: "resize", listener: () => void): unknown;
}

/**
 * Draws the live table on a terminal and redraws it in place: the cursor goes back up over the
 * last drawing and clears it (ANSI CUU and ED) before the new one is written. On a resize the
 * table is redrawn at the new width at once.
 */
export class LiveTable {
  private lastLines: string[] = [];
  private lastWidth = 0;
  private lastRows: LiveRow[] = [];
  private readonly onResize = () => this.draw(this.lastRows);

  constructor(private readonly out: LiveOutput) {
    out.on("resize", this.onResize);
  }

  /** How many rows fit under the header on this terminal. */
  get capacity(): number {
    return Math.max(1, (this.out.rows || 24) - 2);
  }

  /** Draws the newest rows that fit, in place of the previous drawing. */
  draw(rows: LiveRow[]): void {
    const width = this.width();
    this.lastRows = rows;
    const lines = renderLiveTable(rows.slice(-this.capacity), width);
    // Unchanged: nothing to write, and no flicker.
    if (width === this.lastWidth && lines.join("\n") === this.lastLines.join("\n")) return;
    let text = "";
    const up = screenRows(this.lastLines, width);
    if (up > 0) text += `\r\x1b[${up}A\x1b[J`;
    text += lines.map((l) => `${l}\n`).join("");
    this.out.write(text);
    this.lastLines = lines;
    this.lastWidth = width;
  }

  /** Stops following resizes; the last drawing stays on the screen. */
  close(): void {
    this.out.off("resize", this.onResize);
  }

  private width(): number {
    return Math.max(20, this.out.columns || 80);
  }
}

/**
 * How many screen rows lines take at `width`: a line longer than the terminal wraps. After a
 * terminal narrows, it re-wraps what it shows (as VTE, iTerm2, kitty and Windows Terminal do), so
 * the previous drawing is measured at the new width.
 */
export function screenRows(lines: string[], width: number): number {
  return lines.reduce((n, l) => n + Math.max(1, Math.ceil(l.length / width)), 0);
}
