/**
 * Ages and seals, side by side: the same nats.js scenario runs against bin/flowmq and against Debian's nats-server
 * 2.9.10 (at the same time), and the two transcripts must be equal; absolute checks on the transcript make it fail
 * should both be wrong the same way. Covered: a stream's `max_age` expiring messages one by one (stream info state
 * as they go, then a marker published after them is all a consumer gets), a KV bucket's `ttl` (an expired key reads
 * as missing once a marker key put after its age is there), and a sealed object store that still reads. Then FlowMQ
 * alone: the Kafka view of the aged stream, whose log start moved past the expired messages.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, StringCodec, type NatsConnection } from 'nats';
import kafkajsPkg from 'kafkajs';
import { eventually, sleep } from './harness.js';
import { sideBySide, step, type Entry } from './nats-side-by-side.js';

const sc = StringCodec();

/** The figures of STREAM.INFO's state that both servers count the same way. */
async function state(nc: NatsConnection, stream: string): Promise<Record<string, unknown>> {
  const s = (await (await nc.jetstreamManager()).streams.info(stream)).state;
  return {
    messages: s.messages,
    bytes: s.bytes,
    first_seq: s.first_seq,
    last_seq: s.last_seq,
    num_deleted: s.num_deleted ?? 0,
    first_ts: s.first_ts.slice(0, 4),
  };
}

/** Polls the stream's state until `done` says so (10 s at most); the state it stopped at. */
async function stateWhen(nc: NatsConnection, stream: string, done: (s: Record<string, unknown>) => boolean): Promise<Record<string, unknown>> {
  let last: Record<string, unknown> = {};
  await eventually(
    async () => {
      last = await state(nc, stream);
      return done(last);
    },
    10_000,
    `${stream} state`,
  );
  return last;
}

/** Every message an ephemeral ordered consumer reads from the start: [seq, subject, data]. */
async function readAll(nc: NatsConnection, stream: string): Promise<unknown[]> {
  const c = await nc.jetstream().consumers.get(stream);
  const out: unknown[] = [];
  for await (const m of await c.fetch({ max_messages: 10, expires: 1000 })) out.push([m.seq, m.subject, sc.decode(m.data)]);
  return out;
}

async function scenario(server: string): Promise<Entry[]> {
  const nc = await connect({ servers: server });
  const js = nc.jetstream();
  const jsm = await nc.jetstreamManager();
  const out: Entry[] = [];
  const log = (label: string, v: unknown): void => void out.push([label, v]);
  try {
    // ---------------------------------------------------------------- stream max_age (2 s)
    const si = await jsm.streams.add({ name: 'AGE', subjects: ['age.>'], max_age: 2_000_000_000 });
    log('age max_age', si.config.max_age);
    for (let i = 1; i <= 3; i++) log(`age pub a${i}`, (await js.publish('age.a', sc.encode(`a${i}`))).seq);
    await sleep(1000);
    for (let i = 1; i <= 2; i++) log(`age pub b${i}`, (await js.publish('age.b', sc.encode(`b${i}`))).seq);
    log('age state 5', await state(nc, 'AGE'));
    // The first three go at their age (one second before the last two): the state as it is between the two.
    log('age state 2', await stateWhen(nc, 'AGE', (s) => (s.first_seq as number) >= 4));
    log('age state 0', await stateWhen(nc, 'AGE', (s) => s.messages === 0));
    log('age marker', (await js.publish('age.m', sc.encode('marker'))).seq);
    log('age read after marker', await readAll(nc, 'AGE'));
    log('age state marker', await state(nc, 'AGE'));

    // ---------------------------------------------------------------- KV ttl (1.5 s)
    const kv = await js.views.kv('TTL', { ttl: 1500 });
    await kv.put('a', sc.encode('1'));
    await kv.put('b', sc.encode('2'));
    log('kv a before', sc.decode((await kv.get('a'))!.value));
    log('kv values before', (await kv.status()).values);
    // Waiting for the age itself; that the keys are gone is read after a marker put later is there.
    await sleep(2500);
    const m = await kv.put('marker', sc.encode('m'));
    log('kv marker rev', m);
    log('kv marker', sc.decode((await kv.get('marker'))!.value));
    log('kv a after', await kv.get('a'));
    log('kv b after', await kv.get('b'));
    const keys: string[] = [];
    for await (const k of await kv.keys()) keys.push(k);
    log('kv keys after', keys.sort());
    log('kv values after', (await kv.status()).values);

    // ---------------------------------------------------------------- sealed object store
    const os = await js.views.os('SEALED');
    await os.putBlob({ name: 'f' }, sc.encode('first version'));
    await os.putBlob({ name: 'g' }, sc.encode('another object'));
    // Put again: the new metadata rolls the old one up and the old chunks are purged.
    await os.putBlob({ name: 'f' }, sc.encode('second version of f'));
    log('os sealed', (await os.seal()).sealed);
    const fb = await os.getBlob('f');
    log('os get f after seal', fb === null ? null : sc.decode(fb));
    const gb = await os.getBlob('g');
    log('os get g after seal', gb === null ? null : sc.decode(gb));
    log('os list after seal', (await os.list()).map((i) => [i.name, i.size]).sort());
    log(
      'os put after seal',
      await os.putBlob({ name: 'h' }, sc.encode('x')).then(
        () => 'stored',
        (err: Error) => err.message,
      ),
    );
    const obj = await state(nc, 'OBJ_SEALED');
    log('os state after seal', { messages: obj.messages, num_deleted: obj.num_deleted });
  } finally {
    await nc.close();
  }
  return out;
}

