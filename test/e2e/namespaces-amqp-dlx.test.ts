/**
 * AMQP dead-lettering in virtual hosts after a broker restart (issue 29), with amqplib against `bin/flowmq`. Three
 * vhosts (`/` of user dee, t1 of ann, t2 of bob) declare the same durable queues: `work-topic` (dead-letter exchange
 * amq.topic, no dead-letter routing key), `work-key` (amq.topic, key `dead.key`), `work-fanout` (a fanout `dlx`),
 * `work-direct` (a direct `dlxd` whose binding key is the queue's name), and the same dead-letter queues. Each puts
 * a persistent message in every work queue, the broker restarts (the queued messages come back from disk, without
 * the publisher's connection), and each rejects them: every dead letter lands in its own vhost's queues, under the
 * routing key the vhost's clients wrote, with x-death / x-first-death naming queues and exchanges as they know them;
 * markers published after prove no other vhost's same-named queue got one.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import amqp, { type ChannelModel, type ConfirmChannel, type ConsumeMessage, type GetMessage } from 'amqplib';
import { FlowmqProcess, until } from './harness.js';

const HOME = { dee: '/', ann: 't1', bob: 't2' } as const;
type User = keyof typeof HOME;
const USERS = Object.keys(HOME) as User[];
const WORK = ['work-topic', 'work-key', 'work-fanout', 'work-direct'] as const;
const DEAD = ['dead', 'dlx-q', 'dlxd-q'] as const;

/** A delivery as one line: exchange, routing key, body, and the death headers when there are any. */
function line(m: ConsumeMessage): string {
  const h = m.properties.headers ?? {};
  const deaths = (h['x-death'] as Array<Record<string, unknown>> | undefined) ?? [];
  const d = deaths.map((x) => `${String(x.reason)}:${String(x.queue)}:${String(x.exchange)}:${(x['routing-keys'] as string[]).join(',')}`);
  const first = h['x-first-death-queue'] === undefined ? '' : ` first=${String(h['x-first-death-queue'])}@${String(h['x-first-death-exchange'])}`;
  return `${m.fields.exchange}|${m.fields.routingKey}|${m.content.toString()}${d.length > 0 ? ` death=${d.join(';')}${first}` : ''}`;
}

describe('e2e: AMQP dead-lettering stays in its vhost after a restart', { timeout: 60_000 }, () => {
  let dir = '';
  let broker: FlowmqProcess;
  const conns: ChannelModel[] = [];

  async function open(u: User): Promise<ConfirmChannel> {
    const c = await amqp.connect(`amqp://${u}:${u}-pw@127.0.0.1:${broker.ports.amqp}/${encodeURIComponent(HOME[u])}?heartbeat=0`);
    c.on('error', () => undefined);
    conns.push(c);
    return c.createConfirmChannel();
  }

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-ns-dlx-'));
    writeFileSync(
      join(dir, 'users.yaml'),
      [
        'users:',
        '  - {username: dee, password: dee-pw}',
        '  - {username: ann, password: ann-pw, namespace: t1}',
        '  - {username: bob, password: bob-pw, namespace: t2}',
        'namespaces:',
        '  - {name: t1}',
        '  - {name: t2}',
        '',
      ].join('\n'),
    );
    broker = await FlowmqProcess.start({ args: ['--protocols', 'mqtt,kafka,amqp', '--users-file', join(dir, 'users.yaml')] });
  });

  after(async () => {
    for (const c of conns) await c.close().catch(() => undefined);
    await broker?.stop();
    broker?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  test('rejected after a restart: dead letters reach their own vhost, named as it knows them', async () => {
    for (const u of USERS) {
      const ch = await open(u);
      await ch.assertExchange('dlx', 'fanout', { durable: true });
      await ch.assertExchange('dlxd', 'direct', { durable: true });
      for (const q of DEAD) await ch.assertQueue(q, { durable: true });
      await ch.bindQueue('dead', 'amq.topic', '#');
      await ch.bindQueue('dlx-q', 'dlx', '');
      await ch.bindQueue('dlxd-q', 'dlxd', 'work-direct');
      await ch.assertQueue('work-topic', { durable: true, deadLetterExchange: 'amq.topic' });
      await ch.assertQueue('work-key', { durable: true, deadLetterExchange: 'amq.topic', deadLetterRoutingKey: 'dead.key' });
      await ch.assertQueue('work-fanout', { durable: true, deadLetterExchange: 'dlx' });
      await ch.assertQueue('work-direct', { durable: true, deadLetterExchange: 'dlxd' });
      for (const q of WORK) ch.sendToQueue(q, Buffer.from(`${u}-${q}`), { persistent: true });
      await ch.waitForConfirms();
    }
    for (const c of conns.splice(0)) await c.close().catch(() => undefined);
    broker = await broker.restart();

    const got = new Map<string, string[]>();
    const chans = new Map<User, ConfirmChannel>();
    for (const u of USERS) {
      const ch = await open(u);
      chans.set(u, ch);
      for (const q of DEAD) {
        const seen: string[] = [];
        got.set(`${u}:${q}`, seen);
        // `/`'s `#` also gets the broker's $SYS statistics (AMQP's `#` matches `$` topics other than `$ns`).
        await ch.consume(q, (m) => m !== null && !m.fields.routingKey.startsWith('$SYS.') && seen.push(line(m)), { noAck: true });
      }
    }
    for (const u of USERS) {
      const ch = chans.get(u)!;
      for (const q of WORK) {
        let m: false | GetMessage = false;
        for (const deadline = Date.now() + 5000; m === false && Date.now() < deadline;) m = await ch.get(q);
        assert.ok(m !== false, `${u}: ${q} kept its message over the restart`);
        assert.equal(m.content.toString(), `${u}-${q}`);
        ch.nack(m, false, false);
      }
    }
    const deaths = (q: string) => `death=rejected:${q}::${q} first=${q}@`;
    const expect = (u: User) => ({
      dead: [`amq.topic|work-topic|${u}-work-topic ${deaths('work-topic')}`, `amq.topic|dead.key|${u}-work-key ${deaths('work-key')}`],
      'dlx-q': [`dlx|work-fanout|${u}-work-fanout ${deaths('work-fanout')}`],
      'dlxd-q': [`dlxd|work-direct|${u}-work-direct ${deaths('work-direct')}`],
    });
    for (const u of USERS) {
      for (const q of DEAD) await until(() => assert.deepEqual(got.get(`${u}:${q}`)!.slice().sort(), expect(u)[q].slice().sort(), `${u}:${q}`));
    }
    // Every dead letter was routed at once when its reject was handled; markers published now come after them.
    for (const u of USERS) {
      const ch = chans.get(u)!;
      ch.publish('amq.topic', 'marker', Buffer.from(`m-${u}`));
      ch.publish('dlx', '', Buffer.from(`m-${u}`));
      ch.publish('dlxd', 'work-direct', Buffer.from(`m-${u}`));
      await ch.waitForConfirms();
    }
    for (const u of USERS) {
      const e = expect(u);
      await until(() => {
        assert.deepEqual(got.get(`${u}:dead`)!.slice().sort(), [...e.dead, `amq.topic|marker|m-${u}`].sort(), `${u}:dead`);
        assert.deepEqual(got.get(`${u}:dlx-q`)!.slice().sort(), [...e['dlx-q'], `dlx||m-${u}`].sort(), `${u}:dlx-q`);
        assert.deepEqual(got.get(`${u}:dlxd-q`)!.slice().sort(), [...e['dlxd-q'], `dlxd|work-direct|m-${u}`].sort(), `${u}:dlxd-q`);
      });
    }
  });
});
