/**
 * nats.js against FlowMQ: push consumers with `flow_control` get nats-server's flow-control requests (status 100
 * "FlowControl Request" with a reply subject, deliveries paused until answered) and `idle_heartbeat` statuses that
 * name an unanswered request (Nats-Consumer-Stalled), as nats.js push subscriptions expect.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AckPolicy, connect, consumerOpts, createInbox, nanos, type Msg, type NatsConnection } from 'nats';
import { eventually, FlowmqProcess } from './harness.js';

/** 40 messages of 64 KiB: 2.5 MiB, past FlowMQ's 1 MiB flow-control window. */
const COUNT = 40;
const SIZE = 64 * 1024;

describe('e2e: push consumer flow control', () => {
  let broker: FlowmqProcess;
  let nc: NatsConnection;
  before(async () => {
    broker = await FlowmqProcess.start();
    nc = await connect({ servers: broker.natsServer });
    const jsm = await nc.jetstreamManager();
    await jsm.streams.add({ name: 'PF', subjects: ['pf.>'] });
    const js = nc.jetstream();
    for (let i = 0; i < COUNT; i++) await js.publish(`pf.${i}`, new Uint8Array(SIZE).fill(i));
  });
  after(async () => {
    await nc?.close();
    await broker?.stop();
    broker?.cleanup();
  });

  it('pauses deliveries at an unanswered flow-control request, names it in heartbeats, and goes on once answered', async () => {
    const jsm = await nc.jetstreamManager();
    await jsm.consumers.add('PF', {
      durable_name: 'raw',
      deliver_subject: 'raw.in',
      ack_policy: AckPolicy.None,
      flow_control: true,
      idle_heartbeat: nanos(300),
    });
    let data = 0;
    let answer = false;
    const requests: string[] = [];
    const stalled: string[] = [];
    const sub = nc.subscribe('raw.in', {
      callback: (_err, m: Msg) => {
        const h = m.headers;
        if (m.data.length > 0) {
          data++;
          return;
        }
        if (h?.code === 100 && h.description === 'FlowControl Request') {
          assert.ok(m.reply !== undefined && m.reply.startsWith('$JS.FC.PF.raw.'), m.reply);
          requests.push(m.reply);
          if (answer) m.respond();
        } else if (h?.code === 100 && h.description === 'Idle Heartbeat') {
          const s = h.get('Nats-Consumer-Stalled');
          if (s !== '') stalled.push(s);
        }
      },
    });
    // Half the window (8 x 64 KiB) brings a request; the whole window (16) pauses until it is answered, which the
    // next heartbeat says.
    await eventually(() => stalled.length > 0, 5000, 'a heartbeat naming a stalled request');
    assert.equal(requests.length, 1);
    assert.equal(stalled[0], requests[0]);
    assert.equal(data, 16);
    assert.equal((await jsm.consumers.info('PF', 'raw')).delivered.stream_seq, 16);
    answer = true;
    nc.publish(requests[0]);
    await eventually(() => data === COUNT, 5000, `${COUNT} deliveries`);
    assert.ok(requests.length >= 3, String(requests.length));
    sub.unsubscribe();
  });

  it('serves a nats.js push subscription with flow control and heartbeats', async () => {
    const js = nc.jetstream();
    const opts = consumerOpts().deliverTo(createInbox()).ackNone().flowControl().idleHeartbeat(500);
    const sub = await js.subscribe('pf.>', opts);
    let n = 0;
    for await (const m of sub) {
      assert.equal(m.data.length, SIZE);
      assert.equal(m.data[0], n);
      if (++n === COUNT) break;
    }
    // nats.js answered the requests itself.
    const fc = (sub as unknown as { info: { flow_control: { fc_count: number } } | null }).info?.flow_control;
    assert.ok((fc?.fc_count ?? 0) >= 2, JSON.stringify(fc));
  });
});
