import { describe, expect, it } from "vitest";
import { zonedTime } from "./job.js";

describe("zonedTime", () => {
  it("writes an instant in its zone with the offset in effect then, across a DST change", () => {
    // Europe/Berlin moved from +01:00 to +02:00 at 01:00 UTC on 2026-03-29.
    expect(zonedTime(Date.UTC(2026, 2, 29, 0, 30), "Europe/Berlin")).toBe(
      "2026-03-29T01:30:00.000+01:00",
    );
    expect(zonedTime(Date.UTC(2026, 2, 29, 1, 0, 0, 250), "Europe/Berlin")).toBe(
      "2026-03-29T03:00:00.250+02:00",
    );
    expect(zonedTime(Date.UTC(2026, 0, 1), "America/New_York")).toBe(
      "2025-12-31T19:00:00.000-05:00",
    );
    expect(zonedTime(Date.UTC(2026, 0, 1), "UTC")).toBe("2026-01-01T00:00:00.000+00:00");
    expect(zonedTime(Date.UTC(2026, 0, 1), "Asia/Kolkata")).toBe("2026-01-01T05:30:00.000+05:30");
  });
});
