/**
 * A PONG after the publishes before it, side by side with Debian's nats-server 2.9.10: a connection publishes into
 * a stream with core PUBs (no PubAck), `flush()`es (PING/PONG), and another connection reads the stream's
 * `state.messages` and a consumer's `num_pending` at once (nats.js's `jsm - cross account streams` does that). nats-server
 * handles a connection's operations in order; FlowMQ's PONG waits for that connection's writes into streams
 * (write-barrier.ts), which count only once durable. Several rounds, growing, so a PONG answered before the write group
 * commits shows. Then FlowMQ alone: a JetStream API request on the publishing connection itself, without a flush, sees
 * its earlier PUBs too, and a connection publishing to no stream gets its PONG without waiting.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, StringCodec, AckPolicy, type NatsConnection } from 'nats';
import { sideBySide, step, type Entry } from './nats-side-by-side.js';

const sc = StringCodec();
const ROUNDS = 8;

async function scenario(server: string): Promise<Entry[]> {
  const reader = await connect({ servers: server });
  const writer = await connect({ servers: server });
  const out: Entry[] = [];
  const log = (label: string, v: unknown): void => void out.push([label, v]);
  try {
    const jsm = await reader.jetstreamManager();
    await jsm.streams.add({ name: 'FLUSHED', subjects: ['flushed.>'] });
    await jsm.consumers.add('FLUSHED', { durable_name: 'c', ack_policy: AckPolicy.Explicit });
    let sent = 0;
    for (let round = 1; round <= ROUNDS; round++) {
      // 1, 2, 4 ... 128 messages, then flush: all of them are in the state the other connection reads next.
      for (let i = 0; i < 1 << (round - 1); i++) writer.publish(`flushed.${round}`, sc.encode(`m${++sent}`));
      await writer.flush();
      const si = await jsm.streams.info('FLUSHED');
      const ci = await jsm.consumers.info('FLUSHED', 'c');
      log(`round ${round}`, { messages: si.state.messages, last_seq: si.state.last_seq, num_pending: ci.num_pending });
    }
    log('sent', sent);
  } finally {
    await writer.close();
    await reader.close();
  }
  return out;
}

describe('NATS flush after core PUBs into a stream, beside nats-server 2.9.10', () => {
  const t = sideBySide('nats-flush-side-', scenario);

  it('the state read after a flush counts every PUB before it, as on nats-server', () => {
    assert.deepEqual(t.ours, t.theirs);
    let total = 0;
    for (let round = 1; round <= ROUNDS; round++) {
      total += 1 << (round - 1);
      assert.deepEqual(step(t.ours, `round ${round}`), { messages: total, last_seq: total, num_pending: total });
    }
    assert.equal(step(t.ours, 'sent'), 255);
  });

  it('FlowMQ: a JetStream API request after PUBs on the same connection counts them; a PONG without stream writes is not held', async () => {
    const nc: NatsConnection = await connect({ servers: t.broker.natsServer });
    try {
      const jsm = await nc.jetstreamManager();
      await jsm.streams.add({ name: 'SAME', subjects: ['same.>'] });
      for (let round = 1; round <= 5; round++) {
        for (let i = 0; i < 50; i++) nc.publish('same.x', sc.encode(String(i)));
        // No flush: the STREAM.INFO request follows the PUBs on the wire.
        const si = await jsm.streams.info('SAME');
        assert.equal(si.state.messages, 50 * round, `round ${round}`);
      }
      // Core PUBs to a subject no stream captures: nothing to wait for.
      for (let i = 0; i < 1000; i++) nc.publish('nostream.x', sc.encode(String(i)));
      const rtt = await nc.rtt();
      assert.ok(rtt < 1000, `rtt ${rtt} ms`);
    } finally {
      await nc.close();
    }
  });
});
