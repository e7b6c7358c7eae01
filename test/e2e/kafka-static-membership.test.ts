/**
 * Static membership of the classic consumer group protocol (KIP-345) with librdkafka 2.15 (the node-rdkafka API of
 * @confluentinc/kafka-javascript, test/interop/confluent-kafka-javascript) against a real `flowmq start`: two
 * consumers with a group.instance.id share a topic; one restarts (a consumer closed, as a static member leaves no
 * group on close, and a new one with the same instance id) and gets its partitions back while the other sees no
 * rebalance (no rebalance callback, same generation); then it stays away past session.timeout.ms and the other takes
 * every partition.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { EventEmitter } from 'node:events';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { FlowmqProcess, ROOT, run } from './harness.js';

const INTEROP = join(ROOT, 'test/interop/confluent-kafka-javascript');

type Conf = Record<string, string | number | boolean>;
interface RdConsumer extends EventEmitter {
  connect(opts: object, cb: (err: Error | null) => void): void;
  subscribe(topics: string[]): void;
  consume(count: number, cb: (err: Error | null, messages: Array<{ value: Buffer | null }>) => void): void;
  setDefaultConsumeTimeout(ms: number): void;
  disconnect(cb: () => void): void;
  assignments(): Array<{ topic: string; partition: number }>;
}
interface Ckjs {
  KafkaConsumer: new (conf: Conf, topicConf: Conf) => RdConsumer;
}

function loadClient(): Ckjs {
  const require = createRequire(join(INTEROP, 'package.json'));
  try {
    return require('@confluentinc/kafka-javascript') as Ckjs;
  } catch (err) {
    throw new Error(`@confluentinc/kafka-javascript is not installed in ${INTEROP}: run test/interop/confluent-kafka-javascript/install.sh`, { cause: err });
  }
}

async function until(what: string, cond: () => boolean, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

interface Member {
  name: string;
  consumer: RdConsumer;
  /** Rebalance callbacks (assign and revoke) this consumer got. */
  rebalances: number;
  values: string[];
  parts(): number[];
  close(): Promise<void>;
}

