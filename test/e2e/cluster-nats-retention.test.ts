// test-runner: apart (scripts/test.mjs): a 3-broker cluster whose leases and heartbeats must not starve for CPU beside another cluster or a second other file
/**
 * JetStream workqueue and interest retention, a mirror and a source across three `bin/flowmq --cluster` processes
 * (PostgreSQL, s3rver; test/helpers/cluster.ts), driven by the `nats` npm client. Every target stream is placed on
 * broker 1 (names picked by the placement function), which is then killed with kill -9 mid-run: its successor
 * decides retention from the stored acks (nothing unacked lost, nothing acked back) and copies on from where the
 * mirror's and the source's logs stopped (no gap, no duplicate); a graceful stop of that successor then moves it all
 * to the last broker.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AckPolicy, connect, nanos, RetentionPolicy, StringCodec, type JetStreamManager, type JsMsg, type NatsConnection } from 'nats';
import { rendezvous } from '../../src/cluster/index.js';
import { startCluster, type TestCluster } from '../helpers/cluster.js';
import { sleep } from './harness.js';

const sc = StringCodec();
const VICTIM = 1;

async function until<T>(what: string, fn: () => Promise<T | false> | T | false, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== false) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > end) throw new Error(`timed out: ${what}${last !== undefined ? ` (last error: ${String(last)})` : ''}`);
    await sleep(100);
  }
}

/** A stream name `prefix<n>` whose partition placement picks `broker` among 1..3. */
function placedOn(prefix: string, broker: number): string {
  for (let i = 1; ; i++) if (rendezvous('partition', `${prefix}${i}/0`, [1, 2, 3]) === broker) return `${prefix}${i}`;
}

