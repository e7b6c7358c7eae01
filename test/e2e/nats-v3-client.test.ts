/**
 * The modular NATS JavaScript client (v3: @nats-io/transport-node over TCP, @nats-io/jetstream) against a real
 * `flowmq start` process, beside the tests with the `nats` 2.x client: a second, independently written client of
 * the same protocol. Core pub/sub with wildcards, request/reply, headers, a queue group; then JetStream: a stream
 * created through the manager, publishes acknowledged with their sequence and Nats-Msg-Id dedup, a durable pull
 * consumer fetched, acked and nak'ed (redelivered), and consumer info with its ack floor; an ordered push consumer
 * made as a KV watcher makes it (created before its client subscribes) sees every update that follows.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type JsMsg } from '@nats-io/jetstream';
import { FlowmqProcess } from './harness.js';

const text = (d: Uint8Array) => Buffer.from(d).toString();

describe('e2e: NATS with the v3 client (@nats-io/transport-node, @nats-io/jetstream)', () => {
  let broker: FlowmqProcess;
  let nc: NatsConnection;
  before(async () => {
    broker = await FlowmqProcess.start();
    nc = await connect({ servers: broker.natsServer, reconnect: false, timeout: 10_000, name: 'v3-client' });
  });
  after(async () => {
    await nc?.close().catch(() => undefined);
    await broker?.stop();
    broker?.cleanup();
  });

  it('pub/sub with wildcards and headers, request/reply, and a queue group sharing the messages', async () => {
    const got: string[] = [];
    const sub = nc.subscribe('v3.*.>', {
      callback: (_err, m) => {
        got.push(`${m.subject}=${text(m.data)}:${m.headers?.get('k') ?? ''}`);
      },
    });
    const h = natsHeaders();
    h.set('k', 'v');
    nc.publish('v3.a', 'not matched'); // `>` needs one token or more after `v3.*`
    nc.publish('v3.a.b', 'one', { headers: h });
    nc.publish('v3.a.b.c', 'two');
    const svc = nc.subscribe('v3svc.echo', {
      callback: (_e, m) => {
        m.respond(`echo ${text(m.data)}`);
      },
    });
    const reply = await nc.request('v3svc.echo', 'hi', { timeout: 10_000 });
    assert.equal(text(reply.data), 'echo hi');
    // The request was answered after both publishes went out on the same connection: they have been delivered.
    await nc.flush();
    assert.deepEqual(got, ['v3.a.b=one:v', 'v3.a.b.c=two:']);
    sub.unsubscribe();
    svc.unsubscribe();

    const counts = [0, 0, 0];
    const members = counts.map((_, i) => nc.subscribe('v3q.work', { queue: 'workers', callback: () => void counts[i]!++ }));
    const marker = nc.subscribe('v3q.done', { max: 1 });
    for (let i = 0; i < 30; i++) nc.publish('v3q.work', String(i));
    nc.publish('v3q.done', 'end');
    for await (const _m of marker) break;
    assert.equal(
      counts.reduce((a, b) => a + b, 0),
      30,
      'each message reached one member',
    );
    assert.ok(
      counts.every((n) => n > 0),
      `every member got work: ${counts}`,
    );
    for (const m of members) m.unsubscribe();
  });

  it('JetStream: a stream, acknowledged publishes with dedup, a durable pull consumer with ack, nak and redelivery', async () => {
    const jsm = await jetstreamManager(nc);
    const si = await jsm.streams.add({ name: 'V3', subjects: ['v3js.>'] });
    assert.deepEqual(si.config.subjects, ['v3js.>']);
    const js = jetstream(nc);
    const a1 = await js.publish('v3js.a', 'm1', { msgID: 'id-1' });
    const a2 = await js.publish('v3js.b', 'm2');
    const again = await js.publish('v3js.a', 'm1', { msgID: 'id-1' });
    assert.deepEqual([a1.seq, a2.seq, again.seq, again.duplicate], [1, 2, 1, true]);

    await jsm.consumers.add('V3', { durable_name: 'v3c', ack_policy: AckPolicy.Explicit, ack_wait: 30_000_000_000 });
    const c = await js.consumers.get('V3', 'v3c');
    const first: JsMsg[] = [];
    for await (const m of await c.fetch({ max_messages: 2, expires: 5_000 })) first.push(m);
    assert.deepEqual(
      first.map((m) => [m.subject, m.seq, text(m.data)]),
      [
        ['v3js.a', 1, 'm1'],
        ['v3js.b', 2, 'm2'],
      ],
    );
    await first[0]!.ackAck();
    first[1]!.nak();
    const again2: JsMsg[] = [];
    for await (const m of await c.fetch({ max_messages: 1, expires: 5_000 })) again2.push(m);
    assert.deepEqual(
      again2.map((m) => [m.seq, m.redelivered, m.info.deliveryCount]),
      [[2, true, 2]],
    );
    await again2[0]!.ackAck();

    const info = await c.info();
    assert.equal(info.ack_floor.stream_seq, 2);
    assert.equal(info.num_ack_pending, 0);
    assert.equal(info.num_pending, 0);
    await jsm.streams.delete('V3');
  });

  it('an ordered push consumer created before its subscription (a KV watcher) gets every update published after it', async () => {
    // A bucket as a KV makes it: one message per subject (history 1), so an update replaces the one before it. The
    // client creates the consumer (last_per_subject, nothing there yet), then subscribes to its deliver subject, then
    // each update is published and acknowledged in turn. The consumer must deliver an update before the next one
    // replaces it: at once when interest appears, not at the next tick (before: a.b=1 was gone by then, 5 rounds of 5
    // lost one).
    const jsm = await jetstreamManager(nc);
    const js = jetstream(nc);
    for (let round = 0; round < 5; round++) {
      const stream = `V3KV${round}`;
      await jsm.streams.add({ name: stream, subjects: [`v3kv${round}.>`], max_msgs_per_subject: 1 });
      const oc = await js.consumers.getPushConsumer(stream, { filter_subjects: `v3kv${round}.a.>`, deliver_policy: DeliverPolicy.LastPerSubject });
      const got: string[] = [];
      let last: () => void = () => undefined;
      const done = new Promise<void>((r) => (last = r));
      const iter = await oc.consume({
        callback: (m) => {
          got.push(`${m.subject.slice(stream.length + 1)}=${text(m.data)}`);
          if (m.subject.endsWith('.a.x')) last();
        },
      });
      for (const [k, v] of [
        ['a.b', '1'],
        ['b.b', '2'],
        ['a.b', '2'],
        ['a.x', 'end'],
      ])
        await js.publish(`v3kv${round}.${k}`, v);
      await done;
      assert.deepEqual(got, ['a.b=1', 'a.b=2', 'a.x=end'], `round ${round}`);
      await iter.close();
      await jsm.streams.delete(stream);
    }
  });
});
