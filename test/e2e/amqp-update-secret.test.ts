/**
 * connection.update-secret (RabbitMQ's extension, amqplib's `connection.updateSecret`) against bin/flowmq with users:
 * a new secret is checked as a login for the connection's user; accepted, the connection goes on working; refused,
 * that connection (only) is closed with 530 NOT_ALLOWED as RabbitMQ closes it; before connection.open it is 503 and
 * checks nothing.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import amqp, { type ChannelModel } from 'amqplib';
import { RawAmqp, amqpUrl, startAmqpBroker, take } from './amqp-helpers.js';
import type { FlowmqProcess } from './harness.js';

/** A connection whose 'error' (connection.close from the broker) and 'close' are kept. */
async function open(broker: FlowmqProcess, user: string, pass: string) {
  const c = await amqp.connect(amqpUrl(broker, user, pass));
  const failed = new Promise<Error>((resolve) => c.on('error', resolve));
  const closed = new Promise<void>((resolve) => c.on('close', () => resolve()));
  return { c, failed, closed };
}

/** A round trip on `c`: a message published to its own queue comes back. */
async function roundTrip(c: ChannelModel, queue: string, body: string): Promise<void> {
  const ch = await c.createChannel();
  await ch.assertQueue(queue, { exclusive: true });
  ch.sendToQueue(queue, Buffer.from(body));
  const [m] = await take(ch, queue, 1);
  assert.equal(m!.content.toString(), body);
  await ch.close();
}

function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`timed out: ${what}`)), ms).unref())]);
}

describe('AMQP connection.update-secret (amqplib, bin/flowmq with users)', { timeout: 60_000 }, () => {
  let broker: FlowmqProcess;

  before(async () => {
    broker = await startAmqpBroker(['--allow-anonymous', 'false']);
    await broker.api('POST', '/api/v1/users', { username: 'admin', password: 'admin-pw', groups: ['admins'] });
    broker.credentials = { username: 'admin', password: 'admin-pw' };
    await broker.api('POST', '/api/v1/users', { username: 'alice', password: 'token-1' });
    await broker.api('POST', '/api/v1/users', { username: 'bob', password: 'bob-pw' });
  });

  after(async () => {
    await broker?.stop();
    broker?.cleanup();
  });

  it('accepts the current secret: update-secret-ok, and the connection keeps working', async () => {
    const a = await open(broker, 'alice', 'token-1');
    try {
      await roundTrip(a.c, 'us-before', 'one');
      // The credential rotates (as an OAuth token would): the connection hands the new one.
      await broker.api('PATCH', '/api/v1/users/alice', { password: 'token-2' });
      await within(a.c.updateSecret(Buffer.from('token-2'), 'token refreshed'), 10_000, 'update-secret-ok');
      await roundTrip(a.c, 'us-after', 'two');
      // The same secret again is still fine.
      await within(a.c.updateSecret(Buffer.from('token-2'), 'again'), 10_000, 'second update-secret-ok');
      await roundTrip(a.c, 'us-after2', 'three');
    } finally {
      await a.c.close().catch(() => undefined);
    }
  });

  it('closes a connection handing a wrong secret with 530 NOT_ALLOWED; other connections are not affected', async () => {
    const a = await open(broker, 'alice', 'token-2');
    const other = await open(broker, 'alice', 'token-2');
    const b = await open(broker, 'bob', 'bob-pw');
    try {
      // The previous secret is no longer valid (rotated in the test before).
      void a.c.updateSecret(Buffer.from('token-1'), 'stale token').catch(() => undefined);
      const err = await within(a.failed, 10_000, 'connection.close 530');
      assert.match(err.message, /530/);
      assert.match(err.message, /NOT_ALLOWED - New secret was refused by one of the backends/);
      await within(a.closed, 10_000, 'close');
      // Another user's password is no secret of alice's either.
      const a2 = await open(broker, 'alice', 'token-2');
      void a2.c.updateSecret(Buffer.from('bob-pw'), 'not mine').catch(() => undefined);
      assert.match((await within(a2.failed, 10_000, 'connection.close 530')).message, /530/);
      // The others are unaffected.
      await roundTrip(other.c, 'us-other', 'still here');
      await roundTrip(b.c, 'us-bob', 'bob too');
    } finally {
      await other.c.close().catch(() => undefined);
      await b.c.close().catch(() => undefined);
    }
  });

  it('refuses update-secret before the connection is open (503), without checking it', async () => {
    const raw = await RawAmqp.open(broker.ports.amqp!);
    try {
      raw.write(Buffer.from('AMQP\x00\x00\x09\x01', 'latin1'));
      const start = await raw.method();
      assert.equal(start?.method, 'ConnectionStart');
      // A stranger's update-secret, with a valid password even: no login happens through it.
      raw.send('ConnectionUpdateSecret', 0, { newSecret: Buffer.from('token-2'), reason: 'let me in' });
      const close = await raw.method();
      assert.equal(close?.method, 'ConnectionClose');
      assert.equal(close!.fields.replyCode, 503);
      assert.match(String(close!.fields.replyText), /^COMMAND_INVALID - connection.update-secret before connection.open/);
      assert.equal(close!.fields.classId, 10);
      assert.equal(close!.fields.methodId, 70);
      raw.send('ConnectionCloseOk', 0, {});
      assert.equal(await raw.method(), null, 'the socket is closed');
    } finally {
      raw.close();
    }
  });
});
