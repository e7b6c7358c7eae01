/**
 * pika (Debian's python3-pika 1.2, RabbitMQ's Python client: a second AMQP 0-9-1 implementation beside amqplib,
 * with its own field-table encoder and its own idea of confirms and channel errors) against a real `flowmq start`
 * process: a work queue with three competing consumers and prefetch, fanout/topic/headers routing, every content
 * property and header type pika writes, publisher confirms (acks, returns, nacks), basic.get, and channel errors
 * that leave the connection usable; and publisher confirms across a `kill -9` of the broker. The client side is test/e2e/pika-client.py; it prints what it saw, this file
 * decides whether that is right.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { FlowmqProcess, ROOT, eachLine, eventually, run } from './harness.js';
import { amqpFixture, startAmqpBroker } from './amqp-helpers.js';

const CLIENT = join(ROOT, 'test/e2e/pika-client.py');
// Debian's interpreter, where python3-pika is installed (a python3 earlier in PATH may be another one).
const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';

type Step = { step: string; [k: string]: unknown };

async function pika(broker: FlowmqProcess, ...args: string[]): Promise<Map<string, Step>> {
  const r = await run(PYTHON, [CLIENT, args[0]!, String(broker.ports.amqp), ...args.slice(1)], { timeoutMs: 60_000 });
  assert.equal(r.code, 0, `pika ${args.join(' ')} failed:\n${r.stderr}\n${r.stdout}`);
  const m = new Map<string, Step>();
  for (const line of r.stdout.split('\n')) {
    if (!line.startsWith('{')) continue;
    const s = JSON.parse(line) as Step;
    m.set(s.step, s);
  }
  return m;
}

describe('pika against a real broker', () => {
  // Heartbeats on (pika takes the server's proposal), unlike the amqplib tests.
  const f = amqpFixture({ args: ['--amqp-heartbeat', '30s'] });
  // One run of the routing script serves the two tests that read it.
  let routing: Promise<Map<string, Step>> | null = null;
  const routed = () => (routing ??= pika(f.broker, 'routing'));

  it('work queue: 3 competing consumers with prefetch 2 each get messages, all acked, none twice', async () => {
    const n = 30;
    const s = await pika(f.broker, 'workqueue', 'pk.work', String(n));
    assert.equal(s.get('published')!.ready, n, 'every confirmed publish is in the queue');
    // Holding without acks: two each, the rest stays ready in the broker (prefetch respected by every consumer).
    const held = s.get('held')!;
    assert.deepEqual(held.counts, [2, 2, 2]);
    assert.equal(held.ready, n - 6);

    type Got = { body: string; redelivered: boolean };
    const consumers = s.get('consumed')!.consumers as Got[][];
    assert.equal(consumers.length, 3);
    for (const [i, c] of consumers.entries()) assert.ok(c.length >= 2, `consumer ${i} got ${c.length} messages`);
    const bodies = consumers.flat().map((g) => g.body);
    assert.equal(bodies.length, n, 'none delivered twice');
    assert.deepEqual([...bodies].sort(), Array.from({ length: n }, (_, i) => `m${i}`).sort(), 'each message once');
    assert.ok(
      consumers.flat().every((g) => !g.redelivered),
      'nothing redelivered',
    );
    // Each consumer sees its share in queue order.
    for (const c of consumers) {
      const idx = c.map((g) => Number(g.body.slice(1)));
      assert.deepEqual(
        idx,
        [...idx].sort((a, b) => a - b),
      );
    }
    // After the consumers closed, the next message is the marker: no ack was lost (an unacked message would have
    // been requeued ahead of it, redelivered).
    assert.deepEqual(s.get('after'), { step: 'after', body: 'marker', redelivered: false, remaining: 0 });
  });

  it('fanout, topic and headers exchanges route as RabbitMQ does', async () => {
    const s = await routed();
    const fan = s.get('fanout')!;
    assert.equal((fan.names as string[]).length, 3);
    for (const name of fan.names as string[]) assert.match(name, /^amq\.gen-/);
    assert.deepEqual(fan.queues, [
      ['f1', 'f2'],
      ['f1', 'f2'],
      ['f1', 'f2'],
    ]);

    const topic = s.get('topic')!;
    assert.deepEqual(topic.q1, ['quick.orange.rabbit', 'lazy.orange.elephant', 'quick.orange.fox']);
    // lazy.pink.rabbit matches both of q2's bindings and arrives once; lazy.# matches lazy (zero words).
    assert.deepEqual(topic.q2, ['quick.orange.rabbit', 'lazy.orange.elephant', 'lazy.brown.fox', 'lazy.pink.rabbit', 'lazy', 'lazy.orange.male.rabbit']);

    const headers = s.get('headers')!;
    assert.deepEqual(headers.all, ['pdf-report']);
    assert.deepEqual(headers.any, ['pdf-report', 'pdf', 'log']);
  });

  it('every content property and every header type pika writes comes back as sent', async () => {
    const p = (await routed()).get('properties')!;
    assert.deepEqual(p.body, [...Buffer.from('\x00binary\xffbody', 'latin1')]);
    assert.equal(p.exchange, '');
    const props = p.props as Record<string, unknown>;
    const ttl = Number(props.expiration);
    // pika set its own timestamp, so FlowMQ hands back the time left of the 600000 ms TTL (properties.ts), where
    // RabbitMQ would return the string as sent: at most what was sent, and a decimal string.
    assert.match(String(props.expiration), /^\d+$/);
    assert.ok(ttl > 0 && ttl <= 600_000, `expiration ${props.expiration}`);
    assert.deepEqual(
      { ...props, expiration: undefined },
      {
        content_type: 'application/json',
        content_encoding: 'identity',
        delivery_mode: 2,
        priority: 5,
        correlation_id: 'corr-7',
        reply_to: 'pk.replies',
        expiration: undefined,
        message_id: 'msg-7',
        timestamp: p.sent_ts,
        type: 'order.created',
        app_id: 'pika-e2e',
        user_id: null,
        cluster_id: null,
      },
    );
    // str, bytes, bools, 32- and 64-bit ints, decimal, timestamp, nested table, array, void: as sent.
    assert.deepEqual(p.headers, p.sent_headers);
    assert.equal(Object.keys(p.headers as object).length, 12);
  });

  it('publisher confirms: acks for routed publishes, basic.return before the ack of a mandatory unroutable one, a nack at a reject-publish limit', async () => {
    const s = await pika(f.broker, 'confirms');
    assert.deepEqual(s.get('acked'), { step: 'acked', acked: 50, ready: 50 });
    assert.deepEqual(s.get('unroutable'), {
      step: 'unroutable',
      raised: 'UnroutableError',
      reply_code: 312,
      reply_text: 'NO_ROUTE',
      exchange: 'amq.direct',
      routing_key: 'pk.nobody',
      body: 'lost',
      message_id: 'r-1',
    });
    assert.ok(s.get('unroutable-not-mandatory')!.ok);
    assert.equal(s.get('full')!.raised, 'NackError');
    assert.deepEqual(s.get('full-content'), { step: 'full-content', body: 'first', remaining: 0, channel_open: true });
  });

  it('basic.get: get-empty, message counts, nack with requeue (redelivered), reject without requeue', async () => {
    const s = await pika(f.broker, 'get');
    assert.equal(s.get('empty')!.method, null);
    assert.deepEqual(s.get('first'), { step: 'first', body: 'g0', redelivered: false, message_count: 3, tag: 1 });
    assert.deepEqual(s.get('again'), { step: 'again', body: 'g0', redelivered: true, message_count: 3, tag: 2 });
    assert.deepEqual(s.get('rest'), { step: 'rest', rejected: 'g1', rest: ['g2'], after: true });
  });

  it('a 404 closes only its channel; 406 on an inequivalent redeclare; the connection and its other channels go on', async () => {
    const s = await pika(f.broker, 'channel-error');
    assert.deepEqual(s.get('passive'), {
      step: 'passive',
      raised: 'ChannelClosedByBroker',
      code: 404,
      text: "NOT_FOUND - no queue 'pk.no-such-queue' in vhost '/'",
      channel_open: false,
      connection_open: true,
    });
    assert.deepEqual(s.get('publish'), {
      step: 'publish',
      raised: 'ChannelClosedByBroker',
      code: 404,
      text: "NOT_FOUND - no exchange 'pk.no-such-exchange' in vhost '/'",
    });
    const re = s.get('redeclare')!;
    assert.equal(re.raised, 'ChannelClosedByBroker');
    assert.equal(re.code, 406);
    assert.match(String(re.text), /^PRECONDITION_FAILED/);
    const afterStep = s.get('after')!;
    assert.equal(afterStep.connection_open, true);
    assert.deepEqual([...(afterStep.bodies as string[])].sort(), ['old channel', 'still here']);
    assert.ok(s.get('closed')!.ok, 'a clean connection.close at the end');
    // The broker logged no connection error for it.
    assert.ok(!f.broker.logs.some((l) => l.level >= 50), JSON.stringify(f.broker.logs.filter((l) => l.level >= 50)));
  });
});

describe('pika publisher confirms across kill -9', () => {
  let broker: FlowmqProcess;
  before(async () => {
    broker = await startAmqpBroker();
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
  });

  it('every message pika saw confirmed before the broker was killed is there after the restart, once, in order', async () => {
    const n = 5000;
    const proc = spawn(PYTHON, [CLIENT, 'publish', String(broker.ports.amqp), 'pk.durable', String(n)], { stdio: ['ignore', 'pipe', 'pipe'] });
    const confirmed: number[] = [];
    let broken: string | null = null;
    let stderr = '';
    proc.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
    let killed = false;
    eachLine(proc.stdout!, (line) => {
      if (!line.startsWith('{')) return;
      const s = JSON.parse(line) as Step;
      if (s.step === 'confirmed') confirmed.push(s.i as number);
      if (s.step === 'broken') broken = String(s.error);
      // Killed as soon as pika has seen 300 confirms: it is publishing the next one.
      if (!killed && confirmed.length >= 300) {
        killed = true;
        broker.proc.kill('SIGKILL');
      }
    });
    await eventually(() => killed, 30_000, `300 confirms (${confirmed.length}) ${stderr}`);
    assert.equal((await broker.stop('SIGKILL')).signal, 'SIGKILL');
    assert.equal(await exited, 0, stderr);
    assert.ok(broken !== null, 'pika saw the connection go');
    const atKill = confirmed.length;
    assert.ok(atKill < n, 'killed before the end');

    broker = await FlowmqProcess.start({ dataDir: broker.dataDir, args: broker.args });
    const r = await run(PYTHON, [CLIENT, 'drain', String(broker.ports.amqp), 'pk.durable'], { timeoutMs: 60_000 });
    assert.equal(r.code, 0, r.stderr);
    const drained = (JSON.parse(r.stdout.trim().split('\n').pop()!) as Step).messages as Array<{ body: string; message_id: string; delivery_mode: number }>;
    const ids = drained.map((m) => Number(m.body.slice(1)));
    assert.equal(new Set(ids).size, ids.length, 'none twice');
    assert.deepEqual(
      ids,
      [...ids].sort((a, b) => a - b),
      'in order',
    );
    const have = new Set(ids);
    assert.deepEqual(
      confirmed.filter((i) => !have.has(i)),
      [],
      `confirmed but lost (${atKill} confirmed, ${ids.length} recovered)`,
    );
    assert.ok(ids.every((i) => i >= 0 && i < n));
    for (const m of drained) assert.deepEqual([m.message_id, m.delivery_mode], [`id-${m.body.slice(1)}`, 2]);
  });
});
