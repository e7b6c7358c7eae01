/**
 * NATS and the control plane against a real `flowmq start` process, with the `nats` npm client: users, policies and
 * namespaces made through the admin API; a wrong password refused, an unauthorized publish and subscribe refused
 * with nats-server's Permissions Violation (the client's PERMISSIONS_VIOLATION), a policy changed live taking
 * effect on an open connection, an API token as auth_token, the namespace connection quota, a kick, and the
 * JetStream API refusing what the policies do not allow.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, StringCodec, type NatsConnection, type NatsError, type Status, type Subscription } from 'nats';
import { FlowmqProcess } from './harness.js';

const sc = StringCodec();

/** Waits until `cond` holds (a safety net of 10 s, not a timing assertion). */
async function until(cond: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The status events of a connection, collected as they come. */
function statuses(nc: NatsConnection): Status[] {
  const out: Status[] = [];
  void (async () => {
    for await (const s of nc.status()) out.push(s);
  })();
  return out;
}

/** Messages of a subscription, collected as `subject=payload`; `error` is what ended it, if anything. */
function collect(sub: Subscription): { got: string[]; error: Error | null; done: Promise<void> } {
  const r = { got: [] as string[], error: null as Error | null, done: Promise.resolve() };
  r.done = (async () => {
    try {
      for await (const m of sub) r.got.push(`${m.subject}=${sc.decode(m.data)}`);
    } catch (err) {
      r.error = err as Error;
    }
  })();
  return r;
}

describe('NATS authentication and authorization with the nats client', () => {
  let broker: FlowmqProcess;
  const conns: NatsConnection[] = [];
  const open = async (opts: Record<string, unknown>) => {
    const nc = await connect({ servers: broker.natsServer, reconnect: false, ...opts });
    conns.push(nc);
    return nc;
  };

  before(async () => {
    // dave, the no_auth_user, is made by its test: until then clients without credentials are refused.
    broker = await FlowmqProcess.start({ args: ['--allow-anonymous', 'false', '--nats-no-auth-user', 'dave'] });
    // Nobody exists yet: the admin API lets loopback in to create the first (admin) user.
    await broker.api('POST', '/api/v1/users', { username: 'admin', password: 'admin-pw', groups: ['admins'] });
    broker.credentials = { username: 'admin', password: 'admin-pw' };
    await broker.api('POST', '/api/v1/namespaces', { name: 'team', quotas: { maxConnections: 1 } });
    await broker.api('POST', '/api/v1/users', { username: 'alice', password: 'alice-pw' });
    await broker.api('POST', '/api/v1/users', { username: 'bob', password: 'bob-pw', namespace: 'team' });
    await broker.api('POST', '/api/v1/policies', {
      name: 'alice-orders',
      effect: 'allow',
      actions: ['publish', 'subscribe'],
      resources: ['topic:orders/#', 'topic:_INBOX/#'],
      principals: ['user:alice'],
    });
  });

  after(async () => {
    await Promise.allSettled(conns.map((c) => c.close()));
    await broker.stop();
    broker.cleanup();
  });

  it('a wrong password and a missing one are refused with AUTHORIZATION_VIOLATION', async () => {
    await assert.rejects(
      connect({ servers: broker.natsServer, user: 'alice', pass: 'wrong', reconnect: false }),
      (err: NatsError) => err.code === 'AUTHORIZATION_VIOLATION',
    );
    await assert.rejects(connect({ servers: broker.natsServer, reconnect: false }), (err: NatsError) => err.code === 'AUTHORIZATION_VIOLATION');
  });

  it('an unauthorized publish and subscribe get PERMISSIONS_VIOLATION; the connection stays and allowed traffic flows', async () => {
    const nc = await open({ user: 'alice', pass: 'alice-pw' });
    const st = statuses(nc);
    const denied = collect(nc.subscribe('payments.>'));
    const allowed = collect(nc.subscribe('orders.>'));
    nc.publish('payments.x', sc.encode('no'));
    nc.publish('orders.a', sc.encode('yes'));
    await nc.flush();
    await denied.done;
    assert.equal((denied.error as NatsError | null)?.code, 'PERMISSIONS_VIOLATION');
    assert.match(denied.error!.message, /Permissions Violation for Subscription to "payments\.>"/);
    await until(
      () =>
        st.some((s) => s.data === 'PERMISSIONS_VIOLATION' && (s as { permissionContext?: { operation: string } }).permissionContext?.operation === 'publish'),
      'publish violation status',
    );
    const pubErr = st.find((s) => (s as { permissionContext?: { operation: string } }).permissionContext?.operation === 'publish') as {
      permissionContext: { subject: string };
    };
    assert.equal(pubErr.permissionContext.subject, 'payments.x');
    await until(() => allowed.got.length === 1, 'the allowed message');
    assert.deepEqual(allowed.got, ['orders.a=yes']);
    assert.equal(nc.isClosed(), false);
  });

  it('queue-group permissions (nats-server\'s "subject queue" entries) allow a subject in that queue group only', async () => {
    await broker.api('POST', '/api/v1/users', { username: 'carol', password: 'carol-pw' });
    const policy = (name: string, effect: string, actions: string[], resources: string[]) =>
      broker.api('POST', '/api/v1/policies', { name, effect, actions, resources, principals: ['user:carol'] });
    // "q A" allowed; r.> allowed but "r.x B" denied; publish anywhere.
    await policy('carol-sub', 'allow', ['subscribe'], ['topic:$nats-queue/A/q', 'topic:r/#', 'topic:marker']);
    await policy('carol-deny', 'deny', ['subscribe'], ['topic:$nats-queue/B/r/x']);
    await policy('carol-pub', 'allow', ['publish'], ['topic:#']);
    const nc = await open({ user: 'carol', pass: 'carol-pw' });
    const inA = collect(nc.subscribe('q', { queue: 'A' }));
    const inBad = collect(nc.subscribe('q', { queue: 'bad' }));
    const plain = collect(nc.subscribe('q'));
    const rB = collect(nc.subscribe('r.x', { queue: 'B' }));
    const rC = collect(nc.subscribe('r.x', { queue: 'C' }));
    const marker = collect(nc.subscribe('marker'));
    await nc.flush();
    nc.publish('q', sc.encode('1'));
    nc.publish('r.x', sc.encode('2'));
    nc.publish('marker', sc.encode('m'));
    await until(() => marker.got.length === 1, 'the marker');
    await Promise.all([inBad.done, plain.done, rB.done]);
    assert.match(inBad.error!.message, /Permissions Violation for Subscription to "q" using queue "bad"/);
    assert.match(plain.error!.message, /Permissions Violation for Subscription to "q"'?$/);
    assert.match(rB.error!.message, /Permissions Violation for Subscription to "r\.x" using queue "B"/);
    assert.deepEqual([inA.got, rC.got, inA.error, rC.error], [['q=1'], ['r.x=2'], null, null]);
    assert.equal(nc.isClosed(), false);
  });

  it("a client without credentials is the no_auth_user (--nats-no-auth-user), with that user's permissions", async () => {
    await broker.api('POST', '/api/v1/users', { username: 'dave', password: 'dave-pw' });
    await broker.api('POST', '/api/v1/policies', {
      name: 'dave-pub-sub',
      effect: 'allow',
      actions: ['publish', 'subscribe'],
      resources: ['topic:dave/#'],
      principals: ['user:dave'],
    });
    const nc = await open({});
    const st = statuses(nc);
    const mine = collect(nc.subscribe('dave.>'));
    const other = collect(nc.subscribe('orders.>'));
    nc.publish('orders.x', sc.encode('no'));
    nc.publish('dave.a', sc.encode('yes'));
    await until(() => mine.got.length === 1, "dave's message");
    await other.done;
    assert.match(other.error!.message, /Permissions Violation for Subscription to "orders\.>"/);
    await until(() => st.some((s) => (s as { permissionContext?: { subject: string } }).permissionContext?.subject === 'orders.x'), 'the refused publish');
    assert.deepEqual(mine.got, ['dave.a=yes']);
    // Credentials still decide when given: a wrong password is refused, alice is alice.
    await assert.rejects(
      connect({ servers: broker.natsServer, user: 'dave', pass: 'wrong', reconnect: false }),
      (err: NatsError) => err.code === 'AUTHORIZATION_VIOLATION',
    );
    const alice = await open({ user: 'alice', pass: 'alice-pw' });
    const aliceSub = collect(alice.subscribe('dave.>'));
    await alice.flush();
    await aliceSub.done;
    assert.match(aliceSub.error!.message, /Permissions Violation for Subscription to "dave\.>"/);
  });

  it('a policy changed live through the admin API applies to an open connection', async () => {
    const nc = await open({ user: 'alice', pass: 'alice-pw' });
    const st = statuses(nc);
    const sub = collect(nc.subscribe('orders.live.*'));
    nc.publish('orders.live.1', sc.encode('before'));
    await until(() => sub.got.length === 1, 'the first message');
    await broker.api('POST', '/api/v1/policies', {
      name: 'alice-no-live',
      effect: 'deny',
      actions: ['publish', 'subscribe'],
      resources: ['topic:orders/live/#'],
      principals: ['user:alice'],
    });
    nc.publish('orders.live.2', sc.encode('after'));
    // A marker on a still allowed topic, on the same connection: once it is back, the refused publish was handled.
    const marker = collect(nc.subscribe('orders.marker'));
    await nc.flush();
    nc.publish('orders.marker', sc.encode('m'));
    await until(() => marker.got.length === 1, 'the marker');
    await until(() => st.some((s) => (s as { permissionContext?: { subject: string } }).permissionContext?.subject === 'orders.live.2'), 'the refused publish');
    // The admin's publish on the now denied topic is not delivered to alice's open subscription either.
    const admin = await open({ user: 'admin', pass: 'admin-pw' });
    admin.publish('orders.live.3', sc.encode('admin'));
    admin.publish('orders.marker', sc.encode('m2'));
    await admin.flush();
    await until(() => marker.got.length === 2, 'the second marker');
    assert.deepEqual(sub.got, ['orders.live.1=before']);
    await broker.api('DELETE', '/api/v1/policies/alice-no-live');
  });

  it('an API token logs in as its user (auth_token)', async () => {
    const t = await broker.api<{ token: string }>('POST', '/api/v1/tokens', { user: 'alice' });
    const nc = await open({ token: t.token, name: 'token-client' });
    const clients = await broker.api<{ items: Array<{ user: string; clientId: string; protocol: string }> }>('GET', '/api/v1/clients?protocol=nats');
    assert.ok(clients.items.some((c) => c.user === 'alice' && c.clientId === 'token-client'));
    await nc.close();
  });

  it('the namespace connection quota refuses the next connection; a kick closes a client', async () => {
    const first = await open({ user: 'bob', pass: 'bob-pw', name: 'bob-1' });
    await assert.rejects(connect({ servers: broker.natsServer, user: 'bob', pass: 'bob-pw', reconnect: false }), /maximum account active connections exceeded/);
    const clients = await broker.api<{ items: Array<{ id: string; clientId: string }> }>('GET', '/api/v1/clients?protocol=nats');
    const bob = clients.items.find((c) => c.clientId === 'bob-1');
    assert.ok(bob);
    const closed = first.closed();
    await broker.api('DELETE', `/api/v1/clients/${encodeURIComponent(bob.id)}`);
    await closed;
    assert.equal(first.isClosed(), true);
    // Its lease went with it: bob may connect again.
    const again = await open({ user: 'bob', pass: 'bob-pw' });
    assert.equal(again.isClosed(), false);
    await again.close();
  });

  it('the JetStream API: refused with a 403 API error until a policy allows it, then stream and durable consumer work', async () => {
    const nc = await open({ user: 'alice', pass: 'alice-pw' });
    const jsm = await nc.jetstreamManager();
    await assert.rejects(jsm.streams.add({ name: 'ORDERS', subjects: ['orders.js.>'] }), (err: Error & { api_error?: { code: number } }) => {
      assert.match(err.message, /permissions violation for create on stream "orders"/i);
      return true;
    });
    await broker.api('POST', '/api/v1/policies', {
      name: 'alice-js',
      effect: 'allow',
      actions: ['create', 'describe', 'subscribe'],
      resources: ['stream:ORDERS', 'group:worker'],
      principals: ['user:alice'],
    });
    await jsm.streams.add({ name: 'ORDERS', subjects: ['orders.js.>'] });
    const js = nc.jetstream();
    await js.publish('orders.js.1', sc.encode('one'));
    await jsm.consumers.add('ORDERS', { durable_name: 'worker', ack_policy: 'explicit' as never });
    await assert.rejects(
      jsm.consumers.add('ORDERS', { durable_name: 'other', ack_policy: 'explicit' as never }),
      /permissions violation for subscribe on group "other"/i,
    );
    const c = await js.consumers.get('ORDERS', 'worker');
    const m = await c.next({ expires: 5000 });
    assert.equal(m === null ? null : sc.decode(m.data), 'one');
    m?.ack();
    // The durable consumer is a consumer group of the admin API.
    const groups = await broker.api<{ items: Array<{ name: string; protocol: string }> }>('GET', '/api/v1/consumer-groups');
    assert.ok(groups.items.some((g) => g.name === 'worker' && g.protocol === 'jetstream'));
    // Stream listing shows only what alice may describe.
    await broker.api('POST', '/api/v1/streams', { name: 'hidden', bindings: ['hidden/#'] });
    const names: string[] = [];
    for await (const n of jsm.streams.names()) names.push(n);
    assert.deepEqual(names, ['ORDERS']);
    await assert.rejects(jsm.streams.delete('ORDERS'), /permissions violation for delete on stream "orders"/i);
  });
});
