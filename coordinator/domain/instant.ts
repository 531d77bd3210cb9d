/**
 * An ISO 8601 time that says where it is: a date and time with `Z` or an offset
 * (`2026-01-31T12:00:00Z`, `2026-01-31T13:00:00.250+01:00`), or a date alone (`2026-01-31`, UTC
 * midnight). A date and time without either is refused: read in the host's zone, one jobs file
 * would fire at different instants on differently configured machines.
 */
const ISO_INSTANT =
  /^\d{4}-\d{2}-\d{2}(?:[Tt ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:[Zz]|[+-]\d{2}:?\d{2}))?$/;

/** A date and time with neither `Z` nor an offset. */
const NO_ZONE = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?$/;

/** Why an ISO time without a zone is refused, for the error that names its field. */
export function noZoneProblem(text: string): string | undefined {
  return NO_ZONE.test(text.trim())
    ? `has no time zone: add Z for UTC or an offset such as +01:00 (got "${text}")`
    : undefined;
}

/** UTC milliseconds of an ISO time with its zone (see above); undefined for anything else. */
export function parseIsoInstant(text: string): number | undefined {
  const v = text.trim();
  if (!ISO_INSTANT.test(v)) return undefined;
  const ms = Date.parse(v);
  return Number.isFinite(ms) ? ms : undefined;
}
