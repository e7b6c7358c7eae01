/**
 * Fair group commits for a queue store: the calls waiting for the next commit, kept in one lane per queue, and each
 * group taken from the lanes by deficit round robin (Shreedhar and Varghese), so that a publisher flooding one queue
 * cannot make another queue's calls wait behind its whole backlog (issue 24).
 *
 * A group is one round: every lane with calls waiting adds the round's quantum to its deficit and gives, in its own
 * order, the calls whose cost fits in it (a lane emptied forgets its deficit). The quantum is `quantum` while some
 * waiting lane is light (all it waits with fits in one quantum): its calls then join the very next group whole, beside
 * at most one quantum of each busy lane, and that group stays small, so it commits soon. Without a light lane the
 * busy lanes share `groupLimit` (a lone lane takes all of it), so that publishers alone keep the large groups (few
 * fsyncs) they had before; but for `holdMs` after a light lane waited beside others the groups stay small all the same,
 * since a group cannot be interrupted: a light publisher's next call (it waits for its confirms) would otherwise
 * arrive during, and wait for, a large group of the busy lane. Nothing is dropped: what does not fit waits for the next group, and the publisher behind
 * it is slowed by its connection's credit (its calls settle later).
 *
 * Order: calls of one lane leave in the order they came, and a lane is a queue, so calls naming the same queue take
 * effect in the order they were issued (the QueueStore contract); only calls of different queues are reordered.
 */

interface Lane<T> {
  key: string;
  items: T[];
  costs: number[];
  head: number;
  deficit: number;
  /** Cost of the calls waiting. */
  cost: number;
  active: boolean;
}

export class FairGroups<T> {
  private readonly lanes = new Map<string, Lane<T>>();
  /** Lanes with calls waiting, in round-robin order. */
  private ring: Array<Lane<T>> = [];
  private waiting = 0;
  /** Until when (clock ms) groups stay small: a light lane waited beside others lately, and is likely back soon. */
  private smallUntil = -Infinity;

  constructor(
    /** Cost a lane may send per group while a light lane waits. */
    private readonly quantum: number,
    /** Cost of a group without light lanes, shared by its lanes. */
    private readonly groupLimit: number,
    /** How long after a light lane waited beside others the groups stay small (ms of `clock`). */
    private readonly holdMs = 0,
    private readonly clock: () => number = () => performance.now(),
  ) {}

  /** Calls waiting. */
  get size(): number {
    return this.waiting;
  }

  /** Lanes with calls waiting. */
  get activeLanes(): number {
    return this.ring.length;
  }

  push(key: string, item: T, cost: number): void {
    let lane = this.lanes.get(key);
    if (lane === undefined) {
      lane = { key, items: [], costs: [], head: 0, deficit: 0, cost: 0, active: false };
      this.lanes.set(key, lane);
    }
    lane.items.push(item);
    lane.costs.push(cost);
    lane.cost += cost;
    this.waiting++;
    if (!lane.active) {
      lane.active = true;
      this.ring.push(lane);
    }
  }

  /**
   * Visits the calls of `key`'s lane still waiting (not yet in a group), oldest first; `visit` may change a call in
   * place and returns by how much its cost went down (0 if unchanged).
   */
  forWaiting(key: string, visit: (item: T) => number): void {
    const lane = this.lanes.get(key);
    if (lane === undefined) return;
    for (let i = lane.head; i < lane.items.length; i++) {
      const less = visit(lane.items[i]!);
      if (less === 0) continue;
      lane.costs[i] = Math.max(0, lane.costs[i]! - less);
      lane.cost = Math.max(0, lane.cost - less);
    }
  }

  /** The next group (empty only when nothing waits): one round of deficit round robin over the waiting lanes. */
  next(): T[] {
    const out: T[] = [];
    if (this.waiting === 0) return out;
    let light = false;
    for (const lane of this.ring) if (lane.cost <= this.quantum) light = true;
    let small = light;
    if (this.holdMs > 0) {
      const now = this.clock();
      if (light && this.ring.length > 1) this.smallUntil = now + this.holdMs;
      else if (now < this.smallUntil) small = true;
    }
    const quantum = small ? this.quantum : Math.max(this.quantum, this.groupLimit / this.ring.length);
    // A call costlier than a quantum waits for its lane's deficit to grow over rounds; rounds that give nothing
    // are skipped (each one adds a quantum to every waiting lane).
    while (out.length === 0) {
      for (const lane of this.ring) {
        lane.deficit += quantum;
        while (lane.head < lane.items.length && lane.costs[lane.head]! <= lane.deficit) {
          lane.deficit -= lane.costs[lane.head]!;
          lane.cost -= lane.costs[lane.head]!;
          out.push(lane.items[lane.head]!);
          lane.items[lane.head] = undefined as T;
          lane.head++;
        }
        if (lane.head === lane.items.length) {
          lane.items = [];
          lane.costs = [];
          lane.head = 0;
          lane.deficit = 0;
          lane.cost = 0;
          lane.active = false;
          this.lanes.delete(lane.key);
        } else if (lane.head > 1024 && lane.head * 2 > lane.items.length) {
          lane.items = lane.items.slice(lane.head);
          lane.costs = lane.costs.slice(lane.head);
          lane.head = 0;
        }
      }
      this.ring = this.ring.filter((l) => l.active);
    }
    this.waiting -= out.length;
    return out;
  }
}
