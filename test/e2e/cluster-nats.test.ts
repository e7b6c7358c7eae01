// test-runner: apart (scripts/test.mjs): a 3-broker cluster whose leases and heartbeats must not starve for CPU beside another cluster or a second other file
/**
 * NATS across a cluster of three `bin/flowmq --cluster` processes (PostgreSQL, s3rver; test/helpers/cluster.ts),
 * driven by the `nats` npm client: JetStream published through one broker and consumed through another by a
 * durable pull consumer, the consumer's owner killed (kill -9) and the consumer continuing on another broker from
 * its acknowledged position, a core NATS queue group with members on two brokers getting each message once, and
 * request/reply across brokers, and a JetStream duplicate window and subject expectation that outlive their partition
 * owner (kill -9).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { AckPolicy, connect, consumerOpts, createInbox, nanos, StringCodec, type JsMsg, type NatsConnection, type Subscription } from 'nats';
import { rendezvous } from '../../src/cluster/index.js';
import { startCluster, type TestCluster } from '../helpers/cluster.js';
import { sleep } from './harness.js';

const sc = StringCodec();

async function collect(iter: AsyncIterable<JsMsg>, n: number, onMsg: (m: JsMsg) => Promise<void> | void = (m) => m.ack()): Promise<JsMsg[]> {
  const out: JsMsg[] = [];
  for await (const m of iter) {
    out.push(m);
    await onMsg(m);
    if (out.length >= n) break;
  }
  return out;
}

async function until(what: string, fn: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await sleep(50);
  }
}

/** Receives into a list (and wakes waiters), as a test subscriber does. */
function drain(sub: Subscription, into: string[]): void {
  void (async () => {
    for await (const m of sub) into.push(sc.decode(m.data));
  })();
}

