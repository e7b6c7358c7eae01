/**
 * The pure parts of the consumer group protocol (KIP-848): the server-side assignors (uniform, range), the
 * reconciliation of a member towards its target (revoke before assign, never two owners), the member epoch check,
 * and the translation of RE2/J topic regexes.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { range, selectAssignor, uniform, type AssignorMember, type AssignorTopic } from '../../../src/protocols/kafka/groups/assignors.js';
import {
  EMPTY_ASSIGNMENT,
  countPartitions,
  epochAcceptable,
  reconcile,
  type Assignment,
  type ReconcileState,
} from '../../../src/protocols/kafka/groups/reconcile.js';
import { compileTopicRegex } from '../../../src/protocols/kafka/groups/topic-regex.js';

const T1 = 'a'.repeat(32);
const T2 = 'b'.repeat(32);
const topics = (...ts: Array<[string, string, number]>): Map<string, AssignorTopic> =>
  new Map(ts.map(([id, name, partitions]) => [id, { id, name, partitions }]));
const member = (memberId: string, subs: string[], instanceId: string | null = null): AssignorMember => ({ memberId, instanceId, topics: new Set(subs) });
const asg = (o: Record<string, number[]>): Assignment => new Map(Object.entries(o).map(([t, ps]) => [t, new Set(ps)]));
const flat = (a: Assignment | undefined): string[] => [...(a ?? new Map())].flatMap(([t, ps]) => [...ps].map((p) => `${t[0]}${p}`)).sort();

/** Every partition of the topics is owned by exactly one member. */
function assertPartition(out: Map<string, Assignment>, ts: Map<string, AssignorTopic>): void {
  const seen = new Set<string>();
  for (const a of out.values()) {
    for (const [t, ps] of a) {
      for (const p of ps) {
        const k = `${t}:${p}`;
        assert.ok(!seen.has(k), `${k} assigned twice`);
        seen.add(k);
      }
    }
  }
  let total = 0;
  for (const t of ts.values()) total += t.partitions;
  assert.equal(seen.size, total);
}

describe('uniform assignor', () => {
  it('balances identical subscriptions to floor/ceil and covers every partition once', () => {
    const ts = topics([T1, 't1', 4], [T2, 't2', 3]);
    const members = ['m1', 'm2', 'm3'].map((m) => member(m, [T1, T2]));
    const out = uniform({ members, topics: ts, previous: new Map() });
    assertPartition(out, ts);
    const counts = [...out.values()].map(countPartitions).sort();
    assert.deepEqual(counts, [2, 2, 3]);
  });

  it('is sticky: a member joining takes partitions only from the others, who keep the rest', () => {
    const ts = topics([T1, 't1', 4]);
    const before = uniform({ members: [member('m1', [T1])], topics: ts, previous: new Map() });
    assert.deepEqual(flat(before.get('m1')), ['a0', 'a1', 'a2', 'a3']);
    const after = uniform({ members: [member('m1', [T1]), member('m2', [T1])], topics: ts, previous: before });
    assertPartition(after, ts);
    assert.equal(countPartitions(after.get('m1') as Assignment), 2);
    assert.equal(countPartitions(after.get('m2') as Assignment), 2);
    // What m1 keeps it had before.
    for (const p of flat(after.get('m1'))) assert.ok(flat(before.get('m1')).includes(p));
    // And when m2 leaves again, m1 gets everything back.
    const alone = uniform({ members: [member('m1', [T1])], topics: ts, previous: after });
    assert.deepEqual(flat(alone.get('m1')), ['a0', 'a1', 'a2', 'a3']);
  });

  it('gives a topic only to its subscribers and balances what can be balanced (different subscriptions)', () => {
    const ts = topics([T1, 't1', 6], [T2, 't2', 2]);
    const out = uniform({ members: [member('m1', [T1, T2]), member('m2', [T1]), member('m3', [T2])], topics: ts, previous: new Map() });
    assertPartition(out, ts);
    assert.ok(flat(out.get('m2')).every((p) => p.startsWith('a')));
    assert.ok(flat(out.get('m3')).every((p) => p.startsWith('b')));
    const counts = [...out.values()].map(countPartitions);
    assert.ok(Math.max(...counts) - Math.min(...counts) <= 1, `counts ${counts.join(',')}`);
  });

  it('drops partitions of topics no longer subscribed or gone, and assigns nothing without subscribers', () => {
    const ts = topics([T1, 't1', 2]);
    const out = uniform({ members: [member('m1', [T2])], topics: ts, previous: new Map([['m1', asg({ [T1]: [0, 1] })]]) });
    assert.equal(countPartitions(out.get('m1') as Assignment), 0);
  });
});

