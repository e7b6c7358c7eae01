import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ANY, matches, mqttAccepts, ONE, parseBindingKey, REST, topicLevels, TopicTrie } from '../../src/core/index.js';

/** Matches with the MQTT rule's `$` check, as the Engine applies it to MQTT filters. */
function collect(t: TopicTrie<string>, topic: string): string[] {
  const out: string[] = [];
  t.match(topic, (v, w) => {
    if (mqttAccepts(topic, w)) out.push(v);
  });
  return out.sort();
}

function raw(t: TopicTrie<string>, topic: string): Array<[string, boolean]> {
  const out: Array<[string, boolean]> = [];
  t.match(topic, (v, w) => out.push([v, w]));
  return out.sort((a, b) => a[0].localeCompare(b[0]));
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
    assert.equal(rootChildren(t), 0);
  });
  it("tells the callback whether the first level was matched by a wildcard (the MQTT $ rule is the caller's)", () => {
    const t = new TopicTrie<string>();
    for (const f of ['#', '+/up', '$SYS/#', '$SYS/+']) t.add(f, f);
    assert.deepEqual(raw(t, '$SYS/up'), [
      ['#', true],
      ['+/up', true],
      ['$SYS/#', false],
      ['$SYS/+', false],
    ]);
    assert.deepEqual(collect(t, '$SYS/up'), ['$SYS/#', '$SYS/+']);
  });
  it('supports # at any position (zero or more levels), + and trailing > (one or more)', () => {
    const t = new TopicTrie<string>();
    t.add([ANY, 'c'], '#.c');
    t.add(['a', ANY, 'c'], 'a.#.c');
    t.add(['a', ONE, ANY], 'a.*.#');
    t.add(['a', REST], 'a.>');
    t.add([ANY], '#');
    const m = (topic: string) => [...new Set(raw(t, topic).map((x) => x[0]))].sort();
    assert.deepEqual(m('c'), ['#', '#.c']);
    assert.deepEqual(m('a/c'), ['#', '#.c', 'a.#.c', 'a.*.#', 'a.>']);
    assert.deepEqual(m('a/b/x/c'), ['#', '#.c', 'a.#.c', 'a.*.#', 'a.>']);
    assert.deepEqual(m('a'), ['#'], 'a.> needs one more level, a.*.# needs one');
    assert.deepEqual(m('b/c/d'), ['#']);
  });
  it('keeps wildcard tokens apart from literal levels that look like them', () => {
    const t = new TopicTrie<string>();
    t.add(parseBindingKey('a.+.#', 'amqp', true), 'amqp literal +');
    t.add(parseBindingKey('a.#', 'nats', true), 'nats literal #');
    t.add(parseBindingKey('a.>', 'amqp', true), 'amqp literal >');
    assert.deepEqual(
      raw(t, 'a/x').map((x) => x[0]),
      [],
    );
    assert.deepEqual(
      raw(t, 'a/+').map((x) => x[0]),
      ['amqp literal +'],
    );
    assert.deepEqual(
      raw(t, 'a/#').map((x) => x[0]),
      ['nats literal #'],
    );
    assert.deepEqual(
      raw(t, 'a/>').map((x) => x[0]),
      ['amqp literal >'],
    );
  });
  it('removes wildcard patterns and prunes their nodes', () => {
    const t = new TopicTrie<string>();
    t.add(['a', ANY, 'b', ONE], 'x');
    t.add(['a', REST], 'y');
    assert.ok(t.remove(['a', ANY, 'b', ONE], 'x'));
    assert.ok(!t.remove(['a', ANY, 'b'], 'x'));
    assert.ok(t.remove(['a', REST], 'y'));
    assert.equal(rootChildren(t), 0);
  });
});

/** Internal: how many children the trie's root has (in its Map, or the one kept in its fields). */
function rootChildren(t: TopicTrie<string>): number {
  const root = (t as unknown as { root: { children: Map<string, unknown> | null; child: unknown } }).root;
  return root.children !== null ? root.children.size : root.child === undefined ? 0 : 1;
}

describe('TopicTrie: first child and first value in the node, tables from the second', () => {
  it('matches, adds and removes the same across the change from fields to tables and back', () => {
    const t = new TopicTrie<string>();
    t.add('d/1/cmd', 'a');
    assert.deepEqual(collect(t, 'd/1/cmd'), ['a']);
    t.add('d/1/cmd', 'a');
    assert.equal(t.size, 1, 'the same value twice in the single slot is one');
    t.add('d/1/cmd', 'b');
    t.add('d/1/cmd', 'b');
    assert.equal(t.size, 2, 'and in the set');
    t.add('d/2/cmd', 'c');
    t.add('d/3/cmd', 'd');
    t.add('d/+/cmd', 'w');
    assert.deepEqual(collect(t, 'd/1/cmd'), ['a', 'b', 'w']);
    assert.deepEqual(collect(t, 'd/2/cmd'), ['c', 'w']);
    assert.deepEqual(collect(t, 'd/3/cmd'), ['d', 'w']);
    assert.deepEqual(collect(t, 'd/4/cmd'), ['w']);
    assert.ok(t.remove('d/1/cmd', 'a'));
    assert.ok(!t.remove('d/1/cmd', 'a'));
    assert.deepEqual(collect(t, 'd/1/cmd'), ['b', 'w']);
    assert.ok(t.remove('d/2/cmd', 'c'));
    assert.deepEqual(collect(t, 'd/2/cmd'), ['w']);
    assert.deepEqual(collect(t, 'd/3/cmd'), ['d', 'w']);
    for (const [f, v] of [
      ['d/1/cmd', 'b'],
      ['d/3/cmd', 'd'],
      ['d/+/cmd', 'w'],
    ])
      assert.ok(t.remove(f, v));
    assert.equal(t.size, 0);
    assert.equal(rootChildren(t), 0, 'every branch pruned');
    t.add('d/1/cmd', 'again');
    assert.deepEqual(collect(t, 'd/1/cmd'), ['again']);
  });
  it('keeps a value that is undefined or null like any other', () => {
    const t = new TopicTrie<string | undefined | null>();
    t.add('x', undefined);
    t.add('x', null);
    const got: unknown[] = [];
    t.match('x', (v) => got.push(v));
    assert.deepEqual(got, [undefined, null]);
    assert.ok(t.remove('x', undefined));
    assert.ok(t.remove('x', null));
    assert.equal(t.size, 0);
  });
});

describe('topicLevels', () => {
  it('splits a topic once and hands the same levels back, but never for long topics, and starts over when full', () => {
    const a = topicLevels('x/y/z');
    assert.deepEqual(a, ['x', 'y', 'z']);
    assert.equal(topicLevels('x/y/z'), a, 'cached');
    const long = 'l/'.repeat(200);
    assert.notEqual(topicLevels(long), topicLevels(long), 'long topics are not kept');
    for (let i = 0; i < 5000; i++) topicLevels(`t/${i}`);
    assert.deepEqual(topicLevels('x/y/z'), ['x', 'y', 'z'], 'right after the cache started over');
  });
});