describe('e2e: NATS max_age, KV ttl and sealed object stores side by side with nats-server 2.9.10', () => {
  const t = sideBySide('nats-kv-side-', scenario);

  it('gives the same transcript as nats-server', () => {
    assert.deepEqual(t.ours, t.theirs);
  });

  it('expires a stream message by message at max_age, and a marker published after is all a consumer reads', () => {
    assert.deepEqual(step(t.ours, 'age state 5'), {
      messages: 5,
      bytes: 185,
      first_seq: 1,
      last_seq: 5,
      num_deleted: 0,
      first_ts: String(new Date().getUTCFullYear()),
    });
    assert.deepEqual(step(t.ours, 'age state 2'), {
      messages: 2,
      bytes: 74,
      first_seq: 4,
      last_seq: 5,
      num_deleted: 0,
      first_ts: String(new Date().getUTCFullYear()),
    });
    assert.deepEqual(step(t.ours, 'age state 0'), { messages: 0, bytes: 0, first_seq: 6, last_seq: 5, num_deleted: 0, first_ts: '1970' });
    assert.equal(step(t.ours, 'age marker'), 6);
    assert.deepEqual(step(t.ours, 'age read after marker'), [[6, 'age.m', 'marker']]);
  });

  it('expires KV entries at the bucket ttl', () => {
    assert.equal(step(t.ours, 'kv a before'), '1');
    assert.equal(step(t.ours, 'kv values before'), 2);
    assert.equal(step(t.ours, 'kv marker'), 'm');
    assert.equal(step(t.ours, 'kv a after'), null);
    assert.equal(step(t.ours, 'kv b after'), null);
    assert.deepEqual(step(t.ours, 'kv keys after'), ['marker']);
    assert.equal(step(t.ours, 'kv values after'), 1);
  });

  it('reads a sealed object store', () => {
    assert.equal(step(t.ours, 'os sealed'), true);
    assert.equal(step(t.ours, 'os get f after seal'), 'second version of f');
    assert.equal(step(t.ours, 'os get g after seal'), 'another object');
    assert.deepEqual(step(t.ours, 'os list after seal'), [
      ['f', 19],
      ['g', 14],
    ]);
    assert.notEqual(step(t.ours, 'os put after seal'), 'stored');
  });

  it('moves the Kafka log start of the aged stream past its expired messages', async () => {
    const { Kafka, logLevel } = kafkajsPkg;
    const kafka = new Kafka({ clientId: 'kv-side', brokers: [t.broker.kafka], logLevel: logLevel.NOTHING });
    const admin = kafka.admin();
    await admin.connect();
    try {
      // Offsets 0-4 expired; offset 5 is the marker (the log keeps its last record: the marker is the last).
      await eventually(async () => (await admin.fetchTopicOffsets('AGE'))[0].low === '5', 5000, 'AGE log start at 5');
      const [o] = await admin.fetchTopicOffsets('AGE');
      assert.deepEqual([o.low, o.high], ['5', '6']);
    } finally {
      await admin.disconnect();
    }
    // A Kafka reader from the earliest offset gets the marker only.
    const consumer = kafka.consumer({ groupId: 'kv-side-age' });
    await consumer.connect();
    const got: string[] = [];
    try {
      await consumer.subscribe({ topic: 'AGE', fromBeginning: true });
      await consumer.run({ eachMessage: async ({ message }) => void got.push(`${message.offset}:${message.value?.toString() ?? ''}`) });
      // In offset order: an expired record still in the log would come before the marker.
      await eventually(() => got.length >= 1, 15_000, 'Kafka reads AGE');
    } finally {
      await consumer.disconnect();
    }
    assert.deepEqual(got, ['5:marker']);
  });
});
