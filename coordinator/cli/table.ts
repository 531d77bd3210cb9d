/** Formats rows as an aligned text table: columns padded to their widest cell, two spaces apart. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join("  ")
      .trimEnd();
  return [line(header), ...rows.map(line)].join("\n");
}

/** UTC milliseconds as an ISO time, or `-`. */
export function isoTime(ms: number | null | undefined): string {
  return ms === null || ms === undefined ? "-" : new Date(ms).toISOString();
}

/** `key  value` lines, keys padded to one width. */
export function fields(pairs: [string, string][]): string {
  const width = Math.max(...pairs.map(([k]) => k.length));
  return pairs.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join("\n");
}

/** Tags as `k=v,k=v`, or `-`. */
export function tagsText(tags: Record<string, string>): string {
  return (
    Object.entries(tags)
      .map(([k, v]) => `${k}=${v}`)
      .join(",") || "-"
  );
}

const UNITS = [
  ["d", 86_400_000],
  ["h", 3_600_000],
  ["m", 60_000],
  ["s", 1000],
] as const;

/** Milliseconds as a duration the flags take back: `10m`, `90s`, `1500ms`. */
export function durationText(ms: number): string {
  for (const [unit, size] of UNITS) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}
