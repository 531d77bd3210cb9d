import type { AnyRoute } from "./route.js";

/** A route matched to a request path, with its path parameters (percent-decoded). */
export interface Match {
  route: AnyRoute;
  params: Record<string, string>;
}

interface Compiled {
  route: AnyRoute;
  segments: string[];
  /** The last segment is `*`: it matches the rest of the path, in params["*"]. */
  rest: boolean;
}

/**
 * Matches request paths to routes: `{name}` matches one segment that is not empty, a last
 * segment `*` the rest (a static folder). Literal segments win over parameters when both match,
 * whatever the order.
 */
export class Router {
  private readonly compiled: Compiled[];

  constructor(routes: readonly AnyRoute[]) {
    this.compiled = routes.map((route) => {
      const segments = route.path.split("/").slice(1);
      const rest = segments.at(-1) === "*";
      return { route, segments: rest ? segments.slice(0, -1) : segments, rest };
    });
  }

  /**
   * The routes whose path matches, best first; `undefined` for a path with a malformed percent
   * escape.
   */
  match(path: string): Match[] | undefined {
    const parts = path.split("/").slice(1);
    const found: { match: Match; literals: number }[] = [];
    for (const c of this.compiled) {
      if (c.rest ? parts.length < c.segments.length : parts.length !== c.segments.length) continue;
      const params: Record<string, string> = {};
      let literals = 0;
      let ok = true;
      for (let i = 0; i < c.segments.length && ok; i++) {
        const seg = c.segments[i] as string;
        const part = parts[i] as string;
        const name = /^\{(\w+)\}$/.exec(seg)?.[1];
        if (name === undefined) {
          ok = seg === part;
          literals++;
        } else if (part === "") {
          // `/api/jobs/` names no job: a parameter is never empty, so the path is not a route's.
          ok = false;
        } else {
          const value = decode(part);
          if (value === undefined) return undefined;
          params[name] = value;
        }
      }
      if (!ok) continue;
      if (c.rest) params["*"] = parts.slice(c.segments.length).join("/");
      found.push({ match: { route: c.route, params }, literals });
    }
    return found.sort((a, b) => b.literals - a.literals).map((f) => f.match);
  }
}

function decode(part: string): string | undefined {
  try {
    return decodeURIComponent(part);
  } catch {
    return undefined;
  }
}
