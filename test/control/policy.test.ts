/**
 * PolicySet (src/control/policy.ts): validation, matching per resource kind, deny wins, the admins group, the
 * default modes, `$` topics, and the subscription verdicts (allow / deny / filter) built on filterCovers and
 * filtersIntersect.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { isFlowError } from '../../src/core/index.js';
import {
  ANONYMOUS,
  PolicySet,
  filterCovers,
  filtersIntersect,
  guestIn,
  routingKeyName,
  validatePolicy,
  type PolicyDef,
  type Principal,
} from '../../src/control/policy.js';

const pol = (over: Partial<PolicyDef> & Pick<PolicyDef, 'name'>): PolicyDef => ({
  effect: 'allow',
  actions: ['*'],
  resources: ['*:*'],
  principals: ['everyone'],
  createdAt: 1,
  ...over,
});
const user = (name: string, ...groups: string[]): Principal => ({ user: name, groups, namespace: 'default' });
const alice = user('alice');
const bob = user('bob', 'ops');
const lv = (f: string) => f.split('/');
const invalid = (e: unknown) => isFlowError(e, 'INVALID_ARGUMENT');

describe('validatePolicy', () => {
  it('accepts the documented forms', () => {
    const def = pol({
      name: 'team-a:read@v1',
      actions: ['publish', 'subscribe', 'create', 'delete', 'describe', 'alter', 'admin'],
      resources: ['topic:a/+/#', 'topic:#', 'topic:$SYS/x', 'stream:orders-*', 'stream:*', 'queue:q1', 'exchange:amq.topic', 'group:g*', 'cluster:*', '*:*'],
      principals: ['user:alice', 'group:ops', 'everyone', '*', 'user:a:b@c'],
    });
    assert.equal(validatePolicy(def), def);
  });

  for (const [what, over] of [
    ['an empty name', { name: '' }],
    ['a name with a space', { name: 'a b' }],
    ['a name of 129 characters', { name: 'x'.repeat(129) }],
    ['an unknown effect', { effect: 'maybe' }],
    ['no actions', { actions: [] }],
    ['an unknown action', { actions: ['consume'] }],
    ['actions not a list', { actions: 'publish' }],
    ['no resources', { resources: [] }],
    ['a resource without a kind', { resources: ['a/b'] }],
    ['an unknown kind', { resources: ['table:x'] }],
    ['an empty pattern', { resources: ['topic:'] }],
    ['kind * with a pattern', { resources: ['*:a'] }],
    ['# inside a topic level', { resources: ['topic:a/b#'] }],
    ['# not last', { resources: ['topic:#/a'] }],
    ['+ inside a level', { resources: ['topic:a+/b'] }],
    ['* inside a name pattern', { resources: ['stream:a*b'] }],
    ['no principals', { principals: [] }],
    ['a bare principal name', { principals: ['alice'] }],
    ['an empty user', { principals: ['user:'] }],
    ['a principal that is not a string', { principals: [1] }],
  ] as Array<[string, Record<string, unknown>]>) {
    it(`refuses ${what} with INVALID_ARGUMENT`, () => {
      assert.throws(() => validatePolicy({ ...pol({ name: 'p' }), ...over } as PolicyDef), invalid);
    });
  }
});

describe('filterCovers and filtersIntersect', () => {
  const covers: Array<[string, string, boolean]> = [
    ['#', 'a/b', true],
    ['#', '#', true],
    ['#', '+/#', true],
    ['a/#', 'a', true], // `a/#` matches its parent level
    ['a/#', 'a/b/+/#', true],
    ['a/#', '#', false],
    ['a/+', 'a/b', true],
    ['a/+', 'a/+', true],
    ['a/+', 'a/#', false],
    ['a/+', 'a', false],
    ['a/+', 'a/b/c', false],
    ['a/b', 'a/+', false],
    ['a/b', 'a/b', true],
    ['a/b', 'a/b/c', false],
    ['a', 'a/#', false],
    ['+/b', 'x/b', true],
    ['#', '$SYS/x', false], // wildcards at the first level never reach `$` topics
    ['+/x', '$SYS/x', false],
    ['$SYS/#', '$SYS/a/b', true],
    ['$SYS/#', '#', false],
  ];
  for (const [p, s, want] of covers) {
    it(`${p} ${want ? 'covers' : 'does not cover'} ${s}`, () => assert.equal(filterCovers(lv(p), lv(s)), want));
  }

  const meets: Array<[string, string, boolean]> = [
    ['a/+', 'a/b', true],
    ['a/+', '+/b', true],
    ['a/b', 'a/c', false],
    ['a/#', 'a', true],
    ['a/+/c', 'a/b', false],
    ['a/+', 'a/b/c', false],
    ['#', 'x/y/z', true],
    ['#', '$SYS/#', false],
    ['+/#', '$SYS/x', false],
    ['$SYS/+', '$SYS/#', true],
    ['a/b/c', 'a/b/c', true],
    ['a/b', 'a/b/c', false],
  ];
  for (const [a, b, want] of meets) {
    it(`${a} and ${b} ${want ? 'intersect' : 'do not intersect'} (both ways)`, () => {
      assert.equal(filtersIntersect(lv(a), lv(b)), want);
      assert.equal(filtersIntersect(lv(b), lv(a)), want);
    });
  }
});

describe('PolicySet.allows', () => {
  it('default modes: auto allows while no policy exists and denies once one does; allow and deny are fixed', () => {
    assert.equal(new PolicySet([]).allows(ANONYMOUS, 'publish', 'topic', 'a'), true);
    assert.equal(new PolicySet([]).open, true);
    const one = [pol({ name: 'x', resources: ['topic:x'], principals: ['user:alice'] })];
    const auto = new PolicySet(one);
    assert.equal(auto.open, false);
    assert.equal(auto.allows(alice, 'publish', 'topic', 'x'), true);
    assert.equal(auto.allows(alice, 'publish', 'topic', 'y'), false, 'what no policy decides is denied once one exists');
    assert.equal(auto.allows(bob, 'publish', 'topic', 'x'), false);
    const allow = new PolicySet(one, 'allow');
    assert.equal(allow.allows(bob, 'publish', 'topic', 'y'), true);
    assert.equal(allow.open, false, 'policies exist: checks cannot be skipped');
    assert.equal(new PolicySet([], 'allow').open, true);
    const deny = new PolicySet([], 'deny');
    assert.equal(deny.open, false);
    assert.equal(deny.allows(alice, 'publish', 'topic', 'a'), false);
    assert.equal(deny.subscription(alice, 'a/#'), 'deny');
  });

  it('transactional ids are a kind of their own (Kafka TRANSACTIONAL_ID): exact, prefix, not reached by group: or stream:', () => {
    const set = new PolicySet([
      pol({ name: 'a', actions: ['publish'], resources: ['transactional-id:etl-*', 'group:etl-*', 'stream:etl-*'], principals: ['user:alice'] }),
      pol({ name: 'b', actions: ['describe'], resources: ['transactional-id:solo'], principals: ['user:bob'] }),
      pol({ name: 'c', effect: 'deny', actions: ['publish'], resources: ['transactional-id:etl-9'], principals: ['everyone'] }),
    ]);
    assert.equal(set.allows(alice, 'publish', 'transactional-id', 'etl-1'), true);
    assert.equal(set.allows(alice, 'publish', 'transactional-id', 'etl-9'), false, 'deny wins');
    assert.equal(set.allows(alice, 'publish', 'transactional-id', 'other'), false);
    assert.equal(set.allows(bob, 'describe', 'transactional-id', 'solo'), true);
    assert.equal(set.allows(bob, 'publish', 'transactional-id', 'solo'), false);
    const onlyGroup = new PolicySet([pol({ name: 'g', resources: ['group:*', 'stream:*'], principals: ['user:alice'] })]);
    assert.equal(onlyGroup.allows(alice, 'publish', 'transactional-id', 'x'), false, 'group:/stream: policies do not name transactional ids');
    assert.throws(() => validatePolicy(pol({ name: 'bad', resources: ['transactional-id:a*b'] })), invalid);
  });

  it('deny wins over allow, whatever the order', () => {
    const allowAll = pol({ name: 'all' });
    const denyX = pol({ name: 'nox', effect: 'deny', actions: ['publish'], resources: ['topic:secret/#'], principals: ['user:alice'] });
    for (const set of [new PolicySet([allowAll, denyX]), new PolicySet([denyX, allowAll])]) {
      assert.equal(set.allows(alice, 'publish', 'topic', 'secret/a'), false);
      assert.equal(set.allows(alice, 'publish', 'topic', 'secret'), false, 'secret/# covers its parent');
      assert.equal(set.allows(alice, 'subscribe', 'topic', 'secret/a'), true, 'another action');
      assert.equal(set.allows(bob, 'publish', 'topic', 'secret/a'), true, 'another principal');
      assert.equal(set.allows(alice, 'publish', 'topic', 'public/a'), true);
    }
  });

  it('members of admins are allowed everything, even what a deny names', () => {
    const set = new PolicySet([pol({ name: 'd', effect: 'deny', principals: ['everyone'] })], 'deny');
    const admin = user('root', 'admins');
    assert.equal(set.allows(admin, 'admin', 'cluster', '*'), true);
    assert.equal(set.allows(admin, 'publish', 'topic', '$SYS/x'), true);
    assert.equal(set.subscription(admin, '#'), 'allow');
    assert.equal(set.allows(alice, 'publish', 'topic', 'a'), false);
  });

  it('a removed principal (its user deleted) is allowed nothing, admins group or not', () => {
    const set = new PolicySet([pol({ name: 'all' })], 'allow');
    const gone = { user: 'alice', groups: ['admins'], namespace: 'default', removed: true };
    assert.equal(set.allows(gone, 'publish', 'topic', 'a'), false);
    assert.equal(set.subscription(gone, 'a'), 'deny');
    assert.equal(set.allows(alice, 'publish', 'topic', 'a'), true);
  });

  it('principals: user, group, everyone (anonymous included); anonymous matches only everyone', () => {
    const set = new PolicySet([
      pol({ name: 'u', resources: ['queue:u'], principals: ['user:alice'] }),
      pol({ name: 'g', resources: ['queue:g'], principals: ['group:ops'] }),
      pol({ name: 'e', resources: ['queue:e'], principals: ['everyone'] }),
    ]);
    assert.deepEqual(
      ['u', 'g', 'e'].map((q) => [
        set.allows(alice, 'subscribe', 'queue', q),
        set.allows(bob, 'subscribe', 'queue', q),
        set.allows(ANONYMOUS, 'subscribe', 'queue', q),
      ]),
      [
        [true, false, false],
        [false, true, false],
        [true, true, true],
      ],
    );
    // A user named like a group, and a user with a null name, never match a group or user principal by accident.
    assert.equal(set.allows(user('ops'), 'subscribe', 'queue', 'g'), false);
  });

  it('name patterns of non-topic kinds: exact, prefix, any; kinds are separate', () => {
    const set = new PolicySet([
      pol({ name: 'exact', actions: ['publish'], resources: ['stream:orders'] }),
      pol({ name: 'prefix', actions: ['subscribe'], resources: ['stream:logs-*'] }),
      pol({ name: 'any', actions: ['describe'], resources: ['group:*'] }),
    ]);
    assert.equal(set.allows(alice, 'publish', 'stream', 'orders'), true);
    assert.equal(set.allows(alice, 'publish', 'stream', 'orders2'), false);
    assert.equal(set.allows(alice, 'publish', 'queue', 'orders'), false, 'same name, other kind');
    assert.equal(set.allows(alice, 'subscribe', 'stream', 'logs-'), true);
    assert.equal(set.allows(alice, 'subscribe', 'stream', 'logs-app'), true);
    assert.equal(set.allows(alice, 'subscribe', 'stream', 'logs'), false);
    assert.equal(set.allows(alice, 'describe', 'group', 'anything'), true);
    assert.equal(set.allows(alice, 'delete', 'group', 'anything'), false, 'action not granted');
  });

  it('!~ negates a regular expression; routing-key patterns name an exchange exactly, then its keys', () => {
    const set = new PolicySet([
      pol({ name: 'not-tmp', actions: ['create'], resources: ['queue:!~^tmp\\.'] }),
      pol({ name: 'rk', effect: 'deny', actions: ['publish'], resources: ['routing-key:tp.x:!~^ok\\.'] }),
      pol({ name: 'rk-colon', effect: 'deny', actions: ['publish'], resources: ['routing-key:a%3Ab%25:*'] }),
      pol({ name: 'rk-user', effect: 'deny', actions: ['subscribe'], resources: ['routing-key:amq.topic:!~^{username}\\.'] }),
    ]);
    assert.equal(set.allows(alice, 'create', 'queue', 'orders'), true);
    assert.equal(set.allows(alice, 'create', 'queue', 'tmp.1'), false);
    // denies(): what a deny names; the exchange part exactly (tp.x is not a regex, tpAx another exchange).
    assert.equal(set.denies(alice, 'publish', 'routing-key', routingKeyName('tp.x', 'ok.1')), false);
    assert.equal(set.denies(alice, 'publish', 'routing-key', routingKeyName('tp.x', 'bad.1')), true);
    assert.equal(set.denies(alice, 'publish', 'routing-key', routingKeyName('tpAx', 'bad.1')), false);
    assert.equal(set.denies(alice, 'subscribe', 'routing-key', routingKeyName('tp.x', 'bad.1')), false, 'other action');
    // `:` and `%` in an exchange name are escaped; the key may hold `:`.
    assert.equal(routingKeyName('a:b%', 'k:1'), 'a%3Ab%25:k:1');
    assert.equal(set.denies(alice, 'publish', 'routing-key', routingKeyName('a:b%', 'k:1')), true);
    assert.equal(set.denies(alice, 'publish', 'routing-key', routingKeyName('a', 'b%:k')), false);
    // {username} is the asking user's name, per user.
    assert.equal(set.denies(alice, 'subscribe', 'routing-key', routingKeyName('amq.topic', 'alice.x')), false);
    assert.equal(set.denies(alice, 'subscribe', 'routing-key', routingKeyName('amq.topic', 'bob.x')), true);
    assert.equal(set.denies(bob, 'subscribe', 'routing-key', routingKeyName('amq.topic', 'bob.x')), false);
    // The user's name goes in as text (String.replace would read `$&` in it as "the matched text").
    assert.equal(set.denies(user('$&'), 'subscribe', 'routing-key', routingKeyName('amq.topic', '{username}.x')), true);
    // Only denies count: an allow of every kind refuses nothing, a deny of everything (`*:*`) refuses every key.
    assert.equal(new PolicySet([pol({ name: 'all' })]).denies(alice, 'publish', 'routing-key', 'x:y'), false);
    assert.equal(new PolicySet([pol({ name: 'none', effect: 'deny' })]).denies(alice, 'publish', 'routing-key', 'x:y'), true);
    assert.throws(() => validatePolicy(pol({ name: 'x', resources: ['routing-key:amq.topic'] })), invalid);
    assert.throws(() => validatePolicy(pol({ name: 'x', resources: ['routing-key:amq.topic:!~('] })), invalid);
  });

  it('grantsAny: the default allows, or an allow names the principal (by user, group or everyone)', () => {
    assert.equal(new PolicySet([]).grantsAny(alice), true);
    const set = new PolicySet([
      pol({ name: 'ops', principals: ['group:ops'], actions: ['describe'], resources: ['queue:*'] }),
      pol({ name: 'no-alice', effect: 'deny', principals: ['user:alice'] }),
    ]);
    assert.equal(set.grantsAny(bob), true);
    assert.equal(set.grantsAny(alice), false, 'a deny grants nothing');
    assert.equal(set.grantsAny(user('admin', 'admins')), true);
    assert.equal(new PolicySet([pol({ name: 'ops' })], 'allow').grantsAny(alice), true);
  });

  it("the default never grants a tenant the broker or a namespace; an unscoped policy does, a tenant's own does not", () => {
    const ann: Principal = { user: 'ann', groups: [], namespace: 't1' };
    for (const mode of ['auto', 'allow'] as const) {
      const none = new PolicySet([], mode);
      assert.equal(none.allows(ann, 'publish', 'topic', 'a'), true, `${mode}: its own names stay open`);
      assert.equal(none.allows(ann, 'create', 'stream', 'orders'), true, mode);
      for (const [action, kind] of [
        ['admin', 'cluster'],
        ['alter', 'cluster'],
        ['describe', 'cluster'],
        ['create', 'cluster'],
        ['admin', 'namespace'],
      ] as const) {
        assert.equal(none.allows(ann, action, kind, kind === 'cluster' ? '*' : 't1'), false, `${mode}: ${action} ${kind}`);
        assert.equal(none.allows(alice, action, kind, kind === 'cluster' ? '*' : 't1'), true, `${mode}: default's ${action} ${kind}`);
      }
    }
    const granted = new PolicySet([pol({ name: 'ann-ops', principals: ['user:ann'], actions: ['describe'], resources: ['cluster:*'] })]);
    assert.equal(granted.allows(ann, 'describe', 'cluster', '*'), true, 'an unscoped policy grants it on purpose');
    assert.equal(granted.allows(ann, 'alter', 'cluster', '*'), false);
    const own = new PolicySet([pol({ name: 't1-all', namespace: 't1', principals: ['user:ann'] })]);
    assert.equal(own.allows(ann, 'admin', 'cluster', '*'), false, "a tenant's own *:* stops short of the broker");
    assert.equal(own.allows(ann, 'publish', 'topic', 'x'), true);
  });

  it('topic patterns are MQTT filters on unified names, with `$` topics outside first-level wildcards', () => {
    const set = new PolicySet([
      pol({ name: 'wild', actions: ['publish'], resources: ['topic:#'] }),
      pol({ name: 'plus', actions: ['subscribe'], resources: ['topic:+/status'] }),
      pol({ name: 'sys', actions: ['subscribe'], resources: ['topic:$SYS/broker/#'] }),
    ]);
    assert.equal(set.allows(alice, 'publish', 'topic', 'a/b/c'), true);
    assert.equal(set.allows(alice, 'publish', 'topic', '$SYS/x'), false, '# does not match $ topics');
    assert.equal(set.allows(alice, 'subscribe', 'topic', 'dev1/status'), true);
    assert.equal(set.allows(alice, 'subscribe', 'topic', 'dev1/x/status'), false);
    assert.equal(set.allows(alice, 'subscribe', 'topic', '$SYS/broker/load'), true);
    // `*:*` is everything, `$` topics included.
    assert.equal(new PolicySet([pol({ name: 'all' })]).allows(alice, 'publish', 'topic', '$SYS/x'), true);
  });

  it('action * covers every action, and a list only its own', () => {
    const set = new PolicySet([pol({ name: 'a', actions: ['publish', 'create'], resources: ['exchange:x'] })]);
    assert.equal(set.allows(alice, 'publish', 'exchange', 'x'), true);
    assert.equal(set.allows(alice, 'create', 'exchange', 'x'), true);
    assert.equal(set.allows(alice, 'delete', 'exchange', 'x'), false);
    assert.deepEqual(
      set.defs().map((d) => d.name),
      ['a'],
    );
    assert.equal(set.size, 1);
  });
});

describe('policies scoped to a namespace', () => {
  const in1 = (name: string, ...groups: string[]): Principal => ({ user: name, groups, namespace: 't1' });
  const ann = in1('ann');
  const cid: Principal = { user: 'cid', groups: [], namespace: 't2' };

  it('validation: a namespace name, and never the kinds cluster or namespace', () => {
    assert.equal(validatePolicy(pol({ name: 's', namespace: 't1', resources: ['*:*', 'topic:a/#'] })).namespace, 't1');
    for (const resources of [['cluster:*'], ['namespace:t1'], ['topic:a', 'cluster:*']]) {
      assert.throws(() => validatePolicy(pol({ name: 's', namespace: 't1', resources })), invalid, resources.join());
    }
    for (const namespace of ['', 'a b', 'x'.repeat(65), 'a/b']) {
      assert.throws(() => validatePolicy(pol({ name: 's', namespace })), invalid, JSON.stringify(namespace));
    }
    assert.equal(validatePolicy(pol({ name: 'g', resources: ['namespace:t1'], actions: ['admin'] })).namespace, undefined);
  });

  it("applies only to its namespace's principals, everyone included", () => {
    const set = new PolicySet([pol({ name: 's', namespace: 't1', resources: ['topic:orders/#'], principals: ['everyone'] })]);
    assert.equal(set.allows(ann, 'publish', 'topic', 'orders/1'), true);
    assert.equal(set.allows(cid, 'publish', 'topic', 'orders/1'), true, "auto: no policy applies to t2, so t2's default stays allow");
    assert.equal(set.allows(alice, 'publish', 'topic', 'orders/1'), true, "and default's too");
    assert.equal(set.allows(ann, 'publish', 'topic', 'other'), false, "t1's default turned to deny with its first policy");
    assert.equal(set.grantsAny(ann), true);
    const deny = new PolicySet([pol({ name: 'all', resources: ['*:*'] }), pol({ name: 'd', effect: 'deny', namespace: 't1', resources: ['topic:secret/#'] })]);
    assert.equal(deny.allows(ann, 'subscribe', 'topic', 'secret/x'), false);
    assert.equal(deny.allows(cid, 'subscribe', 'topic', 'secret/x'), true, "t1's deny does not reach t2");
    assert.equal(deny.allows(alice, 'subscribe', 'topic', 'secret/x'), true, 'nor default');
  });

  it('a scoped *:* stops short of cluster and namespace: a tenant cannot grant itself the broker or another tenant', () => {
    const set = new PolicySet([
      pol({ name: 'tenant-all', namespace: 't1', resources: ['*:*'], principals: ['user:ann'] }),
      pol({ name: 'ns-admin', actions: ['admin'], resources: ['namespace:t1'], principals: ['user:ann'] }),
    ]);
    assert.equal(set.allows(ann, 'create', 'stream', 'orders'), true);
    assert.equal(set.allows(ann, 'admin', 'namespace', 't1'), true, 'the unscoped policy makes ann admin of t1');
    assert.equal(set.allows(ann, 'admin', 'namespace', 't2'), false);
    assert.equal(set.allows(ann, 'admin', 'cluster', '*'), false);
    assert.equal(set.allows(ann, 'describe', 'cluster', '*'), false);
    assert.equal(set.allows(cid, 'create', 'stream', 'orders'), false, "ann's policies name only ann");
  });

  it('an unscoped policy turns every namespace to deny by default in mode auto; a scoped one only its own', () => {
    const scoped = new PolicySet([pol({ name: 's', namespace: 't1', resources: ['topic:x'], principals: ['user:ann'] })]);
    assert.equal(scoped.allows(in1('other'), 'publish', 'topic', 'y'), false);
    assert.equal(scoped.allows(cid, 'publish', 'topic', 'y'), true);
    assert.equal(scoped.grantsAny(cid), true);
    const unscoped = new PolicySet([pol({ name: 'u', resources: ['topic:x'], principals: ['user:ann'] })]);
    assert.equal(unscoped.allows(cid, 'publish', 'topic', 'y'), false);
    assert.equal(unscoped.grantsAny(cid), false);
    assert.equal(new PolicySet([pol({ name: 's', namespace: 't1' })], 'deny').allows(cid, 'publish', 'topic', 'y'), false, 'mode deny is fixed');
  });
});

describe('PolicySet.subscription', () => {
  const set = new PolicySet([
    pol({ name: 'read-sensors', actions: ['subscribe'], resources: ['topic:sensors/#'], principals: ['user:alice'] }),
    pol({ name: 'no-secret', effect: 'deny', actions: ['subscribe'], resources: ['topic:sensors/secret/#'], principals: ['user:alice'] }),
    pol({ name: 'one-plant', actions: ['subscribe'], resources: ['topic:plant/1/#'], principals: ['user:alice'] }),
    pol({ name: 'pub', actions: ['publish'], resources: ['topic:#'], principals: ['everyone'] }),
  ]);

  const cases: Array<[string, string]> = [
    ['sensors/temp', 'allow'],
    ['sensors/+/temp', 'filter'], // may meet sensors/secret/temp: granted, each delivery checked
    ['sensors/#', 'filter'],
    ['sensors/secret/#', 'deny'],
    ['sensors/secret/x', 'deny'],
    ['sensors/public/#', 'allow'],
    ['plant/+/temp', 'filter'], // only plant/1/temp of it is allowed
    ['#', 'filter'],
    ['other/#', 'deny'], // nothing of it is allowed
    ['$SYS/#', 'deny'],
  ];
  for (const [filter, want] of cases) {
    it(`${filter} → ${want}`, () => assert.equal(set.subscription(alice, filter), want));
  }

  it('a filtered subscription admits exactly the allowed topics', () => {
    assert.equal(set.subscription(alice, 'sensors/+/temp'), 'filter');
    assert.equal(set.allows(alice, 'subscribe', 'topic', 'sensors/kitchen/temp'), true);
    assert.equal(set.allows(alice, 'subscribe', 'topic', 'sensors/secret/temp'), false);
  });

  it('publish policies do not grant subscriptions; another principal gets nothing', () => {
    assert.equal(set.subscription(bob, 'a/b'), 'deny');
    assert.equal(set.subscription(ANONYMOUS, '#'), 'deny');
  });

  it('default allow: a partial deny filters, a covering deny refuses, the rest is allowed', () => {
    const s = new PolicySet([pol({ name: 'd', effect: 'deny', actions: ['subscribe'], resources: ['topic:private/#'] })], 'allow');
    assert.equal(s.subscription(alice, 'public/#'), 'allow');
    assert.equal(s.subscription(alice, '#'), 'filter');
    assert.equal(s.subscription(alice, 'private/x'), 'deny');
    assert.equal(s.subscription(alice, '$SYS/#'), 'allow', 'the deny on private/# cannot meet $SYS topics');
  });

  it('a deny of *:* refuses everything, $ topics too', () => {
    const s = new PolicySet([pol({ name: 'a' }), pol({ name: 'd', effect: 'deny', principals: ['user:alice'] })]);
    assert.equal(s.subscription(alice, '$SYS/#'), 'deny');
    assert.equal(s.subscription(alice, 'a'), 'deny');
    assert.equal(s.subscription(bob, 'a'), 'allow');
  });
});

describe('regular-expression resources (`kind:~regex`, RabbitMQ permissions)', () => {
  it('match as RabbitMQ matches permissions: a search, "" only the empty name, the default exchange as amq.default', () => {
    const set = new PolicySet([
      pol({ name: 'c', actions: ['create'], resources: ['queue:~q[0-9]$'], principals: ['user:alice'] }),
      pol({ name: 'w', actions: ['publish'], resources: ['exchange:~^amq\\.default$'], principals: ['user:alice'] }),
      pol({ name: 'r', actions: ['subscribe'], resources: ['queue:~'], principals: ['user:alice'] }),
    ]);
    assert.equal(set.allows(alice, 'create', 'queue', 'my-q1'), true, 'unanchored: a search, not a prefix');
    assert.equal(set.allows(alice, 'create', 'queue', 'q1-mine'), false);
    assert.equal(set.allows(alice, 'create', 'exchange', 'my-q1'), false, 'another kind');
    assert.equal(set.allows(alice, 'publish', 'exchange', ''), true, 'the default exchange is amq.default');
    assert.equal(set.allows(alice, 'publish', 'exchange', 'x'), false);
    assert.equal(set.allows(alice, 'subscribe', 'queue', 'anything'), false, '"" is ^$');
    assert.equal(set.allows(bob, 'create', 'queue', 'my-q1'), false, 'another principal');
  });

  it('refuses an invalid or oversized expression', () => {
    assert.throws(() => validatePolicy(pol({ name: 'bad', resources: ['queue:~('] })), invalid);
    assert.throws(() => validatePolicy(pol({ name: 'long', resources: [`queue:~${'a'.repeat(2000)}`] })), invalid);
  });
});

describe('guests: a principal acting in another namespace (AMQP per-vhost permissions)', () => {
  const ann: Principal = { user: 'ann', groups: ['ops'], namespace: 't1' };
  const guest = guestIn(ann, 't2');
  const set = new PolicySet([
    // ann's own vhost: unscoped, as RabbitMQ permissions of the user's own vhost are written.
    pol({ name: 'home', source: 'rabbitmq-permission', principals: ['user:ann'], resources: ['queue:*'] }),
    pol({
      name: 'home-topic',
      source: 'rabbitmq-topic-permission',
      effect: 'deny',
      principals: ['user:ann'],
      actions: ['publish'],
      resources: ['routing-key:amq.topic:!~^a'],
    }),
    // A grant in t2: scoped to t2, naming ann.
    pol({ name: 'grant', namespace: 't2', principals: ['user:ann'], actions: ['subscribe'], resources: ['queue:~^ann-'] }),
    // Not grants: t2's everyone and a group of ann's, and an unscoped allow of ann.
    pol({ name: 't2-all', namespace: 't2', principals: ['everyone'], actions: ['create'], resources: ['queue:*'] }),
    pol({ name: 't2-ops', namespace: 't2', principals: ['group:ops'], actions: ['delete'], resources: ['queue:*'] }),
    pol({ name: 'ann-any', principals: ['user:ann'], actions: ['describe'], resources: ['queue:*'] }),
    // Denies: unscoped naming ann, scoped to t2 naming everyone, scoped to t1 (ann's home).
    pol({ name: 'no-x', effect: 'deny', principals: ['user:ann'], actions: ['subscribe'], resources: ['queue:ann-x'] }),
    pol({ name: 't2-no-y', effect: 'deny', namespace: 't2', principals: ['everyone'], actions: ['subscribe'], resources: ['queue:ann-y'] }),
    pol({ name: 't1-no-z', effect: 'deny', namespace: 't1', principals: ['user:ann'], actions: ['subscribe'], resources: ['queue:ann-z'] }),
  ]);
  it('guestIn keeps the home namespace and undoes itself there', () => {
    assert.deepEqual([guest.namespace, guest.home], ['t2', 't1']);
    assert.equal(guestIn(guest, 't1').home, undefined);
    assert.equal(guestIn(guest, 't1').namespace, 't1');
    assert.equal(guestIn(ann, 't1'), ann);
  });
  it('is allowed what the scoped policies naming its user grant, and nothing else', () => {
    assert.equal(set.allows(guest, 'subscribe', 'queue', 'ann-q'), true);
    assert.equal(set.allows(guest, 'subscribe', 'queue', 'bob-q'), false);
    assert.equal(set.allows(guest, 'create', 'queue', 'ann-q'), false, 'everyone of t2 is not a grant');
    assert.equal(set.allows(guest, 'delete', 'queue', 'ann-q'), false, 'a group in t2 is not a grant');
    assert.equal(set.allows(guest, 'describe', 'queue', 'ann-q'), false, 'an unscoped allow does not follow the user');
    assert.equal(set.allows(guest, 'publish', 'queue', 'ann-q'), false, 'its home permission does not follow it');
    assert.equal(set.allows(guest, 'describe', 'cluster', '*'), false);
    assert.equal(set.grantsAny(guest), true);
    assert.equal(set.grantsAny(guestIn(user('dee'), 't2')), false);
    // At home: as before.
    assert.equal(set.allows(ann, 'publish', 'queue', 'bob-q'), true);
    assert.equal(set.allows(ann, 'subscribe', 'queue', 'ann-q'), true);
  });
  it('every deny that applies holds: unscoped and scoped to the namespace, not its home permission or home scope', () => {
    assert.equal(set.allows(guest, 'subscribe', 'queue', 'ann-x'), false);
    assert.equal(set.allows(guest, 'subscribe', 'queue', 'ann-y'), false);
    assert.equal(set.allows(guest, 'subscribe', 'queue', 'ann-z'), true);
    assert.equal(set.denies(guest, 'publish', 'routing-key', routingKeyName('amq.topic', 'b.c')), false);
    assert.equal(set.denies(ann, 'publish', 'routing-key', routingKeyName('amq.topic', 'b.c')), true);
  });
  it("a RabbitMQ permission granting a guest leaves the namespace's own principals their default (mode auto)", () => {
    const bob: Principal = { user: 'bob', groups: [], namespace: 't2' };
    const granted = new PolicySet([pol({ name: 'g', namespace: 't2', source: 'rabbitmq-permission', principals: ['user:ann'], resources: ['queue:*'] })]);
    assert.equal(granted.allows(bob, 'create', 'queue', 'q'), true);
    assert.equal(granted.allows(guest, 'create', 'queue', 'q'), true);
    assert.equal(granted.allows(guest, 'create', 'exchange', 'x'), false);
    // A policy a namespace administrator writes is no such grant: t2 turns to deny by default.
    const written = new PolicySet([pol({ name: 'g', namespace: 't2', principals: ['user:ann'], resources: ['queue:*'] })]);
    assert.equal(written.allows(bob, 'create', 'queue', 'q'), false);
    assert.equal(written.allows(guest, 'create', 'queue', 'q'), true);
  });
  it('gets nothing by default, in any mode', () => {
    const empty = new PolicySet([], 'allow');
    assert.equal(empty.allows(guest, 'subscribe', 'queue', 'q'), false);
    assert.equal(empty.grantsAny(guest), false);
    assert.equal(new PolicySet([], 'auto').allows(guest, 'subscribe', 'queue', 'q'), false);
  });
});
