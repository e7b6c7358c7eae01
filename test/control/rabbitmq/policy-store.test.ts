/**
 * RabbitMQ policies (src/control/rabbitmq/policy-store.ts): RabbitMQ 3.10's validation, which policy applies to a
 * queue (pattern searched, apply-to, highest priority), the merge with an operator policy (the smaller value), and the
 * effective arguments (queue argument wins for dead-lettering and overflow; the smaller value for limits).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { QueueDef } from '../../../src/core/index.js';
import { MemoryControlStore } from '../../../src/storage/metastore/control-store.js';
import { RabbitError } from '../../../src/control/rabbitmq/errors.js';
import { RabbitPolicies, parsePolicy } from '../../../src/control/rabbitmq/policy-store.js';

const queue = (name: string, args: QueueDef['arguments'] = {}): QueueDef => ({
  name,
  durable: true,
  exclusiveOwner: null,
  autoDelete: false,
  arguments: args,
  rawArguments: {},
  createdAt: 0,
});
const noExchanges = { getExchange: () => undefined };
const refused = (e: unknown) => e instanceof RabbitError && e.status === 400;

describe('RabbitMQ policies', () => {
  it('validate as RabbitMQ: keys, values, pattern, apply-to, priority; operator policies hold limits only', () => {
    const ok = parsePolicy('policy', 'default', 'p', { pattern: '^a', definition: { 'max-length': 1, 'queue-mode': 'lazy', 'ha-mode': 'all' } });
    assert.equal(ok.applyTo, 'all');
    assert.equal(ok.priority, 0);
    for (const body of [
      { pattern: '^a' },
      { definition: { 'max-length': 1 } },
      { pattern: '^a', definition: {} },
      { pattern: '^a', definition: { bogus: 1 } },
      { pattern: '^a', definition: { 'max-length': -1 } },
      { pattern: '^a', definition: { expires: 0 } },
      { pattern: '^a', definition: { overflow: 'drop-tail' } },
      { pattern: '(', definition: { 'max-length': 1 } },
      { pattern: '^a', definition: { 'max-length': 1 }, 'apply-to': 'streams' },
      { pattern: '^a', definition: { 'max-length': 1 }, priority: 'high' },
    ]) {
      assert.throws(() => parsePolicy('policy', 'default', 'p', body), refused, JSON.stringify(body));
    }
    assert.throws(() => parsePolicy('operator', 'default', 'o', { pattern: '^a', definition: { 'dead-letter-exchange': 'x' } }), refused);
  });

  it('apply the matching policy of highest priority, merged with the operator policy, under the queue arguments', async () => {
    const store = new MemoryControlStore();
    let changes = 0;
    const p = new RabbitPolicies(store, () => changes++, noExchanges);
    assert.equal(await p.put('policy', parsePolicy('policy', 'default', 'low', { pattern: 'orders', definition: { 'max-length': 100 }, priority: 0 })), true);
    const high = { pattern: '^orders', definition: { 'max-length': 10, 'dead-letter-exchange': 'dlx', overflow: 'reject-publish' }, priority: 5 };
    assert.equal(await p.put('policy', parsePolicy('policy', 'default', 'high', high)), true);
    assert.equal(await p.put('policy', parsePolicy('policy', 'default', 'high', high)), false, 'replaced');
    await p.put(
      'policy',
      parsePolicy('policy', 'default', 'xs', { pattern: '^orders', definition: { 'max-length': 1 }, priority: 9, 'apply-to': 'exchanges' }),
    );
    await p.put('operator', parsePolicy('operator', 'default', 'cap', { pattern: '.', definition: { 'max-length': 5, 'message-ttl': 1000 } }));
    assert.equal(changes, 5, 'every put announced');

    assert.deepEqual(p.describe('orders-eu'), {
      policy: 'high',
      operator_policy: 'cap',
      effective_policy_definition: { 'max-length': 5, 'dead-letter-exchange': 'dlx', overflow: 'reject-publish', 'message-ttl': 1000 },
    });
    assert.equal(p.describe('eu-orders').policy, 'low', 'searched, not anchored; ^orders does not match');
    assert.deepEqual(p.effectiveArguments(queue('orders-eu')), { maxLength: 5, messageTtlMs: 1000, deadLetterExchange: 'dlx', overflow: 'reject-publish' });
    // Arguments: the smaller limit wins (3 < 5; 50 > 5), the queue's own dead-letter exchange and overflow win.
    assert.deepEqual(p.effectiveArguments(queue('orders-us', { maxLength: 3, deadLetterExchange: 'mine', overflow: 'drop-head' })), {
      maxLength: 3,
      messageTtlMs: 1000,
      deadLetterExchange: 'mine',
      overflow: 'drop-head',
    });
    assert.equal(p.effectiveArguments(queue('orders-x', { maxLength: 50 }))?.maxLength, 5);

    // Another instance on the same store (another broker) reads the same; a delete applies everywhere after reload.
    const other = new RabbitPolicies(store, () => undefined, noExchanges);
    await other.reload();
    assert.equal(other.describe('orders-eu').policy, 'high');
    assert.equal(await p.delete('operator', 'default', 'cap'), true);
    assert.equal(await p.delete('operator', 'default', 'cap'), false);
    await other.reload();
    assert.equal(other.describe('orders-eu').operator_policy, null);
    assert.equal(other.effectiveArguments(queue('orders-eu'))?.maxLength, 10);
    assert.deepEqual(
      p.list('policy').map((x) => x.name),
      ['xs', 'high', 'low'],
    );
  });

  it("apply per vhost: a vhost's policy to its own queues only, by the names its clients write, dead-lettering in it", async () => {
    const store = new MemoryControlStore();
    const p = new RabbitPolicies(store, () => undefined, noExchanges);
    await p.put('policy', parsePolicy('policy', 'default', 'root', { pattern: '^orders$', definition: { 'max-length': 10 } }));
    const t1 = { pattern: '^orders$', definition: { 'max-length': 3, 'dead-letter-exchange': '', 'dead-letter-routing-key': 'dead' } };
    assert.equal(await p.put('policy', parsePolicy('policy', 't1', 'root', t1)), true, 'the same name in another vhost is another policy');
    await p.put('operator', parsePolicy('operator', 't2', 'cap', { pattern: '.', definition: { 'message-ttl': 5 } }));
    assert.equal(p.describe('orders').policy, 'root');
    assert.deepEqual(p.effectiveArguments(queue('orders')), { maxLength: 10 });
    // t1's `orders` is `$ns/t1/orders`: `^orders$` matches the name t1's clients write; / 's policy does not apply.
    assert.deepEqual(p.effectiveArguments(queue('$ns/t1/orders')), { maxLength: 3, deadLetterExchange: '', deadLetterRoutingKey: '$ns/t1/dead' });
    assert.deepEqual(p.describe('$ns/t1/orders').effective_policy_definition, t1.definition);
    assert.equal(p.effectiveArguments(queue('$ns/t2/orders'))?.messageTtlMs, 5);
    assert.equal(p.describe('$ns/t2/orders').policy, null);
    assert.equal(p.describe('$ns/t3/orders').operator_policy, null);
    assert.deepEqual(
      p.list('policy').map((x) => `${x.namespace}:${x.name}`),
      ['default:root', 't1:root'],
    );
    assert.deepEqual(
      p.list('policy', 't1').map((x) => x.definition['max-length']),
      [3],
    );
    // Another broker reads them back per vhost; deleting a vhost's policies leaves the others.
    assert.equal(await p.deleteVhost('t1'), 1);
    const other = new RabbitPolicies(store, () => undefined, noExchanges);
    await other.reload();
    assert.equal(other.describe('$ns/t1/orders').policy, null);
    assert.equal(other.describe('orders').policy, 'root');
    assert.equal(other.describe('$ns/t2/q').operator_policy, 'cap');
  });
});
