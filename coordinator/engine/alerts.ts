import { createHmac } from "node:crypto";
import { backoffMs } from "../../shared/backoff.js";
import type { TimerHandle } from "../../shared/clock.js";
import { newId } from "../../shared/ids.js";
import type { AlertKind, CoordinatorConfig } from "../config.js";
import type { AlertRecord } from "../store/port.js";
import type { AppliedTransition, EngineContext, TransitionAlerts } from "./context.js";
import type { EngineEvents } from "./events.js";

type Hook = CoordinatorConfig["alerts"]["webhooks"][number];

/** Deliveries in flight at once; the rest wait their turn. */
const CONCURRENCY = 8;
/** Alerts waiting beyond this are recorded failed at once (a hook down for long under a storm). */
const MAX_WAITING = 10_000;

const STATE_KINDS: Partial<Record<string, AlertKind>> = {
  FAILED: "execution.failed",
  TIMED_OUT: "execution.timed_out",
  EXPIRED: "execution.expired",
};

/**
 * Webhook alerts (execution failed, timed out or expired; fires missed; agent offline). Each alert
 * is recorded in the store for each hook that wants its kind, in the transaction that records
 * what it reports, then POSTed as JSON once that is committed; a failed attempt is retried with full-jitter backoff up to
 * `maxAttempts`, and every outcome is recorded. Deliveries run beside scheduling and never
 * hold it up; pending ones are resumed after a restart. Receivers deduplicate by the
 * `X-Ax-Alert-Id` header, since an alert can arrive twice (a retry after a lost answer).
 */
export class Alerts implements TransitionAlerts {
  private readonly waiting: AlertRecord[] = [];
  private readonly timers = new Set<TimerHandle>();
  private inFlight = 0;
  private closed = false;
  private readonly idle: (() => void)[] = [];

  /**
   * Every alert is written with what it reports: an execution's with its transition
   * (TransitionAlerts.of), missed fires' with their fire rows (missed), an agent's going offline
   * with its record (offline).
   */
  constructor(private readonly ctx: EngineContext) {}

  private get hooks(): Hook[] {
    return this.ctx.config.alerts.webhooks;
  }

  /** Resumes the deliveries a previous run left pending. */
  async start(): Promise<void> {
    if (this.hooks.length === 0) return;
    for (const a of await this.ctx.store.listAlerts({ pending: true, limit: MAX_WAITING })) {
      this.enqueue(a);
    }
  }

  /**
   * The alerts of an execution that failed, timed out or expired (TransitionAlerts.of), for the
   * transition's write: none for any other move.
   */
  of(t: AppliedTransition): AlertRecord[] {
    const kind = STATE_KINDS[t.to];
    if (!kind || t.from === t.to || this.closed) return [];
    return this.make(kind, {
      executionId: t.executionId,
      jobId: t.jobId,
      agentId: t.agentId,
      state: t.to,
      event: t.event,
      round: t.round,
      at: t.at,
    });
  }

  /** The alerts of a job's missed fires (TransitionAlerts.missed), for the write that records them. */
  missed(m: EngineEvents["missed"]): AlertRecord[] {
    if (this.closed) return [];
    return this.make("fire.missed", {
      jobId: m.jobId,
      scheduledFor: m.scheduledFor,
      uncounted: m.uncounted,
      policy: m.policy,
      at: m.at,
    });
  }

  /** The alerts of an agent gone offline (TransitionAlerts.offline), for the write that records it. */
  offline(o: { agentId: string; reason: string; at: number }): AlertRecord[] {
    if (this.closed) return [];
    return this.make("agent.offline", { agentId: o.agentId, reason: o.reason, at: o.at });
  }

  /** Alerts committed with what they report (TransitionAlerts.recorded): delivered. */
  recorded(alerts: readonly AlertRecord[]): void {
    for (const a of alerts) this.enqueue(a);
  }

  /** An alert of `kind` for each hook that wants it, pending. */
  private make(kind: AlertKind, details: Record<string, unknown>): AlertRecord[] {
    const now = this.ctx.clock.wallNow();
    const out: AlertRecord[] = [];
    for (const hook of this.hooks) {
      if (hook.kinds && !hook.kinds.includes(kind)) continue;
      const alert: AlertRecord = {
        id: newId("al_", now),
        kind,
        url: hook.url,
        payload: { id: "", kind, ...details },
        status: "pending",
        attempts: 0,
        lastError: null,
        createdAt: now,
        updatedAt: now,
      };
      alert.payload.id = alert.id;
      out.push(alert);
    }
    return out;
  }