describe('kafka static membership (KIP-345) with librdkafka 2.15', () => {
  let ck: Ckjs;
  let broker: FlowmqProcess;
  const members: Member[] = [];
  const TOPIC = 'ks.topic';
  const GROUP = 'ks.group';
  const SESSION_MS = 6000;

  before(async () => {
    ck = loadClient();
    broker = await FlowmqProcess.start({ args: ['--kafka-group-initial-rebalance-delay', '0', '--kafka-default-partitions', '4'] });
    const created = await run('kcat', ['-b', broker.kafka, '-P', '-t', TOPIC], { input: 'first\n', timeoutMs: 20_000 });
    assert.equal(created.code, 0, created.stderr);
  });
  after(async () => {
    for (const m of members) await m.close().catch(() => undefined);
    await broker?.stop();
    broker?.cleanup();
  });

  const produce = async (values: string[]): Promise<void> => {
    // One record per partition (kcat -p), so that every member has one to read.
    for (const [i, v] of values.entries()) {
      const r = await run('kcat', ['-b', broker.kafka, '-P', '-t', TOPIC, '-p', String(i % 4)], { input: `${v}\n`, timeoutMs: 20_000 });
      assert.equal(r.code, 0, r.stderr);
    }
  };

  const start = async (name: string, instance: string): Promise<Member> => {
    const consumer = new ck.KafkaConsumer(
      {
        'bootstrap.servers': broker.kafka,
        'group.id': GROUP,
        'group.instance.id': instance,
        'client.id': name,
        'session.timeout.ms': SESSION_MS,
        'heartbeat.interval.ms': 500,
        'partition.assignment.strategy': 'range',
        'enable.auto.commit': false,
        rebalance_cb: true,
        ...(process.env.KS_DEBUG ? { debug: 'cgrp,consumer,protocol', event_cb: true } : {}),
      },
      { 'auto.offset.reset': 'earliest' },
    );
    // Polled here rather than with the binding's own consume loop, which a disconnect can wait on forever: the loop
    // is stopped, and its last poll answered, before the consumer closes.
    let polling = true;
    let poll: Promise<void> = Promise.resolve();
    const m: Member = {
      name,
      consumer,
      rebalances: 0,
      values: [],
      parts: () =>
        consumer
          .assignments()
          .map((a) => a.partition)
          .sort(),
      // Bounded: a close that never completes must fail the test, not hang it.
      close: async () => {
        polling = false;
        await poll;
        await Promise.race([
          new Promise<void>((r) => consumer.disconnect(() => r())),
          new Promise<void>((_, rej) => setTimeout(() => rej(new Error(`${name} did not close within 20 s`)), 20_000).unref()),
        ]);
      },
    };
    const loop = (): void => {
      if (!polling) return;
      poll = new Promise<void>((done) =>
        consumer.consume(100, (err, messages) => {
          if (!err) for (const msg of messages) m.values.push(msg.value?.toString() ?? '');
          done();
          setImmediate(loop);
        }),
      );
    };
    consumer.on('rebalance', () => void m.rebalances++);
    if (process.env.KS_DEBUG) consumer.on('event.log', (l: { message: string }) => console.error(`[${name}] ${Date.now()} ${l.message}`));
    await new Promise<void>((res, rej) => consumer.connect({}, (err) => (err ? rej(err) : res())));
    consumer.subscribe([TOPIC]);
    consumer.setDefaultConsumeTimeout(200);
    loop();
    members.push(m);
    return m;
  };
  const rebalancesLogged = (): number => broker.logs.filter((l) => l.msg === 'group rebalanced' && l.group === GROUP).length;

  it('a static member that restarts within the session timeout gets its partitions back; the other sees no rebalance', async () => {
    const a = await start('static-a', 'instance-a');
    await until('static-a owns the 4 partitions', () => a.parts().length === 4);
    const b = await start('static-b', 'instance-b');
    await until('the partitions split', () => a.parts().length === 2 && b.parts().length === 2);
    const aParts = a.parts();
    const bParts = b.parts();
    const bRebalances = b.rebalances;
    const generations = rebalancesLogged();

    // static-a restarts: closed (a static member sends no LeaveGroup), then a new consumer with its instance id.
    await a.close();
    members.splice(members.indexOf(a), 1);
    const a2 = await start('static-a2', 'instance-a');
    await until('the restarted member owns its partitions again', () => a2.parts().length === 2);
    assert.deepEqual(a2.parts(), aParts);

    // A marker on every partition, read by whoever owns it: both members are consuming again.
    await produce(['marker-0', 'marker-1', 'marker-2', 'marker-3']);
    await until('the markers read', () => [...a2.values, ...b.values].filter((v) => v.startsWith('marker-')).length === 4);
    // static-b saw nothing: no rebalance callback, same partitions, and the group stayed in its generation.
    assert.equal(b.rebalances, bRebalances, 'no rebalance callback on static-b');
    assert.deepEqual(b.parts(), bParts);
    assert.equal(rebalancesLogged(), generations, 'no new generation');
    await until('the broker logged a static rejoin', () => broker.logs.some((l) => l.msg === 'static member rejoined' && l.group === GROUP));
  });

  it('a static member away past session.timeout.ms is removed and the group rebalances', async () => {
    const [a2, b] = members;
    const bRebalances = b.rebalances;
    const generations = rebalancesLogged();
    await a2.close();
    members.splice(members.indexOf(a2), 1);
    const left = Date.now();
    await until('static-b owns the 4 partitions', () => b.parts().length === 4, SESSION_MS + 20_000);
    assert.ok(Date.now() - left >= SESSION_MS - 1000, `rebalanced after ${Date.now() - left} ms, not before the session timeout`);
    assert.ok(b.rebalances > bRebalances, 'static-b got a rebalance callback');
    assert.ok(rebalancesLogged() > generations, 'a new generation');
    await until('the broker logged the session expiry', () => broker.logs.some((l) => l.msg === 'member session expired' && l.group === GROUP));
    await produce(['after-0', 'after-1', 'after-2', 'after-3']);
    await until('static-b reads every partition', () => b.values.filter((v) => v.startsWith('after-')).length === 4);
  });
});
