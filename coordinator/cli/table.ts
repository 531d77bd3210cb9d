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
