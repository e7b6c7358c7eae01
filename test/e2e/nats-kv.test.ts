/**
 * JetStream key-value buckets end to end: the unmodified `nats` npm client's KV API (js.views.kv) against
 * bin/flowmq: a bucket with history, put/get/create/update with revisions, delete and purge markers, history, keys,
 * a watch seeing later puts, purgeDeletes, max_bytes, the stream-level rules under it (per-subject limits, direct
 * get, deny_delete), an object store, and an MQTT subscriber of the bucket's topics.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, StringCodec, type KV, type KvEntry, type NatsConnection } from 'nats';
import mqtt from 'mqtt';
import kafkajsPkg from 'kafkajs';
import { FlowmqProcess } from './harness.js';

const sc = StringCodec();

async function entries(iter: AsyncIterable<KvEntry>): Promise<KvEntry[]> {
  const out: KvEntry[] = [];
  for await (const e of iter) out.push(e);
  return out;
}

describe('e2e: NATS KV buckets over FlowMQ streams', () => {
  let broker: FlowmqProcess;
  let nc: NatsConnection;
  before(async () => {
    broker = await FlowmqProcess.start();
    nc = await connect({ servers: broker.natsServer });
  });
  after(async () => {
    await nc?.close().catch(() => undefined);
    await broker?.stop();
    broker?.cleanup();
  });

  it('creates a bucket with history 3 as nats-server configures it', async () => {
    const js = nc.jetstream();
    const kv = await js.views.kv('cfg', { history: 3 });
    const st = await kv.status();
    assert.equal(st.bucket, 'cfg');
    assert.equal(st.history, 3);
    assert.equal(st.values, 0);
    const si = await (await nc.jetstreamManager()).streams.info('KV_cfg');
    assert.equal(si.config.max_msgs_per_subject, 3);
    assert.equal(si.config.allow_rollup_hdrs, true);
    assert.equal(si.config.allow_direct, true);
    assert.equal(si.config.discard, 'new');
    assert.deepEqual(si.config.subjects, ['$KV.cfg.>']);
  });

  it('puts, gets, creates and updates with revisions; a wrong revision fails with the client error', async () => {
    const kv = await nc.jetstream().views.kv('rev', { history: 3 });
    const r1 = await kv.put('a', sc.encode('1'));
    const r2 = await kv.put('b', sc.encode('x'));
    assert.equal(r2, r1 + 1);
    const e = await kv.get('a');
    assert.ok(e);
    assert.equal(sc.decode(e.value), '1');
    assert.equal(e.revision, r1);
    assert.equal(e.operation, 'PUT');
    assert.equal(e.key, 'a');
    const r3 = await kv.update('a', sc.encode('2'), r1);
    assert.equal(r3, r2 + 1);
    // r1 is no longer a's last revision.
    await assert.rejects(kv.update('a', sc.encode('3'), r1), (err: Error) => /wrong last sequence: 3/.test(err.message));
    await assert.rejects(kv.create('a', sc.encode('4')), /wrong last sequence/);
    const c = await kv.create('c', sc.encode('new'));
    assert.equal(c, r3 + 1);
    assert.equal(sc.decode((await kv.get('a'))!.value), '2');
    // An old revision read by sequence.
    assert.equal(sc.decode((await kv.get('a', { revision: r1 }))!.value), '1');
    assert.equal(await kv.get('missing'), null);
  });

  it('keeps history 3 per key; delete and purge leave markers; history and keys see them', async () => {
    const kv = await nc.jetstream().views.kv('hist', { history: 3 });
    for (let i = 1; i <= 5; i++) await kv.put('k', sc.encode(`v${i}`));
    await kv.put('other', sc.encode('o'));
    const h = await entries(await kv.history({ key: 'k' }));
    assert.deepEqual(
      h.map((e) => sc.decode(e.value)),
      ['v3', 'v4', 'v5'],
    );
    assert.deepEqual(
      h.map((e) => e.revision),
      [3, 4, 5],
    );
    let st = await kv.status();
    assert.equal(st.values, 4);
    // The oldest revision is gone: reading it by sequence finds nothing.
    assert.equal(await kv.get('k', { revision: 1 }), null);

    await kv.delete('k');
    const d = await kv.get('k');
    assert.ok(d);
    assert.equal(d.operation, 'DEL');
    const hd = await entries(await kv.history({ key: 'k' }));
    assert.deepEqual(
      hd.map((e) => e.operation),
      ['PUT', 'PUT', 'DEL'],
    );
    // create succeeds over a delete marker (the client reads the marker's revision and updates).
    await kv.create('k', sc.encode('again'));
    assert.equal(sc.decode((await kv.get('k'))!.value), 'again');

    // purge: a rollup of the key, only the marker stays.
    await kv.purge('k');
    const hp = await entries(await kv.history({ key: 'k' }));
    assert.deepEqual(
      hp.map((e) => e.operation),
      ['PURGE'],
    );
    st = await kv.status();
    assert.equal(st.values, 2);
    const keys: string[] = [];
    for await (const k of await kv.keys()) keys.push(k);
    assert.deepEqual(keys.sort(), ['other']);

    // purgeDeletes: the markers go too.
    await (kv as KV & { purgeDeletes(olderMillis?: number): Promise<unknown> }).purgeDeletes(0);
    assert.equal(await kv.get('k'), null);
    st = await kv.status();
    assert.equal(st.values, 1);
  });

  it('watches: the current values first, then later puts and deletes', async () => {
    const kv = await nc.jetstream().views.kv('watch', { history: 2 });
    await kv.put('x', sc.encode('x1'));
    await kv.put('x', sc.encode('x2'));
    await kv.put('y', sc.encode('y1'));
    let initialized = false;
    const seen: string[] = [];
    const w = await kv.watch({ initializedFn: () => (initialized = true) });
    const done = (async () => {
      for await (const e of w) {
        seen.push(`${e.key}=${e.operation === 'PUT' ? sc.decode(e.value) : e.operation}`);
        if (e.key === 'end') break;
      }
    })();
    const waitFor = async (n: number): Promise<void> => {
      const t0 = Date.now();
      while (seen.length < n && Date.now() - t0 < 10_000) await new Promise((r) => setTimeout(r, 20));
    };
    await waitFor(2);
    assert.deepEqual(seen, ['x=x2', 'y=y1']);
    assert.equal(initialized, true);
    await kv.put('z', sc.encode('z1'));
    await kv.delete('x');
    await kv.put('end', sc.encode('.'));
    await done;
    assert.deepEqual(seen, ['x=x2', 'y=y1', 'z=z1', 'x=DEL', 'end=.']);
  });

  it('a bucket with max_bytes refuses puts past it; a bucket with a ttl reports it', async () => {
    const kv = await nc.jetstream().views.kv('mb', { max_bytes: 200, history: 1 });
    const st = await kv.status();
    assert.equal(st.max_bytes, 200);
    await kv.put('a', new Uint8Array(100));
    await assert.rejects(kv.put('b', new Uint8Array(100)), /maximum bytes exceeded/);
    // A smaller value fits; a key at its history limit may be replaced (nats-server's rule).
    await kv.put('b', new Uint8Array(10));
    await kv.put('a', new Uint8Array(100));
    assert.equal((await kv.status()).values, 2);
    const t = await nc.jetstream().views.kv('ttl', { ttl: 60_000, history: 1 });
    assert.equal((await t.status()).ttl, 60_000);
    await t.put('t', sc.encode('1'));
    assert.equal(sc.decode((await t.get('t'))!.value), '1');
  });

  it('enforces deny_delete, Nats-Rollup permission and purge by subject/keep at the stream level', async () => {
    const jsm = await nc.jetstreamManager();
    const js = nc.jetstream();
    await jsm.streams.add({ name: 'PLAIN', subjects: ['plain.>'] });
    await js.publish('plain.a', sc.encode('1'));
    const { headers } = await import('nats');
    const h = headers();
    h.set('Nats-Rollup', 'sub');
    await assert.rejects(js.publish('plain.a', sc.encode('2'), { headers: h }), /rollup not permitted/);
    await jsm.streams.add({ name: 'NODEL', subjects: ['nodel'], deny_delete: true, deny_purge: true });
    await js.publish('nodel', sc.encode('1'));
    await assert.rejects(jsm.streams.deleteMessage('NODEL', 1), /message delete not permitted/);
    await assert.rejects(jsm.streams.purge('NODEL'), /stream purge not permitted/);
    for (let i = 0; i < 4; i++) await js.publish('plain.b', sc.encode(`b${i}`));
    await js.publish('plain.a', sc.encode('a2'));
    // keep the last 2 of plain.b, then delete one message of plain.a.
    assert.equal((await jsm.streams.purge('PLAIN', { filter: 'plain.b', keep: 2 })).purged, 2);
    assert.equal(await jsm.streams.deleteMessage('PLAIN', 1), true);
    const si = await jsm.streams.info('PLAIN');
    assert.equal(si.state.messages, 3);
    assert.equal(si.state.first_seq, 4);
    assert.equal(si.state.last_seq, 6);
    await assert.rejects(jsm.streams.getMessage('PLAIN', { seq: 2 }), /no message found/);
    assert.equal(sc.decode((await jsm.streams.getMessage('PLAIN', { last_by_subj: 'plain.a' })).data), 'a2');
    // Sequences stay: the next publish is 7.
    assert.equal((await js.publish('plain.c', sc.encode('c'))).seq, 7);
  });

  it('object stores work over the same rules: put in chunks, get, list, delete (a rollup of the metadata)', async () => {
    const os = await nc.jetstream().views.os('files');
    const body = new TextEncoder().encode('hello world '.repeat(20000));
    const info = await os.putBlob({ name: 'a.txt' }, body);
    assert.equal(info.size, body.length);
    assert.ok(info.chunks > 1);
    const got = await os.getBlob('a.txt');
    assert.ok(got);
    assert.equal(Buffer.compare(Buffer.from(got), Buffer.from(body)), 0);
    assert.deepEqual(
      (await os.list()).map((e) => e.name),
      ['a.txt'],
    );
    await os.delete('a.txt');
    assert.equal((await os.info('a.txt'))?.deleted, true);
    assert.equal(await os.getBlob('a.txt'), null);
  });

  it("a Kafka AlterConfigs of the bucket's stream (KafkaJS) keeps its JetStream options: history still 2", async () => {
    const kv = await nc.jetstream().views.kv('altered', { history: 2 });
    const { Kafka, logLevel, ConfigResourceTypes } = kafkajsPkg;
    const admin = new Kafka({ clientId: 'kv-alter', brokers: [broker.kafka], logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    try {
      await admin.alterConfigs({
        validateOnly: false,
        resources: [{ type: ConfigResourceTypes.TOPIC, name: 'KV_altered', configEntries: [{ name: 'retention.ms', value: '86400000' }] }],
      });
    } finally {
      await admin.disconnect();
    }
    for (const v of ['1', '2', '3']) await kv.put('k', sc.encode(v));
    const seen: string[] = [];
    for await (const e of await kv.history({ key: 'k' })) seen.push(sc.decode(e.value));
    assert.deepEqual(seen, ['2', '3']);
    const si = await (await nc.jetstreamManager()).streams.info('KV_altered');
    assert.equal(si.config.max_msgs_per_subject, 2);
    assert.equal(si.config.max_age, 86_400_000 * 1e6);
  });

  it('an MQTT subscriber of $KV/<bucket>/# sees KV puts', async () => {
    const kv = await nc.jetstream().views.kv('mq', { history: 1 });
    const client = await mqtt.connectAsync(broker.mqttUrl, { protocolVersion: 5 });
    try {
      const got: Array<{ topic: string; body: string }> = [];
      client.on('message', (topic, payload) => got.push({ topic, body: payload.toString() }));
      await client.subscribeAsync('$KV/mq/#', { qos: 0 });
      await kv.put('temp', sc.encode('21'));
      await kv.put('end', sc.encode('.'));
      const t0 = Date.now();
      while (!got.some((g) => g.topic === '$KV/mq/end') && Date.now() - t0 < 10_000) await new Promise((r) => setTimeout(r, 20));
      assert.deepEqual(got, [
        { topic: '$KV/mq/temp', body: '21' },
        { topic: '$KV/mq/end', body: '.' },
      ]);
    } finally {
      await client.endAsync();
    }
  });
});