describe('e2e cluster: JetStream retention, mirrors and sources across three brokers', { timeout: 120_000 }, () => {
  let c: TestCluster;
  const conns = new Map<number, NatsConnection>();
  const nats = async (id: number): Promise<NatsConnection> => {
    let nc = conns.get(id);
    if (nc === undefined || nc.isClosed()) {
      nc = await connect({ servers: c.broker(id).natsServer, reconnect: false });
      conns.set(id, nc);
    }
    return nc;
  };
  const jsm = async (id: number): Promise<JetStreamManager> => (await nats(id)).jetstreamManager();
  const fetch = async (id: number, stream: string, consumer: string, n: number, expires = 3000): Promise<JsMsg[]> => {
    const cons = await (await nats(id)).jetstream().consumers.get(stream, consumer);
    const out: JsMsg[] = [];
    for await (const m of await cons.fetch({ max_messages: n, expires })) {
      out.push(m);
      if (out.length >= n) break;
    }
    return out;
  };
  before(async () => {
    c = await startCluster({ brokers: 3, leaseMs: 1500, haproxy: false });
  });
  after(async () => {
    for (const nc of conns.values()) await nc.close().catch(() => undefined);
    await c?.close();
  });

  it('workqueue and interest decided by the partition owner, a mirror and a source copied by it; all survive its kill -9', async () => {
    const WQ = placedOn('WQ', VICTIM);
    const INT = placedOn('INT', VICTIM);
    const MIR = placedOn('MIR', VICTIM);
    const SRC = placedOn('SRC', VICTIM);
    const ORIG = placedOn('ORIG', 2);
    const j1 = await jsm(1);
    await j1.streams.add({ name: WQ, subjects: ['wq.>'], retention: RetentionPolicy.Workqueue });
    await j1.streams.add({ name: INT, subjects: ['int.>'], retention: RetentionPolicy.Interest });
    await j1.streams.add({ name: ORIG, subjects: ['orig.>'] });
    await j1.streams.add({ name: MIR, mirror: { name: ORIG } });
    await j1.streams.add({ name: SRC, subjects: ['src.>'], sources: [{ name: ORIG, filter_subject: 'orig.>' }] });
    await c.waitSettled({ min: { partition: 5 } });
    await c.waitCatalog({ streams: [WQ, INT, ORIG, MIR, SRC] });
    for (const s of [WQ, INT, MIR, SRC]) assert.equal(await c.ownerOf('partition', `${s}/0`), VICTIM, `${s} on broker ${VICTIM}`);

    // ------------------------------------------------ workqueue: publish via 1, consume and ack via 2, info via 3
    await (await jsm(2)).consumers.add(WQ, { durable_name: 'w', filter_subject: 'wq.a.>', ack_policy: AckPolicy.Explicit, ack_wait: nanos(60_000) });
    assert.equal(await c.ownerOf('consumer', `${WQ}/w`), VICTIM, 'the consumer is placed with the partition');
    // An overlapping consumer through another broker is refused as nats-server refuses it.
    await assert.rejects(
      (await jsm(3)).consumers.add(WQ, { durable_name: 'w2', filter_subject: 'wq.>', ack_policy: AckPolicy.Explicit }),
      (err: Error & { api_error?: { err_code: number } }) => {
        assert.match(err.message, /filtered consumer not unique on workqueue stream/);
        return true;
      },
    );
    const js1 = (await nats(1)).jetstream();
    for (let i = 1; i <= 10; i++) assert.equal((await js1.publish(`wq.a.${i}`, sc.encode(`w${i}`))).seq, i);
    const first = await fetch(2, WQ, 'w', 4);
    assert.deepEqual(
      first.map((m) => sc.decode(m.data)),
      ['w1', 'w2', 'w3', 'w4'],
    );
    for (const m of first) await m.ackAck();
    await until('the acked messages are gone from stream info via broker 3', async () => {
      const s = (await (await jsm(3)).streams.info(WQ)).state;
      return s.messages === 6 && s.first_seq === 5 && s;
    });

    // ------------------------------------------------ interest: two consumers, one behind
    await (await jsm(2)).consumers.add(INT, { durable_name: 'i1', ack_policy: AckPolicy.Explicit, ack_wait: nanos(60_000) });
    await (await jsm(3)).consumers.add(INT, { durable_name: 'i2', ack_policy: AckPolicy.Explicit, ack_wait: nanos(60_000) });
    // Published through the owner and the others: a broker that publishes to a stream holds a view of it, which
    // must not remove by retention what its consumers (on the owner) still need.
    for (let i = 1; i <= 4; i++) await (await nats([1, 3, 2, 3][i - 1])).jetstream().publish(`int.${i}`, sc.encode(`n${i}`));
    // A purge through a non-owner (of nothing) makes that broker read the stream: it must not remove, nor trim from
    // the log, what the consumers it does not serve still need.
    assert.equal((await (await jsm(3)).streams.purge(INT, { filter: 'int.none' })).purged, 0);
    for (const m of await fetch(2, INT, 'i1', 4)) await m.ackAck();
    for (const m of await fetch(3, INT, 'i2', 2)) await m.ackAck();
    await until('what both consumers acked is gone (info via broker 3)', async () => {
      const s = (await (await jsm(3)).streams.info(INT)).state;
      return s.messages === 2 && s.first_seq === 3 && s;
    });

    // ------------------------------------------------ mirror and source of ORIG, copied by broker 1
    const js2 = (await nats(2)).jetstream();
    for (let i = 1; i <= 5; i++) await js2.publish(`orig.${i}`, sc.encode(`o${i}`));
    await until('the mirror and the source caught up (info via broker 2 and 3)', async () => {
      const m = await (await jsm(2)).streams.info(MIR);
      const s = await (await jsm(3)).streams.info(SRC);
      return m.state.messages === 5 && m.mirror?.lag === 0 && m.mirror.active >= 0 && s.state.messages === 5 && s.sources?.[0]?.lag === 0 && [m, s];
    });

    // ------------------------------------------------ kill -9 of broker 1 mid-run
    // Two more workqueue messages delivered, not acked; publishes to the origin racing the kill.
    const pending = await fetch(2, WQ, 'w', 2);
    assert.deepEqual(
      pending.map((m) => sc.decode(m.data)),
      ['w5', 'w6'],
    );
    const racing = (async () => {
      for (let i = 6; i <= 8; i++) await js2.publish(`orig.${i}`, sc.encode(`o${i}`));
    })();
    const nc1 = conns.get(VICTIM);
    conns.delete(VICTIM);
    await c.kill(VICTIM);
    await nc1?.close().catch(() => undefined);
    await racing;
    for (let i = 9; i <= 10; i++) await js2.publish(`orig.${i}`, sc.encode(`o${i}`));

    // Workqueue: the successor serves w5..w10 again (w5, w6 redelivered), never w1..w4; a publish after the kill too.
    const js3 = (await nats(3)).jetstream();
    // With a Nats-Msg-Id: a try that timed out during the failover but was stored is a duplicate when retried.
    await until('the workqueue stream takes publishes again', async () => (await js3.publish('wq.a.11', sc.encode('w11'), { msgID: 'w11' })).seq === 11);
    const again: JsMsg[] = [];
    await until(
      'the workqueue consumer serves again',
      async () => {
        again.push(...(await fetch(2, WQ, 'w', 7 - again.length, 2000)));
        return again.length >= 7;
      },
      30_000,
    );
    assert.deepEqual(
      again.map((m) => sc.decode(m.data)),
      ['w5', 'w6', 'w7', 'w8', 'w9', 'w10', 'w11'],
      'every unacked message once, nothing acked before the kill',
    );
    const survivor = await c.ownerOf('partition', `${WQ}/0`, 2);
    assert.ok(survivor !== null && survivor !== VICTIM);
    assert.equal(await c.ownerOf('consumer', `${WQ}/w`, 2), survivor, 'the consumer moved with the partition');
    await assert.rejects((await jsm(3)).consumers.add(WQ, { durable_name: 'w2', filter_subject: 'wq.a.1', ack_policy: AckPolicy.Explicit }), /not unique/);
    for (const m of again) await m.ackAck();
    await until('the workqueue stream is empty (info via broker 3)', async () => {
      const s = (await (await jsm(3)).streams.info(WQ)).state;
      return s.messages === 0 && s.last_seq === 11 && s;
    });

    // Interest: n3 and n4 wait for i2 only; once it acks them they go.
    await until('n1 and n2 stay gone, n3 and n4 stay', async () => {
      const st = (await (await jsm(2)).streams.info(INT)).state;
      return st.messages === 2 && st.first_seq === 3 && st;
    });
    const rest = await until('i2 serves again', async () => {
      const got = await fetch(3, INT, 'i2', 2, 2000);
      return got.length === 2 && got;
    });
    assert.deepEqual(
      rest.map((m) => sc.decode(m.data)),
      ['n3', 'n4'],
    );
    for (const m of rest) await m.ackAck();
    await until('the interest stream is empty', async () => (await (await jsm(2)).streams.info(INT)).state.messages === 0);

    // Mirror and source: copied on by the successor, every origin message once, in order.
    await until('the mirror and the source caught up again', async () => {
      const m = await (await jsm(3)).streams.info(MIR);
      const s = await (await jsm(2)).streams.info(SRC);
      return m.state.messages === 10 && m.mirror?.lag === 0 && s.state.messages === 10 && s.sources?.[0]?.lag === 0 && [m, s];
    });
    const j2 = await jsm(2);
    const mirrored: string[] = [];
    const sourced: string[] = [];
    for (let seq = 1; seq <= 10; seq++) {
      const m = await j2.streams.getMessage(MIR, { seq });
      mirrored.push(`${m.subject}=${sc.decode(m.data)}`);
      const s = await j2.streams.getMessage(SRC, { seq });
      sourced.push(`${sc.decode(s.data)}@${s.header?.get('Nats-Stream-Source') ?? ''}`);
    }
    const want = Array.from({ length: 10 }, (_, i) => i + 1);
    assert.deepEqual(
      mirrored,
      want.map((i) => `orig.${i}=o${i}`),
    );
    assert.deepEqual(
      sourced,
      want.map((i) => `o${i}@${ORIG} ${i}`),
    );
    const si = await (await jsm(3)).streams.info(SRC);
    assert.equal(si.state.last_seq, 10, 'no duplicate copy');

    // ------------------------------------------------ a graceful stop of the successor: everything moves to the last broker
    const last = [2, 3].find((id) => id !== survivor)!;
    const ncs = conns.get(survivor);
    conns.delete(survivor);
    await ncs?.close().catch(() => undefined);
    await c.stop(survivor);
    const jsl = (await nats(last)).jetstream();
    assert.equal((await jsl.publish('wq.a.12', sc.encode('w12'))).seq, 12);
    await jsl.publish('orig.11', sc.encode('o11'));
    const w12 = await until('the workqueue consumer on the last broker', async () => {
      const got = await fetch(last, WQ, 'w', 1, 2000);
      return got.length === 1 && got;
    });
    assert.equal(sc.decode(w12[0].data), 'w12', 'nothing acked before comes back');
    await w12[0].ackAck();
    await until('everything decided and copied by the last broker', async () => {
      const j = await jsm(last);
      const [w, m, so] = [await j.streams.info(WQ), await j.streams.info(MIR), await j.streams.info(SRC)];
      return w.state.messages === 0 && m.state.last_seq === 11 && m.state.messages === 11 && so.state.last_seq === 11 && [w, m, so];
    });
    assert.equal(await c.ownerOf('consumer', `${WQ}/w`, last), last);
  });
});
