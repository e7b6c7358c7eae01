/**
 * Subscription trie: filters are stored level by level, so matching a topic costs O(levels), not O(filters).
 * Values are opaque to the trie; the same structure indexes live subscriptions and stream bindings.
 */
interface Node<V> {
  children: Map<string, Node<V>>;
  values: Set<V>;
  /** Values at `#` below this node. */
}

function newNode<V>(): Node<V> {
  return { children: new Map(), values: new Set() };
}

export class TopicTrie<V> {
  private readonly root: Node<V> = newNode();
  private count = 0;

  get size(): number {
    return this.count;
  }

  add(filter: string, value: V): void {
    let node = this.root;
    for (const level of filter.split('/')) {
      let next = node.children.get(level);
      if (!next) {
        next = newNode();
        node.children.set(level, next);
      }
      node = next;
    }
    if (!node.values.has(value)) {
      node.values.add(value);
      this.count++;
    }
  }

  remove(filter: string, value: V): boolean {
    const levels = filter.split('/');
    const path: Node<V>[] = [this.root];
    let node = this.root;
    for (const level of levels) {
      const next = node.children.get(level);
      if (!next) return false;
      path.push(next);
      node = next;
    }
    if (!node.values.delete(value)) return false;
    this.count--;
    // Prune empty branches so churn does not leak nodes.
    for (let i = levels.length; i > 0; i--) {
      const n = path[i];
      if (n.values.size > 0 || n.children.size > 0) break;
      path[i - 1].children.delete(levels[i - 1]);
    }
    return true;
  }

  /** Calls `fn` for every value whose filter matches `topic`. */
  match(topic: string, fn: (value: V) => void): void {
    const levels = topic.split('/');
    // [MQTT-4.7.2-1] wildcards at the first level do not match `$` topics.
    const dollar = topic.charCodeAt(0) === 0x24;
    this.walk(this.root, levels, 0, dollar, fn);
  }

  /** True when at least one filter matches `topic`. */
  hasMatch(topic: string): boolean {
    let found = false;
    this.match(topic, () => {
      found = true;
    });
    return found;
  }

  private walk(node: Node<V>, levels: string[], i: number, dollar: boolean, fn: (value: V) => void): void {
    const wildOk = !(dollar && i === 0);
    if (wildOk) {
      const hash = node.children.get('#');
      if (hash) for (const v of hash.values) fn(v);
    }
    if (i === levels.length) {
      for (const v of node.values) fn(v);
      return;
    }
    const exact = node.children.get(levels[i]);
    if (exact) this.walk(exact, levels, i + 1, dollar, fn);
    if (wildOk) {
      const plus = node.children.get('+');
      if (plus) this.walk(plus, levels, i + 1, dollar, fn);
    }
  }
}