describe('range assignor', () => {
  it('gives contiguous ranges per topic, co-partitioned across topics', () => {
    const ts = topics([T1, 't1', 3], [T2, 't2', 3]);
    const out = range({ members: [member('m1', [T1, T2]), member('m0', [T1, T2])], topics: ts, previous: new Map() });
    assert.deepEqual(flat(out.get('m0')), ['a0', 'a1', 'b0', 'b1']);
    assert.deepEqual(flat(out.get('m1')), ['a2', 'b2']);
  });

  it('orders static members first, by instance id', () => {
    const ts = topics([T1, 't1', 4]);
    const out = range({ members: [member('a', [T1]), member('z', [T1], 'i1'), member('y', [T1], 'i0')], topics: ts, previous: new Map() });
    assert.deepEqual(flat(out.get('y')), ['a0', 'a1']);
    assert.deepEqual(flat(out.get('z')), ['a2']);
    assert.deepEqual(flat(out.get('a')), ['a3']);
  });
});

describe('assignor selection', () => {
  it('takes the one most members name, uniform when none', () => {
    assert.equal(selectAssignor([]), 'uniform');
    assert.equal(selectAssignor([null, 'range']), 'range');
    assert.equal(selectAssignor(['range', 'uniform', 'uniform']), 'uniform');
    assert.equal(selectAssignor(['nope']), 'uniform');
  });
});

const stable = (epoch: number, assigned: Assignment): ReconcileState => ({
  state: 'stable',
  memberEpoch: epoch,
  previousMemberEpoch: epoch - 1,
  assigned,
  pendingRevocation: EMPTY_ASSIGNMENT,
});
const owned = (a: Record<string, number[]>) => Object.entries(a).map(([topicId, partitions]) => ({ topicId, partitions }));

describe('reconciliation', () => {
  const free = (): number => -1;

  it('a new member gets its free target partitions at the target epoch', () => {
    const r = reconcile(stable(0, EMPTY_ASSIGNMENT), 3, asg({ [T1]: [0, 1] }), free, []);
    assert.equal(r.state, 'stable');
    assert.equal(r.memberEpoch, 3);
    assert.deepEqual(flat(r.assigned), ['a0', 'a1']);
  });

  it('revokes first, at the same epoch, and moves on only once the member stops reporting them', () => {
    const m = stable(2, asg({ [T1]: [0, 1, 2, 3] }));
    const target = asg({ [T1]: [0, 1] });
    const r1 = reconcile(m, 3, target, free, owned({ [T1]: [0, 1, 2, 3] }));
    assert.equal(r1.state, 'unrevoked_partitions');
    assert.equal(r1.memberEpoch, 2);
    assert.deepEqual(flat(r1.assigned), ['a0', 'a1']);
    assert.deepEqual(flat(r1.pendingRevocation), ['a2', 'a3']);
    // Still reporting 2: nothing moves.
    assert.equal(reconcile(r1, 3, target, free, owned({ [T1]: [0, 1, 2] })), r1);
    // Not reporting at all (a keep-alive heartbeat): nothing moves either.
    assert.equal(reconcile(r1, 3, target, free, null), r1);
    const r2 = reconcile(r1, 3, target, free, owned({ [T1]: [0, 1] }));
    assert.equal(r2.state, 'stable');
    assert.equal(r2.memberEpoch, 3);
    assert.equal(r2.previousMemberEpoch, 2);
    assert.deepEqual(flat(r2.assigned), ['a0', 'a1']);
    assert.equal(countPartitions(r2.pendingRevocation), 0);
  });

  it('waits for partitions another member still holds (unreleased), then takes them', () => {
    let held = true;
    const owner = (t: string, p: number): number => (held && t === T1 && p === 2 ? 5 : -1);
    const r1 = reconcile(stable(4, asg({ [T1]: [0] })), 6, asg({ [T1]: [0, 1, 2] }), owner, owned({ [T1]: [0] }));
    assert.equal(r1.state, 'unreleased_partitions');
    assert.equal(r1.memberEpoch, 6);
    assert.deepEqual(flat(r1.assigned), ['a0', 'a1']);
    assert.equal(reconcile(r1, 6, asg({ [T1]: [0, 1, 2] }), owner, null).state, 'unreleased_partitions');
    held = false;
    const r2 = reconcile(r1, 6, asg({ [T1]: [0, 1, 2] }), owner, null);
    assert.equal(r2.state, 'stable');
    assert.deepEqual(flat(r2.assigned), ['a0', 'a1', 'a2']);
  });

  it('never hands out a partition that is held: two members swapping partitions go through revocation', () => {
    // A has 0,1; B has 2,3; the target swaps 1 and 2.
    const members = new Map<string, ReconcileState>([
      ['A', stable(1, asg({ [T1]: [0, 1] }))],
      ['B', stable(1, asg({ [T1]: [2, 3] }))],
    ]);
    const target = new Map([
      ['A', asg({ [T1]: [0, 2] })],
      ['B', asg({ [T1]: [1, 3] })],
    ]);
    const clientOwns = new Map<string, number[]>([
      ['A', [0, 1]],
      ['B', [2, 3]],
    ]);
    const ownerEpoch =
      (self: string) =>
      (t: string, p: number): number => {
        for (const [id, m] of members) {
          if (id === self) continue;
          if (m.assigned.get(t)?.has(p) || m.pendingRevocation.get(t)?.has(p)) return m.memberEpoch;
        }
        return -1;
      };
    const check = (): void => {
      const seen = new Map<number, string>();
      for (const [id, m] of members) {
        for (const p of [...(m.assigned.get(T1) ?? []), ...(m.pendingRevocation.get(T1) ?? [])]) {
          assert.ok(!seen.has(p) || seen.get(p) === id, `partition ${p} held by ${seen.get(p)} and ${id}`);
          seen.set(p, id);
        }
      }
    };
    for (let round = 0; round < 4; round++) {
      for (const id of ['A', 'B']) {
        const m = members.get(id) as ReconcileState;
        const next = reconcile(m, 2, target.get(id) as Assignment, ownerEpoch(id), owned({ [T1]: clientOwns.get(id) as number[] }));
        members.set(id, next);
        // The client applies what it is told: it owns exactly its assigned partitions afterwards.
        clientOwns.set(id, [...(next.assigned.get(T1) ?? [])]);
        check();
      }
    }
    assert.deepEqual(flat(members.get('A')?.assigned), ['a0', 'a2']);
    assert.deepEqual(flat(members.get('B')?.assigned), ['a1', 'a3']);
    assert.equal(members.get('A')?.memberEpoch, 2);
    assert.equal(members.get('B')?.state, 'stable');
  });

  it('accepts the current epoch, or the previous one with only assigned partitions owned; fences the rest', () => {
    const m = { memberEpoch: 5, previousMemberEpoch: 4, assigned: asg({ [T1]: [0, 1] }) };
    assert.ok(epochAcceptable(m, 5, null));
    assert.ok(epochAcceptable(m, 4, owned({ [T1]: [1] })));
    assert.ok(!epochAcceptable(m, 4, owned({ [T1]: [2] })));
    assert.ok(!epochAcceptable(m, 4, null));
    assert.ok(!epochAcceptable(m, 3, owned({ [T1]: [1] })));
    assert.ok(!epochAcceptable(m, 6, null));
  });
});

