import { request } from "node:http";

/** A JSON answer of the HTTP API, as a test reads it. */
export interface Answer<T = unknown> {
  status: number;
  headers: Headers;
  /** Parsed JSON, or the raw text when the body is not JSON; undefined when empty. */
  body: T;
  text: string;
}

/** Calls `base + path` with Node's fetch; `body` is sent as JSON unless it is a string. */
export async function call<T = unknown>(
  base: string,
  method: string,
  path: string,
  options: { token?: string; body?: unknown; headers?: Record<string, string> } = {},
): Promise<Answer<T>> {
  const { token, body } = options;
  const res = await fetch(`${base}${path}`, {
    method,
    headers: {
      ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
      ...(body === undefined ? {} : { "content-type": "application/json" }),
      ...options.headers,
    },
    ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
  });
  const text = await res.text();
  let parsed: unknown = text === "" ? undefined : text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // Not JSON (metrics, the console page): the text is the body.
  }
  return { status: res.status, headers: res.headers, body: parsed as T, text };
}

/** An error body's code and the paths of its issues. */
export function errorOf(a: Answer): { code: string; message: string; paths: string[] } {
  const e = (a.body as { error: { code: string; message: string; issues?: { path: string }[] } })
    .error;
  return { code: e.code, message: e.message, paths: (e.issues ?? []).map((i) => i.path) };
}

/** The value of one series in Prometheus text, or undefined when it is not there. */
export function series(
  text: string,
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  for (const line of text.split("\n")) {
    if (line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{([^}]*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const got = Object.fromEntries(
      [...(m[3] ?? "").matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]),
    );
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) return Number(m[4]);
  }
  return undefined;
}

/**
 * A request through node:http, which sends headers fetch will not (a foreign `Host`) and a body
 * with exactly the Content-Type given.
 */
export function rawCall(
  base: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string,
): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    const req = request(`${base}${path}`, { method, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        let parsed: unknown = text;
        try {
          parsed = JSON.parse(text);
        } catch {
          // Not JSON: the text is the body.
        }
        resolve({ status: res.statusCode ?? 0, body: parsed });
      });
    });
    req.once("error", reject);
    req.end(body);
  });
}
