/**
 * Retained messages: the last retained publish of each topic, indexed by topic level so that a new
 * subscription finds the ones its filter matches without scanning every topic. Written through to a
 * RetainedStore by the engine; loaded from it at start.
 */
import type { Message } from './message.js';

interface Node {
  children: Map<string, Node>;
  msg: Message | null;
}

const node = (): Node => ({ children: new Map(), msg: null });

export class RetainedIndex {
  private readonly root = node();
  private count = 0;

  get size(): number {
    return this.count;
  }

  get(topic: string): Message | undefined {
    let n: Node | undefined = this.root;
    for (const l of topic.split('/')) {
      n = n.children.get(l);
      if (!n) return undefined;
    }
    return n.msg ?? undefined;
  }

  /** Sets (or replaces) the retained message of `msg.topic`. */
  set(msg: Message): void {
    let n = this.root;
    for (const l of msg.topic.split('/')) {
      let next = n.children.get(l);
      if (!next) n.children.set(l, (next = node()));
      n = next;
    }
    if (n.msg === null) this.count++;
    n.msg = msg;
  }

  /** Clears the retained message of `topic`; returns whether there was one. */
  delete(topic: string): boolean {
    const levels = topic.split('/');
    const path: Node[] = [this.root];
    let n = this.root;
    for (const l of levels) {
      const next = n.children.get(l);
      if (!next) return false;
      path.push(next);
      n = next;
    }
    if (n.msg === null) return false;
    n.msg = null;
    this.count--;
    for (let i = levels.length; i > 0; i--) {
      const c = path[i];
      if (c.msg !== null || c.children.size > 0) break;
      path[i - 1].children.delete(levels[i - 1]);
    }
    return true;
  }

  /** Every retained message whose topic matches `filter`; wildcards at the first level skip `$` topics. */
  match(filter: string, fn: (msg: Message) => void): void {
    this.walk(this.root, filter.split('/'), 0, fn);
  }

  private walk(n: Node, f: string[], i: number, fn: (msg: Message) => void): void {
    if (i === f.length) {
      if (n.msg) fn(n.msg);
      return;
    }
    const l = f[i];
    if (l === '#') {
      // "a/#" also matches "a" itself [MQTT-4.7.1-2].
      if (n.msg && i > 0) fn(n.msg);
      for (const [name, c] of n.children) if (!(i === 0 && name.startsWith('$'))) this.all(c, fn);
      return;
    }
    if (l === '+') {
      // [MQTT-4.7.2-1] no wildcard at the first level matches a `$` topic.
      for (const [name, c] of n.children) if (!(i === 0 && name.startsWith('$'))) this.walk(c, f, i + 1, fn);
      return;
    }
    const c = n.children.get(l);
    if (c) this.walk(c, f, i + 1, fn);
  }

  private all(n: Node, fn: (msg: Message) => void): void {
    if (n.msg) fn(n.msg);
    for (const c of n.children.values()) this.all(c, fn);
  }
}