describe('topic regex (RE2/J syntax)', () => {
  const matches = (re: string, name: string): boolean => {
    const r = compileTopicRegex(re);
    assert.ok(r.ok, `refused ${re}: ${r.ok ? '' : r.reason}`);
    return r.regex.test(name);
  };
  const refused = (re: string): string => {
    const r = compileTopicRegex(re);
    assert.ok(!r.ok, `accepted ${re}`);
    return r.reason;
  };

  it('matches whole topic names', () => {
    assert.ok(matches('orders.*', 'orders-eu'));
    assert.ok(!matches('orders', 'orders-eu'));
    assert.ok(!matches('rders.*', 'orders'));
    // librdkafka sends its ^-subscriptions combined as (^a)|(^b).
    assert.ok(matches('(^orders-.*)|(^payments\\..*)', 'payments.eu'));
    assert.ok(!matches('(^orders-.*)|(^payments\\..*)', 'paymentsXeu'));
  });

  it('translates RE2 syntax JavaScript spells differently', () => {
    assert.ok(matches('(?i)ORDERS-[[:digit:]]+', 'orders-42'));
    assert.ok(matches('\\Qa.b\\E-x', 'a.b-x'));
    assert.ok(!matches('\\Qa.b\\E-x', 'aXb-x'));
    assert.ok(matches('\\Ahello\\z', 'hello'));
    assert.ok(matches('[]a]+', ']a]'));
    assert.ok(matches('a{,2}', 'a{,2}'));
    assert.ok(matches('\\pL+', 'abc'));
    assert.ok(!matches('\\PL+', 'abc'));
    assert.ok(matches('(?P<region>eu|us)-orders', 'eu-orders'));
    assert.ok(matches('\\x{41}\\x42\\103', 'ABC'));
    assert.ok(matches('a\\-b\\.c', 'a-b.c'));
    assert.ok(matches('[\\d\\-_]+', '1-_2'));
  });

  it('refuses what RE2 refuses', () => {
    assert.match(refused('(a)\\1'), /backreference/);
    assert.match(refused('a(?=b)'), /lookahead/);
    assert.match(refused('(?<!a)b'), /lookahead and lookbehind/);
    assert.match(refused('a{1001}'), /1000/);
    assert.match(refused('a++'), /possessive|nested/);
    assert.match(refused('\\y'), /invalid escape/);
    assert.match(refused('(ab'), /missing closing \)/);
    assert.match(refused('ab)'), /unexpected \)/);
    assert.match(refused('[ab'), /missing closing \]/);
    assert.match(refused('*a'), /missing argument/);
    assert.match(refused('[z-a]'), /./);
  });

  it('refuses what a JavaScript RegExp cannot run safely or the same way', () => {
    assert.match(refused('(a+)+b'), /nested repetition/);
    assert.match(refused('(a|ab)*c'), /nested repetition/);
    assert.match(refused('a(?i:b)'), /flag groups/);
    assert.match(refused('(?U)a*'), /flags/);
    assert.match(refused('[[:^alpha:]]'), /negated POSIX/);
    assert.match(refused('\\C'), /any byte/);
    // A repeated group without inner repetition, and an optional one with, are fine.
    assert.ok(matches('(ab)+', 'abab'));
    assert.ok(matches('(a+)?b', 'aab'));
  });
});
