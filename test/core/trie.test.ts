import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { matches, TopicTrie } from '../../src/core/index.js';

function collect(t: TopicTrie<string>, topic: string): string[] {
  const out: string[] = [];
  t.match(topic, (v) => out.push(v));
  return out.sort();
}

describe('TopicTrie', () => {
  it('matches exactly what matches() says, for many filters and topics', () => {
    const filters = ['#', '+', 'a', 'a/#', 'a/+', 'a/b', 'a/+/c', '+/b/#', '$SYS/#', '+/+', '/+', 'a/b/c/#', '+/#'];
    const topics = ['a', 'a/b', 'a/b/c', 'a/x/c', 'b', '/x', '$SYS/up', 'a/b/c/d', 'x/b', 'x/b/y', ''];
    const t = new TopicTrie<string>();
    for (const f of filters) t.add(f, f);
    assert.equal(t.size, filters.length);
    for (const topic of topics) {
      const expected = filters.filter((f) => matches(f, topic)).sort();
      assert.deepEqual(collect(t, topic), expected, `topic "${topic}"`);
    }
  });
  it('removes values and prunes empty branches', () => {
    const t = new TopicTrie<string>();
    t.add('a/b/c', 'x');
    t.add('a/b/c', 'y');
    t.add('a/b/c', 'x');
    assert.equal(t.size, 2);
    assert.ok(t.remove('a/b/c', 'x'));
    assert.ok(!t.remove('a/b/c', 'x'));
    assert.deepEqual(collect(t, 'a/b/c'), ['y']);
    assert.ok(t.remove('a/b/c', 'y'));
    assert.equal(t.size, 0);
    assert.ok(!t.hasMatch('a/b/c'));
    // internal: root has no children left
    assert.equal((t as unknown as { root: { children: Map<string, unknown> } }).root.children.size, 0);
  });
});