  private enqueue(alert: AlertRecord): void {
    if (this.closed) return;
    if (this.waiting.length >= MAX_WAITING) {
      void this.finish(alert, "failed", "dropped: too many alerts waiting");
      return;
    }
    this.waiting.push(alert);
    this.pump();
  }

  private pump(): void {
    while (!this.closed && this.inFlight < CONCURRENCY && this.waiting.length > 0) {
      const alert = this.waiting.shift() as AlertRecord;
      this.inFlight++;
      void this.attempt(alert).finally(() => {
        this.inFlight--;
        this.pump();
        if (this.inFlight === 0 && this.waiting.length === 0 && this.timers.size === 0) {
          for (const resolve of this.idle.splice(0)) resolve();
        }
      });
    }
  }

  private async attempt(alert: AlertRecord): Promise<void> {
    const hook = this.hooks.find((h) => h.url === alert.url);
    const cfg = this.ctx.config.alerts;
    alert.attempts++;
    let error: string | null = null;
    try {
      const body = JSON.stringify(alert.payload);
      const headers: Record<string, string> = {
        ...hook?.headers,
        "content-type": "application/json",
        "x-ax-alert-id": alert.id,
        "x-ax-alert-kind": alert.kind,
      };
      if (hook?.secret) {
        headers["x-ax-signature"] =
          `sha256=${createHmac("sha256", hook.secret).update(body).digest("hex")}`;
      }
      const res = await fetch(alert.url, {
        method: "POST",
        headers,
        body,
        signal: AbortSignal.timeout(cfg.timeoutMs),
        // A redirect is an answer other than 2xx, not a delivery: it is not followed.
        redirect: "manual",
      });
      // The body is not needed, but must be consumed for the connection to be reused.
      await res.arrayBuffer().catch(() => undefined);
      if (!res.ok) error = `HTTP ${res.status}`;
    } catch (err) {
      error = (err as Error).message;
    }
    if (error === null) {
      await this.finish(alert, "delivered", null);
      return;
    }
    if (alert.attempts >= cfg.maxAttempts || !hook) {
      this.ctx.log(
        "error",
        `alert ${alert.kind} to ${alert.url} failed after ${alert.attempts} attempt(s): ${error}`,
        { alertId: alert.id },
      );
      await this.finish(alert, "failed", hook ? error : `no webhook ${alert.url} configured`);
      return;
    }
    this.ctx.log("warn", `alert ${alert.kind} to ${alert.url}: ${error}; will retry`, {
      alertId: alert.id,
      attempt: alert.attempts,
    });
    await this.record(alert, "pending", error);
    const delay = backoffMs(alert.attempts, { baseMs: cfg.backoffBaseMs, capMs: cfg.backoffCapMs });
    const timer = this.ctx.clock.setTimer(() => {
      this.timers.delete(timer);
      this.enqueue(alert);
    }, delay);
    this.timers.add(timer);
  }

  private async finish(
    alert: AlertRecord,
    status: "delivered" | "failed",
    error: string | null,
  ): Promise<void> {
    await this.record(alert, status, error);
    if (status === "failed") {
      await this.ctx.store.bumpCounter("alerts_failed").catch(() => {});
    }
  }

  private async record(
    alert: AlertRecord,
    status: AlertRecord["status"],
    error: string | null,
  ): Promise<void> {
    alert.status = status;
    alert.lastError = error;
    alert.updatedAt = this.ctx.clock.wallNow();
    await this.ctx.store
      .updateAlert(alert.id, {
        status,
        attempts: alert.attempts,
        lastError: error,
        updatedAt: alert.updatedAt,
      })
      .catch((err: unknown) =>
        this.ctx.log("error", `alert ${alert.id} not recorded: ${(err as Error).message}`),
      );
  }

  /** Resolves when nothing is being sent or waiting for a retry (for tests). */
  settled(): Promise<void> {
    if (this.inFlight === 0 && this.waiting.length === 0 && this.timers.size === 0) {
      return Promise.resolve();
    }
    return new Promise((resolve) => this.idle.push(resolve));
  }

  /** Stops sending; what is still pending stays pending in the store for the next start. */
  close(): void {
    this.closed = true;
    for (const t of this.timers) this.ctx.clock.clearTimer(t);
    this.timers.clear();
    this.waiting.length = 0;
  }
}
