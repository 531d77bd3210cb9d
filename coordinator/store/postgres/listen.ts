import pg from "pg";

/** What a notification on the work channel says changed. */
export type WorkKind = "executions" | "jobs" | "access";

/** The work channel of a schema: one per schema, so stores on other schemas never hear it. */
export function workChannel(schema: string): string {
  return `ax_work_${schema}`;
}

/** Options of a {@link WorkListener}. */
export interface WorkListenerOptions {
  /** How to connect (the store pool's own settings). */
  client: pg.ClientConfig;
  channel: string;
  /** Server process ids of the store's own connections: their notifications are left out. */
  ownPids: ReadonlySet<number>;
  onWork: (what: WorkKind) => void;
  /** First wait before reconnecting after the connection dropped; it doubles up to 5 s. @default 100 */
  reconnectMs?: number;
}

const MAX_RECONNECT_MS = 5_000;

/**
 * One dedicated connection that LISTENs on the work channel and calls `onWork` for each
 * notification another store object sent (`executions`, `jobs` or `access`). The store's own notifications
 * are ignored: they come from connections whose server process ids it knows. When the
 * connection drops it reconnects (100 ms, doubling to 5 s), and after a reconnect it calls
 * `onWork` for every kind once, since notifications sent meanwhile were lost. {@link stop} ends
 * the connection and any pending reconnect.
 */
export class WorkListener {
  private client: pg.Client | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private stopped = false;
  private delayMs: number;
  /** Settles when the current connection attempt has. */
  private connecting: Promise<void> | undefined;

  constructor(private readonly options: WorkListenerOptions) {
    this.delayMs = options.reconnectMs ?? 100;
  }

  /** Connects and listens; resolves once listening (or once the first attempt failed). */
  start(): Promise<void> {
    this.connecting = this.connect(false);
    return this.connecting;
  }

  private async connect(again: boolean): Promise<void> {
    if (this.stopped) return;
    const client = new pg.Client(this.options.client);
    this.client = client;
    let dropped = false;
    const drop = () => {
      if (dropped) return;
      dropped = true;
      if (this.client === client) this.client = undefined;
      client.end().catch(() => {});
      this.scheduleReconnect();
    };
    // A connection error is reported here (and not thrown at anyone): reconnect.
    client.on("error", drop);
    client.on("end", drop);
    client.on("notification", (msg) => {
      if (this.options.ownPids.has(msg.processId)) return;
      const what = msg.payload;
      if (what === "executions" || what === "jobs" || what === "access") this.options.onWork(what);
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${client.escapeIdentifier(this.options.channel)}`);
    } catch {
      drop();
      return;
    }
    if (this.stopped) {
      await client.end().catch(() => {});
      return;
    }
    this.delayMs = this.options.reconnectMs ?? 100;
    if (again) {
      this.options.onWork("executions");
      this.options.onWork("jobs");
      this.options.onWork("access");
    }
  }

  private scheduleReconnect(): void {
    if (this.stopped || this.timer !== undefined) return;
    const wait = this.delayMs;
    this.delayMs = Math.min(MAX_RECONNECT_MS, this.delayMs * 2);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.connecting = this.connect(true);
    }, wait);
  }

  /** Stops listening: ends the connection and cancels any reconnect. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    await this.connecting;
    const client = this.client;
    this.client = undefined;
    if (client) await client.end().catch(() => {});
  }
}