describe('e2e cluster: NATS and JetStream across three brokers', { timeout: 180_000 }, () => {
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
  before(async () => {
    c = await startCluster({ brokers: 3, leaseMs: 1500, haproxy: false });
  });
  after(async () => {
    for (const nc of conns.values()) await nc.close().catch(() => undefined);
    await c?.close();
  });

  it('JetStream: published through broker 1, sequences from the partition owner, consumed by a durable pull consumer through broker 2', async () => {
    const jsm1 = await (await nats(1)).jetstreamManager();
    await jsm1.streams.add({ name: 'ORDERS', subjects: ['orders.>'] });
    await c.waitSettled({ min: { partition: 1 } });
    // Published through every broker in turn: whichever owns the stream's partition assigns the sequences.
    const seqs: number[] = [];
    for (let i = 1; i <= 9; i++) {
      const js = (await nats(((i - 1) % 3) + 1)).jetstream();
      seqs.push((await js.publish(`orders.${i}`, sc.encode(`o${i}`))).seq);
    }
    assert.deepEqual(seqs, [1, 2, 3, 4, 5, 6, 7, 8, 9]);
    // The stream API answers on any broker.
    const info3 = await (await (await nats(3)).jetstreamManager()).streams.info('ORDERS');
    assert.equal(info3.state.last_seq, 9);

    const jsm2 = await (await nats(2)).jetstreamManager();
    await jsm2.consumers.add('ORDERS', { durable_name: 'ship', ack_policy: AckPolicy.Explicit, ack_wait: nanos(30_000) });
    const owner = await c.ownerOf('consumer', 'ORDERS/ship');
    assert.ok(owner !== null, 'the consumer has an owner');
    // Fetched through each broker, the owner and the others alike.
    const got: string[] = [];
    for (const id of [2, 1, 3]) {
      const cons = await (await nats(id)).jetstream().consumers.get('ORDERS', 'ship');
      const msgs = await collect(await cons.fetch({ max_messages: 3, expires: 5000 }), 3, (m) => m.ackAck().then(() => undefined));
      got.push(...msgs.map((m) => sc.decode(m.data)));
    }
    assert.deepEqual(got, ['o1', 'o2', 'o3', 'o4', 'o5', 'o6', 'o7', 'o8', 'o9']);
    for (const id of [1, 2, 3]) {
      const ci = await (await (await nats(id)).jetstreamManager()).consumers.info('ORDERS', 'ship');
      assert.equal(ci.ack_floor.stream_seq, 9, `consumer info through broker ${id}`);
      assert.equal(ci.num_pending, 0);
    }
    const names: string[] = [];
    for await (const ci of jsm1.consumers.list('ORDERS')) names.push(ci.name);
    assert.deepEqual(names, ['ship']);
    // A Nats-Msg-Id is checked where the partition is written: a publish retried through another broker is a
    // duplicate, whichever broker it goes through.
    const acks = [];
    for (const id of [1, 2, 3, 2]) acks.push(await (await nats(id)).jetstream().publish('orders.once', sc.encode('once'), { msgID: 'order-10' }));
    assert.deepEqual(
      acks.map((a) => [a.seq, a.duplicate]),
      [
        [10, false],
        [10, true],
        [10, true],
        [10, true],
      ],
    );
    assert.equal((await jsm1.streams.info('ORDERS')).state.last_seq, 10);
    // consumer_count counts the durable consumers of every broker, whichever broker answers: a second consumer placed
    // away from the stream's partition owner (which answers STREAM.INFO).
    const pOwner = await c.ownerOf('partition', 'ORDERS/0');
    const away = Array.from({ length: 100 }, (_, i) => `audit${i}`).find((n) => rendezvous('consumer', `ORDERS/${n}`, [1, 2, 3]) !== pOwner)!;
    await jsm2.consumers.add('ORDERS', { durable_name: away, ack_policy: AckPolicy.Explicit });
    for (const id of [1, 2, 3]) {
      const si = await (await (await nats(id)).jetstreamManager()).streams.info('ORDERS');
      assert.equal(si.state.consumer_count, 2, `consumer_count through broker ${id}`);
    }
  });

  it('JetStream: subjects overlapping a stream made through another broker are refused (10065), as nats-server does', async () => {
    await (await (await nats(1)).jetstreamManager()).streams.add({ name: 'OVA', subjects: ['ova.>'] });
    const jsm3 = await (await nats(3)).jetstreamManager();
    await assert.rejects(jsm3.streams.add({ name: 'OVB', subjects: ['ova.x'] }), /subjects overlap with an existing stream/);
    await jsm3.streams.add({ name: 'OVB', subjects: ['ovb'] });
    await assert.rejects(jsm3.streams.update('OVB', { subjects: ['ovb', '*.y'] }), /subjects overlap with an existing stream/);
  });

  it('JetStream on a 3-partition stream: a durable pull consumer through every broker gets each record once, partitions in order', async () => {
    await c.broker(1).proc.api('POST', '/api/v1/streams', { name: 'PARTS', partitions: 3, bindings: ['parts/#'] });
    await c.waitSettled({ min: { partition: 3 } });
    // Subjects spread over the partitions (by topic hash); published through every broker in turn.
    const sent: string[] = [];
    for (let i = 1; i <= 12; i++) {
      await (await nats(((i - 1) % 3) + 1)).jetstream().publish(`parts.${i}`, sc.encode(`p${i}`));
      sent.push(`p${i}`);
    }
    // The admin API of every broker describes every partition, those owned elsewhere with their owners' offsets.
    for (const id of [1, 2, 3]) {
      const d = await c.broker(id).proc.api<{ partitionDetails: Array<{ partition: number; highWatermark: number }> }>('GET', '/api/v1/streams/PARTS');
      assert.deepEqual(
        d.partitionDetails.map((x) => x.partition),
        [0, 1, 2],
        `partitions described by broker ${id}`,
      );
      assert.equal(
        d.partitionDetails.reduce((n, x) => n + x.highWatermark, 0),
        12,
        `the records of every partition, through broker ${id}`,
      );
    }
    const jsm2 = await (await nats(2)).jetstreamManager();
    await jsm2.consumers.add('PARTS', { durable_name: 'all', ack_policy: AckPolicy.Explicit, ack_wait: nanos(30_000) });
    const got: JsMsg[] = [];
    for (const id of [3, 1, 2]) {
      const cons = await (await nats(id)).jetstream().consumers.get('PARTS', 'all');
      got.push(...(await collect(await cons.fetch({ max_messages: 4, expires: 5000 }), 4, (m) => m.ackAck().then(() => undefined))));
    }
    assert.deepEqual(got.map((m) => sc.decode(m.data)).sort(), [...sent].sort());
    // seq = offset * 3 + partition + 1: each partition's offsets ascend, and the records of one subject (one
    // partition) come in the order they were published.
    const last = new Map<number, number>();
    for (const m of got) {
      const p = (m.seq - 1) % 3;
      assert.ok((last.get(p) ?? -1) < Math.floor((m.seq - 1) / 3), `partition ${p} in order`);
      last.set(p, Math.floor((m.seq - 1) / 3));
    }
    assert.ok(last.size >= 2, 'the records went to more than one partition');
    for (const id of [1, 2, 3]) {
      const ci = await (await (await nats(id)).jetstreamManager()).consumers.info('PARTS', 'all');
      assert.deepEqual([ci.num_pending, ci.num_ack_pending, ci.delivered.consumer_seq], [0, 0, 12], `consumer info through broker ${id}`);
    }
  });

  it('core NATS: a queue group with members on two brokers gets each message published on a third once', async () => {
    const [n1, n2, n3] = [await nats(1), await nats(2), await nats(3)];
    const on2: string[] = [];
    const on3: string[] = [];
    drain(n2.subscribe('work.>', { queue: 'workers' }), on2);
    drain(n3.subscribe('work.>', { queue: 'workers' }), on3);
    const mark2: string[] = [];
    const mark3: string[] = [];
    drain(n2.subscribe('mark.2'), mark2);
    drain(n3.subscribe('mark.3'), mark3);
    await n2.flush();
    await n3.flush();
    // Probes until broker 1 knows both brokers' members (it picks a broker per message, round robin).
    let p = 0;
    await until('both members are known to broker 1', async () => {
      n1.publish('work.probe', sc.encode(`probe-${p++}`));
      await n1.flush();
      await sleep(20);
      return on2.some((x) => x.startsWith('probe')) && on3.some((x) => x.startsWith('probe'));
    });
    const before2 = on2.length;
    const before3 = on3.length;
    for (let i = 0; i < 200; i++) n1.publish(`work.${i % 4}`, sc.encode(`job-${i}`));
    // Markers after the jobs, on each member's broker: once they arrived, every job sent there has too.
    n1.publish('mark.2', sc.encode('end'));
    n1.publish('mark.3', sc.encode('end'));
    await n1.flush();
    await until('markers', () => mark2.length === 1 && mark3.length === 1);
    const jobs2 = on2.slice(before2).filter((x) => x.startsWith('job'));
    const jobs3 = on3.slice(before3).filter((x) => x.startsWith('job'));
    assert.equal(jobs2.length + jobs3.length, 200, `each job once: ${jobs2.length} + ${jobs3.length}`);
    assert.equal(new Set([...jobs2, ...jobs3]).size, 200, 'no job twice');
    assert.ok(jobs2.length > 0 && jobs3.length > 0, `both brokers' members got work (${jobs2.length}, ${jobs3.length})`);
  });

  it('core NATS: request/reply across brokers, and no-responders when nobody serves the subject', async () => {
    const [n1, n2, n3] = [await nats(1), await nats(2), await nats(3)];
    const sub = n3.subscribe('svc.echo');
    void (async () => {
      for await (const m of sub) m.respond(sc.encode(`echo:${sc.decode(m.data)}`));
    })();
    await n3.flush();
    for (const nc of [n1, n2]) {
      let reply = '';
      await until('a reply through another broker', async () => {
        try {
          reply = sc.decode((await nc.request('svc.echo', sc.encode('hi'), { timeout: 1000 })).data);
          return true;
        } catch {
          return false; // the responder's interest has not reached this broker yet
        }
      });
      assert.equal(reply, 'echo:hi');
    }
    sub.unsubscribe();
    await assert.rejects(n1.request('svc.none', sc.encode('x'), { timeout: 3000 }), /no responders|503/i);
  });

  it('JetStream: push consumers whose owner is another broker deliver to a subscriber on this one', async () => {
    const jsm = await (await nats(1)).jetstreamManager();
    await jsm.streams.add({ name: 'PUSHC', subjects: ['pushc.>'] });
    const js1 = (await nats(1)).jetstream();
    for (let i = 1; i <= 3; i++) await js1.publish(`pushc.${i}`, sc.encode(`p${i}`));
    // Durable push consumers, each subscribed through a broker other than the one placement gives it.
    for (const i of [1, 2, 3]) {
      const name = `push${i}`;
      const home = rendezvous('consumer', `PUSHC/${name}`, [1, 2, 3])!;
      const id = (home % 3) + 1;
      const opts = consumerOpts();
      opts.durable(name);
      opts.deliverTo(createInbox());
      opts.ackExplicit();
      opts.deliverAll();
      const sub = await (await nats(id)).jetstream().subscribe('pushc.>', opts);
      const got = (await collect(sub, 3)).map((m) => sc.decode(m.data));
      assert.deepEqual(got, ['p1', 'p2', 'p3'], `push consumer ${name} through broker ${id}`);
      assert.equal(await c.ownerOf('consumer', `PUSHC/${name}`), home, `owned by broker ${home}, not the subscriber's`);
      sub.unsubscribe();
    }
  });

  it("JetStream: the consumer's owner is killed; the consumer continues on another broker from its acked position", async () => {
    const jsm = await (await nats(1)).jetstreamManager();
    await jsm.streams.add({ name: 'TASKS', subjects: ['tasks.>'] });
    const js = (await nats(1)).jetstream();
    for (let i = 1; i <= 6; i++) await js.publish(`tasks.${i}`, sc.encode(`t${i}`));
    await jsm.consumers.add('TASKS', { durable_name: 'run', ack_policy: AckPolicy.Explicit, ack_wait: nanos(60_000) });
    const owner = await c.ownerOf('consumer', 'TASKS/run');
    assert.ok(owner !== null);
    const via = [1, 2, 3].find((id) => id !== owner)!;
    const other = [1, 2, 3].find((id) => id !== owner && id !== via)!;
    const cons = await (await nats(via)).jetstream().consumers.get('TASKS', 'run');
    const first = await collect(await cons.fetch({ max_messages: 3, expires: 5000 }), 3, () => undefined);
    await first[0].ackAck();
    await first[1].ackAck();
    // t3 is delivered, not acked. The acks are in the metastore once the owner wrote them.
    const db = new pg.Client({ connectionString: c.dbUrl });
    await db.connect();
    try {
      await until('the ack floor is stored', async () => {
        const r = await db.query<{ ack_floor: string }>("SELECT ack_floor FROM jetstream_consumers WHERE stream = 'TASKS' AND name = 'run'");
        return Number(r.rows[0]?.ack_floor) === 2;
      });
    } finally {
      await db.end();
    }
    const nco = conns.get(owner);
    conns.delete(owner);
    await c.kill(owner);
    await nco?.close().catch(() => undefined);
    // Through a surviving broker: the requests wait for the dead owner's lease to expire and the consumer to move.
    const again: JsMsg[] = [];
    await until(
      'the consumer serves again',
      async () => {
        try {
          const c2 = await (await nats(other)).jetstream().consumers.get('TASKS', 'run');
          again.push(...(await collect(await c2.fetch({ max_messages: 4, expires: 3000 }), 4)));
          return again.length >= 4;
        } catch {
          return false;
        }
      },
      30_000,
    );
    assert.deepEqual(
      again.map((m) => sc.decode(m.data)),
      ['t3', 't4', 't5', 't6'],
      'from the acked position, the unacked t3 first',
    );
    assert.equal(again[0].info.deliveryCount, 2, 't3 is a redelivery');
    const newOwner = await c.ownerOf('consumer', 'TASKS/run', other);
    assert.ok(newOwner !== null && newOwner !== owner, `moved to a live broker (${newOwner})`);
    await until(
      'acks reach the new owner',
      async () => (await (await (await nats(via)).jetstreamManager()).consumers.info('TASKS', 'run')).ack_floor.stream_seq === 6,
    );
  });

  it('JetStream: the duplicate window outlives its partition owner (killed): a publish retried through another broker is a duplicate, a subject expectation retried is refused', async () => {
    // Runs after the kill above: two brokers are left.
    const live = c.brokers.filter((b) => b.state !== 'dead').map((b) => b.id);
    assert.equal(live.length, 2);
    const jsm = await (await nats(live[0])).jetstreamManager();
    await jsm.streams.add({ name: 'DEDUP', subjects: ['dedup.>'] });
    const first = await (await nats(live[0])).jetstream().publish('dedup.a', sc.encode('one'), { msgID: 'order-1' });
    assert.deepEqual([first.seq, first.duplicate], [1, false]);
    const owner = await c.ownerOf('partition', 'DEDUP/0');
    assert.ok(owner !== null && live.includes(owner), `the partition has a live owner (${owner})`);
    const other = live.find((id) => id !== owner)!;
    // A stream on the same owner for the subject expectation (Nats-Expected-Last-Subject-Sequence): made until the
    // placement gives its partition that owner.
    let expect = '';
    for (let i = 0; expect === '' && i < 30; i++) {
      await jsm.streams.add({ name: `EXPECT${i}`, subjects: [`expect${i}.>`] });
      const ack = await (await nats(live[0])).jetstream().publish(`expect${i}.a`, sc.encode('one'), { expect: { lastSubjectSequence: 0 } });
      assert.equal(ack.seq, 1);
      if ((await c.ownerOf('partition', `EXPECT${i}/0`)) === owner) expect = `expect${i}`;
      else await jsm.streams.delete(`EXPECT${i}`);
    }
    assert.notEqual(expect, '', 'a stream placed on the same owner');
    conns
      .get(owner)
      ?.close()
      .catch(() => undefined);
    conns.delete(owner);
    await c.kill(owner);
    // The same message again, as a publisher retrying after a lost PubAck: through the survivor, again and again with
    // a short timeout, so that some attempts arrive while nobody owns the partition (the owner's lease run out, the
    // survivor's claim not made yet): none of them may be stored (the stream's count below).
    // The subject expectation retried the same way at the same time: subject a's last sequence is 1, so every attempt
    // is refused (10071) and none stored, also those that arrive while nobody owns the partition.
    const acks: { seq: number; duplicate: boolean }[] = [];
    let refused = '';
    await Promise.all([
      until(
        'a PubAck through the survivor',
        async () => {
          const ack = await (
            await nats(other)
          )
            .jetstream()
            .publish('dedup.a', sc.encode('one'), { msgID: 'order-1', timeout: 250 })
            .catch(() => null);
          if (ack !== null) acks.push(ack);
          return ack !== null;
        },
        30_000,
      ),
      until(
        'an answer to the expectation through the survivor',
        async () => {
          const outcome = await (
            await nats(other)
          )
            .jetstream()
            .publish(`${expect}.a`, sc.encode('one'), { expect: { lastSubjectSequence: 0 }, timeout: 250 })
            .then(
              (ack) => `stored at ${ack.seq}`,
              (err: Error) => (/timeout/i.test(err.message) ? null : err.message),
            );
          console.log('OUTCOME', Date.now() % 100000, outcome);
          if (outcome !== null) refused = outcome;
          return outcome !== null;
        },
        30_000,
      ),
    ]);
    assert.deepEqual([acks[0].seq, acks[0].duplicate], [1, true], 'found a duplicate of sequence 1');
    assert.match(refused, /wrong last sequence: 1/);
    const next = await (await nats(other)).jetstream().publish('dedup.a', sc.encode('two'), { msgID: 'order-2' });
    assert.deepEqual([next.seq, next.duplicate], [2, false]);
    assert.equal((await (await (await nats(other)).jetstreamManager()).streams.info('DEDUP')).state.messages, 2);
    assert.equal((await (await (await nats(other)).jetstreamManager()).streams.info(expect.toUpperCase())).state.messages, 1);
  });
});
