/** Virtual nodes per agent on a consistent-hash ring unless the job says otherwise. */
export const DEFAULT_VIRTUAL_NODES = 2048;
/** The most virtual nodes per agent a job may ask for: a ring holds agents × this many points. */
export const MAX_VIRTUAL_NODES = 8192;

/** Orders agent ids by UTF-16 code unit, so `agent-10` sorts before `agent-2`. */
function compareIds(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** murmur3's 32-bit finaliser: every input bit flips each output bit with probability ~½. */
export function mix32(h: number): number {
  let x = h;
  x ^= x >>> 16;
  x = Math.imul(x, 0x85ebca6b);
  x ^= x >>> 13;
  x = Math.imul(x, 0xc2b2ae35);
  x ^= x >>> 16;
  return x >>> 0;
}

/**
 * A 32-bit hash of a string: FNV-1a over its UTF-16 code units, then murmur3's finaliser, since
 * FNV-1a alone leaves keys that differ in their last character close together. The same string
 * hashes the same in every process, so a placement does not change across restarts.
 */
export function hash32(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return mix32(h);
}

/**
 * A consistent-hash ring: each agent owns `virtualNodes` points on a 32-bit circle, and a key
 * belongs to the agent owning the first point at or after the key's hash (wrapping). A point
 * depends only on its agent's id and number, so removing an agent moves only the keys it owned,
 * and adding one takes keys only for itself.
 */
export class HashRing {
  private constructor(
    /** The agents on the ring, in agentId order; `ownerIndex` indexes this list. */
    readonly agentIds: readonly string[],
    private readonly points: Uint32Array,
    private readonly owners: Uint32Array,
  ) {}

  /** Builds the ring of `agentIds` (order and repeats do not matter). */
  static build(agentIds: Iterable<string>, virtualNodes: number = DEFAULT_VIRTUAL_NODES): HashRing {
    const ids = [...new Set(agentIds)].sort(compareIds);
    const vnodes = Math.max(1, Math.floor(virtualNodes));
    const vnodeSalts = new Uint32Array(vnodes);
    for (let v = 0; v < vnodes; v++) vnodeSalts[v] = mix32(v + 1);
    const points = new Uint32Array(ids.length * vnodes);
    const owners = new Uint32Array(points.length);
    let k = 0;
    for (let a = 0; a < ids.length; a++) {
      const base = hash32(ids[a] as string);
      for (let v = 0; v < vnodes; v++) {
        // Salting with the mixed vnode number keeps two agents' points apart even when their
        // id hashes happen to differ by some constant stride.
        points[k] = mix32(base ^ (vnodeSalts[v] as number));
        owners[k++] = a;
      }
    }
    // Stable, so equal points stay in owner order: the lower agentId wins a tie whatever else
    // is on the ring.
    radixSortBy(points, owners);
    return new HashRing(ids, points, owners);
  }

  /** Points on the ring: agents × virtual nodes. */
  get size(): number {
    return this.points.length;
  }

  /** The index in `agentIds` of the agent that owns `hash`; -1 on an empty ring. */
  ownerIndex(hash: number): number {
    const points = this.points;
    if (points.length === 0) return -1;
    let lo = 0;
    let hi = points.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((points[mid] as number) < hash) lo = mid + 1;
      else hi = mid;
    }
    return this.owners[lo === points.length ? 0 : lo] as number;
  }

  /** The agent that owns `key`; undefined on an empty ring. */
  ownerOf(key: string): string | undefined {
    return this.agentIds[this.ownerIndex(hash32(key))];
  }
}

/**
 * Sorts `keys` ascending and `values` along with them, stably: an LSD radix sort in three passes
 * of 11 bits. A comparison sort of a 1000-agent ring (2 million points) blocks for half a second;
 * this takes a few tens of milliseconds.
 */
function radixSortBy(keys: Uint32Array, values: Uint32Array): void {
  let srcK: Uint32Array = keys;
  let srcV: Uint32Array = values;
  let dstK: Uint32Array = new Uint32Array(keys.length);
  let dstV: Uint32Array = new Uint32Array(keys.length);
  const counts = new Uint32Array(2048);
  for (let shift = 0; shift < 32; shift += 11) {
    counts.fill(0);
    for (let i = 0; i < srcK.length; i++) {
      const d = ((srcK[i] as number) >>> shift) & 2047;
      counts[d] = (counts[d] as number) + 1;
    }
    let sum = 0;
    for (let d = 0; d < 2048; d++) {
      const c = counts[d] as number;
      counts[d] = sum;
      sum += c;
    }
    for (let i = 0; i < srcK.length; i++) {
      const key = srcK[i] as number;
      const d = (key >>> shift) & 2047;
      const at = counts[d] as number;
      counts[d] = at + 1;
      dstK[at] = key;
      dstV[at] = srcV[i] as number;
    }
    [srcK, dstK] = [dstK, srcK];
    [srcV, dstV] = [dstV, srcV];
  }
  // Three passes: the sorted data sits in the scratch arrays.
  keys.set(srcK);
  values.set(srcV);
}
