/**
 * Reads by key issued in one turn of the event loop, answered by one statement: the fires of
 * one wheel tick each read their job, the reports of one burst each their execution, the
 * dispatches of a pass each their job's open peers, which was one round trip (and one statement
 * for the server to run) per key. A caller still gets its own value, made from the rows of its
 * key (in the order fetched), and a read issued after a write returned runs after it, so it
 * sees it.
 */
export class ReadBatch<K, R, V> {
  private pending: { key: K; resolve: (v: V) => void; reject: (e: unknown) => void }[] = [];

  constructor(
    private readonly options: {
      /** The rows of these keys (unique); a key's rows in the order its caller gets them. */
      fetch: (keys: K[]) => Promise<R[]>;
      /** A key as a string, for a row or a request. */
      keyOf: (key: K) => string;
      rowKey: (row: R) => string;
      /** The value a caller gets from its key's rows (none: []), made for each caller. */
      toValue: (rows: R[]) => V;
      /** Keys in one statement, at most. @default 500 */
      maxKeys?: number;
    },
  ) {}

  get(key: K): Promise<V> {
    return new Promise((resolve, reject) => {
      this.pending.push({ key, resolve, reject });
      if (this.pending.length === 1) queueMicrotask(() => this.flush());
    });
  }

  private flush(): void {
    const all = this.pending;
    this.pending = [];
    const max = this.options.maxKeys ?? 500;
    const byKey = new Map<string, typeof all>();
    for (const p of all) {
      const k = this.options.keyOf(p.key);
      const list = byKey.get(k);
      if (list) list.push(p);
      else byKey.set(k, [p]);
    }
    const groups = [...byKey.values()];
    for (let from = 0; from < groups.length; from += max) {
      const chunk = groups.slice(from, from + max);
      this.options
        .fetch(chunk.map((g) => (g[0] as (typeof all)[number]).key))
        .then((rows) => {
          const found = new Map<string, R[]>();
          for (const row of rows) {
            const k = this.options.rowKey(row);
            const list = found.get(k);
            if (list) list.push(row);
            else found.set(k, [row]);
          }
          for (const g of chunk) {
            for (const p of g) {
              try {
                p.resolve(this.options.toValue(found.get(this.options.keyOf(p.key)) ?? []));
              } catch (err) {
                p.reject(err);
              }
            }
          }
        })
        .catch((err: unknown) => {
          for (const g of chunk) for (const p of g) p.reject(err);
        });
    }
  }
}
