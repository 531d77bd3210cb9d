import { AxError } from "../../../shared/errors.js";
import type { CoordinatorRecord } from "../port.js";
import { type CoordinatorRow, toCoordinator } from "../stored-text.js";
import type { StoreContext } from "./context.js";
import { wrap } from "./values.js";

/*
 * Coordinators sharing one SQLite file (Store.joinCoordinators and the rest), and the fence that
 * refuses a store's writes once its membership lapsed or a newer epoch of its id joined.
 *
 * The fence is on every write's path, so it is cheap there: a flag and a look at the store's
 * clock against the lease this object holds, and the coordinators row read only inside the
 * write's own transaction — once per write without group commit (another connection may have
 * joined the same id since), once per group with it (the group's IMMEDIATE transaction keeps
 * every other connection from writing until its commit).
 */

/** This store object's own membership, as it joined. */
interface Member {
  id: string;
  epoch: number;
  leaseMs: number;
  /** The lease as this object last wrote it, by the store's clock. */
  leaseUntil: number;
  /** For good, until the next join: a fenced member never writes again. */
  fenced: boolean;
  /** The group (GroupCommit.groupSeq) in which the row was last read or written. */
  checkedGroup: number;
}

/** The membership of one store object, and the fence it puts on that object's writes. */
export class Membership {
  private member: Member | undefined;

  constructor(private readonly ctx: StoreContext) {}

  /** Store.joinCoordinators: a new epoch of `id`, and the fence on from now on. */
  join(id: string, leaseMs: number, info: Record<string, unknown>): CoordinatorRecord {
    const { writer, statements: sql } = this.ctx;
    const row = wrap("joinCoordinators", () =>
      writer.write(
        () => {
          // The clock is read inside the transaction: a wait for another writer's lock comes
          // before it, not out of the lease.
          const now = this.ctx.nowMs();
          return sql
            .prepare(
              `INSERT INTO coordinators (id, epoch, joined_at, renewed_at, lease_until, info)
                 VALUES (@id, 1, @now, @now, @until, @info)
                 ON CONFLICT (id) DO UPDATE SET epoch = epoch + 1, joined_at = @now,
                   renewed_at = @now, lease_until = @until, info = @info
                 RETURNING *`,
            )
            .get({ id, now, until: now + leaseMs, info: JSON.stringify(info) }) as CoordinatorRow;
        },
        "savepoint",
        true,
      ),
    );
    this.member = {
      id,
      epoch: row.epoch,
      leaseMs,
      leaseUntil: row.lease_until,
      fenced: false,
      checkedGroup: writer.groupSeq,
    };
    writer.fence = this.check;
    return toCoordinator(row);
  }

  /** Store.renewMembership. */
  renew(info: Record<string, unknown> | undefined): boolean {
    const m = this.member;
    if (m === undefined || m.fenced) return false;
    const { writer, statements: sql } = this.ctx;
    return wrap("renewMembership", () =>
      writer.write(
        () => {
          const now = this.ctx.nowMs();
          if (this.lapsed(m, now) !== undefined) return false;
          const until = now + m.leaseMs;
          if (info === undefined) {
            sql
              .prepare("UPDATE coordinators SET renewed_at = ?, lease_until = ? WHERE id = ?")
              .run(now, until, m.id);
          } else {
            sql
              .prepare(
                "UPDATE coordinators SET renewed_at = ?, lease_until = ?, info = ? WHERE id = ?",
              )
              .run(now, until, JSON.stringify(info), m.id);
          }
          m.leaseUntil = until;
          m.checkedGroup = writer.groupSeq;
          return true;
        },
        "savepoint",
        true,
      ),
    );
  }

  /**
   * Store.leaveCoordinators: the lease ends now (only this epoch's: a newer one is left alone),
   * and this object's writes are fenced from then on, as after any lapse.
   */
  leave(): void {
    const m = this.member;
    if (m === undefined || m.fenced) return;
    const { writer, statements: sql } = this.ctx;
    wrap("leaveCoordinators", () =>
      writer.write(
        () => {
          const now = this.ctx.nowMs();
          sql
            .prepare(
              "UPDATE coordinators SET lease_until = ? WHERE id = ? AND epoch = ? AND lease_until > ?",
            )
            .run(now, m.id, m.epoch, now);
          m.leaseUntil = Math.min(m.leaseUntil, now);
        },
        "savepoint",
        true,
      ),
    );
    m.fenced = true;
  }

  /** Store.listCoordinators: live members, oldest joined first. */
  list(): CoordinatorRecord[] {
    const rows = wrap("listCoordinators", () =>
      this.ctx.statements
        .prepare("SELECT * FROM coordinators WHERE lease_until > ? ORDER BY joined_at, id")
        .all(this.ctx.nowMs()),
    ) as CoordinatorRow[];
    return rows.map(toCoordinator);
  }

  /** The fence (GroupCommit.fence): throws AX_STORE_FENCED unless this membership still holds. */
  private readonly check = (): void => {
    const m = this.member as Member;
    if (m.fenced) throw fencedError(m, "it was fenced before");
    const now = this.ctx.nowMs();
    const { writer } = this.ctx;
    if (now >= m.leaseUntil) {
      m.fenced = true;
      throw fencedError(m, `its lease lapsed at ${m.leaseUntil}`);
    }
    if (writer.groupCommit && m.checkedGroup === writer.groupSeq) return;
    const why = this.lapsed(m, now);
    if (why !== undefined) throw fencedError(m, why);
    m.checkedGroup = writer.groupSeq;
  };

  /**
   * Why the stored row is no longer this member's epoch with its lease running (and the member
   * fenced), or undefined while it is.
   */
  private lapsed(m: Member, now: number): string | undefined {
    const row = this.ctx.statements
      .prepare("SELECT epoch, lease_until FROM coordinators WHERE id = ?")
      .get(m.id) as Pick<CoordinatorRow, "epoch" | "lease_until"> | undefined;
    const why =
      row === undefined || row.epoch !== m.epoch
        ? `epoch ${row?.epoch ?? "none"} of it joined since`
        : row.lease_until <= now || now >= m.leaseUntil
          ? `its lease lapsed at ${Math.min(row.lease_until, m.leaseUntil)}`
          : undefined;
    if (why !== undefined) m.fenced = true;
    return why;
  }
}

function fencedError(m: Member, why: string): AxError {
  return new AxError(
    "AX_STORE_FENCED",
    `store: coordinator "${m.id}" (epoch ${m.epoch}) may not write: ${why}; join again for a new epoch`,
    { retryable: true, context: { coordinatorId: m.id, epoch: m.epoch } },
  );
}
