/**
 * The JetStream service's authorization (the requester's Access, found by the message's origin): pull requests
 * refused with a 400 status, acks of a consumer the requester may not use ignored, requests of a connection that
 * has gone dropped, stream lists filtered.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Access } from '../../../../src/control/index.js';
import { makeAccess, type TestAccess } from '../helpers.js';
import { json, ns, setup } from './harness.js';

const closers: Array<() => Promise<void>> = [];
after(async () => {
  for (const c of closers) await c();
});

async function env() {
  const e = await setup();
  const a: TestAccess = await makeAccess({ users: [{ username: 'alice', password: 'pw-alice' }] });
  closers.push(async () => {
    await e.js.close();
    await a.close();
  });
  let who: Access | 'gone' | null = null;
  e.js.authorizer = { control: a.access, accessOf: () => who };
  const as = (x: Access | 'gone' | null) => (who = x);
  return { ...e, a, as, alice: () => a.access.accessFor(a.directory.principal('alice'), 'nats') };
}

describe('JetStream API authorization', () => {
  it('a pull request without subscribe on the consumer gets a 400 status; acks on it are ignored', async () => {
    const { c, a, as, alice } = await env();
    await c.api('$JS.API.STREAM.CREATE.A', { name: 'A', subjects: ['a.>'] });
    await c.api('$JS.API.CONSUMER.DURABLE.CREATE.A.k', { stream_name: 'A', config: { durable_name: 'k', ack_policy: 'explicit' } });
    await c.publish('a.1', 'one');
    // Deliver it once (no policies yet), then restrict alice to the stream but not the consumer.
    const [m] = await c.fetch('A', 'k', { batch: 1, expires: ns(5000) }, 1);
    await a.directory.putPolicy({ name: 'p', effect: 'allow', actions: ['subscribe', 'describe'], resources: ['stream:A'], principals: ['user:alice'] });
    as(alice());
    const [st] = await c.fetch('A', 'k', { batch: 1, expires: ns(5000) }, 1);
    assert.equal(st!.status, '400 Permissions Violation for subscribe on group "k" for user "alice"');
    c.ack(m!);
    as(null);
    const info = await c.api('$JS.API.CONSUMER.INFO.A.k');
    assert.equal(info.num_ack_pending, 1, 'the refused ack did not count');
  });

  it('requests of a connection that has gone are dropped; stream lists show what the requester may describe', async () => {
    const { c, a, as, alice, js } = await env();
    await c.api('$JS.API.STREAM.CREATE.A', { name: 'A', subjects: ['a.>'] });
    await c.api('$JS.API.STREAM.CREATE.B', { name: 'B', subjects: ['b.>'] });
    await a.directory.putPolicy({ name: 'p', effect: 'allow', actions: ['describe'], resources: ['stream:B'], principals: ['user:alice'] });
    as(alice());
    assert.deepEqual((await c.api('$JS.API.STREAM.NAMES')).streams, ['B']);
    const denied = await c.api('$JS.API.STREAM.DELETE.B');
    assert.deepEqual(denied.error, { code: 403, err_code: 10003, description: 'Permissions Violation for delete on stream "B" for user "alice"' });
    const before = (js.figures() as { apiRequests: number }).apiRequests;
    as('gone');
    const inbox = c.pull('A', 'x', '');
    c.engine.unsubscribe(inbox.sub);
    assert.equal((js.figures() as { apiRequests: number }).apiRequests, before, 'not even counted');
    as(null);
    assert.equal(json(await c.request('$JS.API.STREAM.INFO.B', '')).config.name, 'B');
  });

  it('a mirror or sources need subscribe on every origin (a deny holds wherever the data goes)', async () => {
    const { c, a, as, alice } = await env();
    await c.api('$JS.API.STREAM.CREATE.SECRET', { name: 'SECRET', subjects: ['secret.>'] });
    await c.api('$JS.API.STREAM.CREATE.OPEN', { name: 'OPEN', subjects: ['open.>'] });
    await a.directory.putPolicy({
      name: 'p',
      effect: 'allow',
      actions: ['create', 'alter', 'describe', 'subscribe'],
      resources: ['stream:M', 'stream:S', 'stream:OPEN', 'topic:s/#'],
      principals: ['user:alice'],
    });
    as(alice());
    const mirror = await c.api('$JS.API.STREAM.CREATE.M', { name: 'M', mirror: { name: 'SECRET' } });
    assert.deepEqual(mirror.error, { code: 403, err_code: 10003, description: 'Permissions Violation for subscribe on stream "SECRET" for user "alice"' });
    const sources = await c.api('$JS.API.STREAM.CREATE.S', { name: 'S', subjects: ['s.x'], sources: [{ name: 'OPEN' }, { name: 'SECRET' }] });
    assert.equal(sources.error.code, 403);
    assert.equal((await c.api('$JS.API.STREAM.CREATE.S', { name: 'S', subjects: ['s.x'], sources: [{ name: 'OPEN' }] })).config.name, 'S');
    const widened = await c.api('$JS.API.STREAM.UPDATE.S', { name: 'S', subjects: ['s.x'], sources: [{ name: 'OPEN' }, { name: 'SECRET' }] });
    assert.equal(widened.error.code, 403);
    assert.equal((await c.api('$JS.API.STREAM.CREATE.M', { name: 'M', mirror: { name: 'OPEN' } })).config.mirror.name, 'OPEN');
  });
});
