/**
 * The `flowmq` CLI end to end: the real bin/flowmq broker and the real CLI, through the admin API: bin/flowmq as a
 * child process per command for the bootstrap, the credentials and the exit codes of usage errors and an unreachable
 * broker, and the other commands in one CLI process that runs them one after another (cli-runner.ts: the CLI's
 * main with each command's own environment and output, as bin/flowmq calls it; ~70 Node start-ups less). Identities (bootstrap, users, groups, tokens, login), policies refusing a non-admin, namespaces
 * and quotas, streams with the message browser, queues, MQTT sessions and retained messages, status, log level,
 * and the exit codes (0 ok, 1 refused by the broker, 2 usage).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import mqtt from 'mqtt';
import amqp from 'amqplib';
import kafkajsPkg from 'kafkajs';
import { eventually, FLOWMQ_BIN, FlowmqProcess, run, type RunResult } from './harness.js';
import { CliRunner } from './cli-runner.js';

const { Kafka, logLevel } = kafkajsPkg;
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';

describe('e2e: flowmq CLI', () => {
  let broker: FlowmqProcess;
  let dir: string;
  const alice = { FLOWMQ_USER: 'alice', FLOWMQ_PASSWORD: 'wonder-land' };
  const bob = { FLOWMQ_USER: 'bob', FLOWMQ_PASSWORD: 'builder-1' };
  const json = <T = unknown>(s: string): T => JSON.parse(s) as T;
  let runner: CliRunner;
  /** A command against this broker in the shared CLI process (broker.cli runs one as its own process). */
  const cli = (args: string[], env: NodeJS.ProcessEnv = {}): Promise<RunResult> => runner.run([...args, '--server', broker.http], env);

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-cli-e2e-'));
    // No KIP-134 initial rebalance delay: the Kafka groups here have one member; 3 s per group proves nothing.
    broker = await FlowmqProcess.start({ args: ['--kafka-group-initial-rebalance-delay', '0'] });
    runner = CliRunner.start();
  });
  after(async () => {
    runner?.close();
    await broker?.stop();
    broker?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it('bootstraps the first admin from loopback, then requires credentials', async () => {
    const added = await broker.cli(['user', 'add', 'alice', '--group', 'admins'], { FLOWMQ_NEW_PASSWORD: alice.FLOWMQ_PASSWORD });
    assert.equal(added.code, 0, added.stderr);
    assert.match(added.stdout, /added user alice \(groups: admins; namespace default\)/);

    const anon = await broker.cli(['user', 'list']);
    assert.equal(anon.code, 1);
    assert.match(anon.stderr, /^flowmq: the broker at http:\/\/127\.0\.0\.1:\d+ requires a user: pass --user NAME .*--token/);

    const wrong = await broker.cli(['user', 'list'], { ...alice, FLOWMQ_PASSWORD: 'nope' });
    assert.equal(wrong.code, 1);
    assert.match(wrong.stderr, /refused user "alice": invalid username or password/);

    const list = await broker.cli(['user', 'list'], alice);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, /^USER\s+GROUPS\s+NAMESPACE/m);
    assert.match(list.stdout, /^alice\s+admins\s+default\s+api\s/m);
    const asJson = await broker.cli(['user', 'list', '--json'], alice);
    assert.deepEqual(
      json<Array<{ username: string; groups: string[] }>>(asJson.stdout).map((u) => [u.username, u.groups]),
      [['alice', ['admins']]],
    );
  });

  it('manages users and groups: add, set-groups, passwd (the old password stops working), delete', async () => {
    assert.equal((await cli(['group', 'add', 'ops', '--description', 'operators'], alice)).code, 0);
    const bobAdded = await cli(['user', 'add', 'bob'], { ...alice, FLOWMQ_NEW_PASSWORD: 'first-pass' });
    assert.equal(bobAdded.code, 0, bobAdded.stderr);
    const set = await cli(['user', 'set-groups', 'bob', 'ops'], alice);
    assert.equal(set.code, 0, set.stderr);
    assert.match(set.stdout, /bob \(groups: ops;/);
    const groups = await cli(['group', 'list'], alice);
    assert.match(groups.stdout, /^ops\s+bob\s+operators/m);

    const pw = await cli(['user', 'passwd', 'bob'], { ...alice, FLOWMQ_NEW_PASSWORD: bob.FLOWMQ_PASSWORD });
    assert.equal(pw.code, 0, pw.stderr);
    assert.match(pw.stdout, /changed the password of bob/);
    const old = await cli(['stream', 'list'], { ...bob, FLOWMQ_PASSWORD: 'first-pass' });
    assert.equal(old.code, 1);
    assert.match(old.stderr, /refused user "bob"/);

    // Without a terminal the new password must come from the environment: a usage error, nothing sent.
    const noPw = await cli(['user', 'add', 'carol'], alice);
    assert.equal(noPw.code, 2);
    assert.match(noPw.stderr, /FLOWMQ_NEW_PASSWORD/);
    const scratch = await cli(['user', 'add', 'scratch'], { ...alice, FLOWMQ_NEW_PASSWORD: 'x-pass' });
    assert.equal(scratch.code, 0, scratch.stderr);
    const del = await cli(['user', 'delete', 'scratch'], alice);
    assert.equal(del.code, 0, del.stderr);
    assert.doesNotMatch((await cli(['user', 'list'], alice)).stdout, /scratch/);
  });

  it('logs in with a token (printed as an export line), uses it, lists and revokes it', async () => {
    const login = await cli(['login', '--user', 'alice', '--ttl', '1h'], { FLOWMQ_PASSWORD: alice.FLOWMQ_PASSWORD });
    assert.equal(login.code, 0, login.stderr);
    const m = /^export FLOWMQ_TOKEN=(fmq_\S+)$/m.exec(login.stdout);
    assert.ok(m, login.stdout);
    assert.equal(login.stdout.trim().split('\n').length, 1, 'stdout holds the export line only');
    const token = m[1];
    const listed = await cli(['token', 'list', '--json'], { FLOWMQ_TOKEN: token });
    assert.equal(listed.code, 0, listed.stderr);
    const tokens = json<Array<{ id: string; user: string; description: string }>>(listed.stdout);
    const mine = tokens.find((t) => token.startsWith(`fmq_${t.id}.`));
    assert.ok(mine, listed.stdout);
    assert.equal(mine.user, 'alice');
    assert.equal(mine.description, 'flowmq login');

    const created = await cli(['token', 'create', '--description', 'ci', '--ttl', '2h'], { FLOWMQ_TOKEN: token });
    assert.equal(created.code, 0, created.stderr);
    assert.match(created.stdout, /created token \S+ for alice, expires /);
    assert.match(created.stdout, /^\s+fmq_\S+$/m);

    const revoked = await cli(['token', 'delete', mine.id], alice);
    assert.equal(revoked.code, 0, revoked.stderr);
    const after = await cli(['token', 'list'], { FLOWMQ_TOKEN: token });
    assert.equal(after.code, 1);
    assert.match(after.stderr, /refused the API token/);
  });

  it("adds policies from flags and from a file; a non-admin gets the broker's refusal, exit code 1", async () => {
    const add = await cli(
      ['policy', 'add', 'ops-read', '--allow', '--action', 'describe', '--resource', 'stream:*', '--principal', 'group:ops', '--description', 'ops may look'],
      alice,
    );
    assert.equal(add.code, 0, add.stderr);
    assert.match(add.stdout, /added policy ops-read: allow describe on stream:\* to group:ops/);
    const shown = await cli(['policy', 'show', 'ops-read', '--json'], alice);
    const file = join(dir, 'policy.json');
    writeFileSync(file, shown.stdout);
    const fromFile = await cli(['policy', 'add', 'ops-read-copy', '--file', file], alice);
    assert.equal(fromFile.code, 0, fromFile.stderr);
    const list = await cli(['policy', 'list'], alice);
    assert.match(list.stdout, /^NAME\s+NAMESPACE\s+EFFECT\s+ACTIONS\s+RESOURCES\s+PRINCIPALS\s+SOURCE$/m);
    assert.match(list.stdout, /^ops-read\s+\*\s+allow\s+describe\s+stream:\*\s+group:ops\s+api$/m, 'unscoped: every namespace');
    assert.match(list.stdout, /^ops-read-copy\s+\*\s+allow\s+describe\s+stream:\*\s+group:ops/m);
    const replaced = await cli(
      ['policy', 'add', 'ops-read-copy', '--replace', '--deny', '--action', 'publish', '--resource', 'topic:x/#', '--principal', 'everyone'],
      alice,
    );
    assert.equal(replaced.code, 0, replaced.stderr);
    assert.match(replaced.stdout, /saved policy ops-read-copy: deny publish on topic:x\/# to everyone/);
    assert.equal((await cli(['policy', 'delete', 'ops-read-copy'], alice)).code, 0);

    assert.equal((await cli(['stream', 'create', 'audit', '--bind', 'audit/#'], alice)).code, 0);
    const bobList = await cli(['stream', 'list'], bob);
    assert.equal(bobList.code, 0, bobList.stderr);
    assert.match(bobList.stdout, /^audit\s+1\s/m);
    const bobCreate = await cli(['stream', 'create', 'mine'], bob);
    assert.equal(bobCreate.code, 1);
    assert.match(bobCreate.stderr, /^flowmq: .+ \(FORBIDDEN\)\n$/);
    const bobUsers = await cli(['user', 'list'], bob);
    assert.equal(bobUsers.code, 1);
    assert.match(bobUsers.stderr, /\(FORBIDDEN\)/);
  });

  it('adds namespaces with quotas and changes them live; "none" lifts one', async () => {
    const add = await cli(['namespace', 'add', 'team-a', '--max-connections', '5', '--bytes-in-rate', '1MiB'], alice);
    assert.equal(add.code, 0, add.stderr);
    assert.match(add.stdout, /added namespace team-a \(quotas: 5 conn, in 1MiB\/s\)/);
    const set = await cli(['namespace', 'set-quota', 'team-a', '--max-connections', 'none', '--publish-rate', '100'], alice);
    assert.equal(set.code, 0, set.stderr);
    const ns = json<{ quotas: Record<string, number> }>((await cli(['namespace', 'describe', 'team-a', '--json'], alice)).stdout);
    assert.deepEqual(ns.quotas, { bytesInRate: 1024 * 1024, publishRate: 100 });
    const list = await cli(['ns', 'list'], alice);
    assert.match(list.stdout, /^team-a\s+100 msg\/s, in 1MiB\/s\s+0/m);
    const usage = await cli(['namespace', 'usage', 'team-a'], alice);
    assert.equal(usage.code, 0, usage.stderr);
    assert.match(usage.stdout, /messages in \/ out:\s+0 \/ 0/);
    assert.match(usage.stdout, /storage quota:\s+none/);
    const u = json<{ name: string; storedBytes: number; maxStorageBytes: null }>((await cli(['namespace', 'usage', 'team-a', '--json'], alice)).stdout);
    assert.deepEqual([u.name, u.storedBytes, u.maxStorageBytes], ['team-a', 0, null]);
    const bad = await cli(['namespace', 'set-quota', 'team-a', '--bytes-in-rate', 'lots'], alice);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--bytes-in-rate must be a whole number of bytes/);
  });

  it('creates, updates and browses a stream fed by MQTT publishes', async () => {
    const created = await cli(['stream', 'create', 'orders', '--partitions', '2', '--bind', 'orders/#', '--retention', '7d'], alice);
    assert.equal(created.code, 0, created.stderr);
    const client = await mqtt.connectAsync(broker.mqttUrl, { username: 'alice', password: alice.FLOWMQ_PASSWORD, reconnectPeriod: 0 });
    try {
      for (let i = 0; i < 3; i++) await client.publishAsync('orders/eu', `order ${i}`, { qos: 1 });
    } finally {
      await client.endAsync();
    }
    // One publisher's messages without a key land on one partition: browse both, find three.
    const rows: string[] = [];
    for (const p of ['0', '1']) {
      const r = await cli(['stream', 'browse', 'orders', '--partition', p], alice);
      assert.equal(r.code, 0, r.stderr);
      rows.push(...r.stdout.split('\n').filter((l) => /order \d$/.test(l)));
    }
    assert.deepEqual(rows.map((l) => l.replace(/^.*(order \d)$/, '$1')).sort(), ['order 0', 'order 1', 'order 2']);
    const one = await cli(['stream', 'browse', 'orders', '--partition', '0', '--limit', '1', '--json'], alice);
    const p0 = json<{ items: unknown[] }>(one.stdout).items.length;
    assert.ok(p0 <= 1);

    const upd = await cli(
      ['stream', 'update', 'orders', '--partitions', '3', '--retention', 'forever', '--bind', 'orders/#', '--bind', 'legacy/orders'],
      alice,
    );
    assert.equal(upd.code, 0, upd.stderr);
    assert.match(upd.stdout, /updated stream orders: 3 partition\(s\), bound to orders\/#, legacy\/orders, retention forever/);
    const described = await cli(['stream', 'describe', 'orders'], alice);
    assert.match(described.stdout, /^partitions:\s+3$/m);
    assert.match(described.stdout, /HIGHWATERMARK/);
    const nothing = await cli(['stream', 'update', 'orders'], alice);
    assert.equal(nothing.code, 2);
    assert.match(nothing.stderr, /nothing to change/);
    const missing = await cli(['stream', 'describe', 'nope'], alice);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /\(NOT_FOUND\)/);
  });

  it('lists, purges and deletes a queue filled over AMQP; lists exchanges', async () => {
    const conn = await amqp.connect(`amqp://alice:${alice.FLOWMQ_PASSWORD}@127.0.0.1:${broker.ports.amqp}`);
    try {
      const ch = await conn.createChannel();
      await ch.assertQueue('jobs', { durable: true });
      for (let i = 0; i < 3; i++) ch.sendToQueue('jobs', Buffer.from(`job ${i}`), { persistent: true });
      await ch.close();
    } finally {
      await conn.close();
    }
    const list = await cli(['queue', 'list'], alice);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, /^jobs\s+yes\s+3\s+0\s+0$/m);
    const purge = await cli(['queue', 'purge', 'jobs'], alice);
    assert.equal(purge.code, 0, purge.stderr);
    assert.match(purge.stdout, /purged queue jobs: 3 message\(s\)/);
    assert.equal((await cli(['queue', 'delete', 'jobs'], alice)).code, 0);
    assert.match((await cli(['queue', 'list'], alice)).stdout, /no queues/);
    const xs = await cli(['exchange', 'list'], alice);
    assert.match(xs.stdout, /^amq\.topic\s+topic\s+yes/m);
  });

  it('lists and deletes MQTT sessions and retained messages', async () => {
    const c = await mqtt.connectAsync(broker.mqttUrl, {
      clientId: 'keeper',
      clean: false,
      username: 'alice',
      password: alice.FLOWMQ_PASSWORD,
      reconnectPeriod: 0,
    });
    await c.subscribeAsync('x/#', { qos: 1 });
    await c.publishAsync('sensors/t1', '21.5', { retain: true, qos: 1 });
    await c.endAsync();
    const sessions = await cli(['session', 'list'], alice);
    assert.equal(sessions.code, 0, sessions.stderr);
    assert.match(sessions.stdout, /^keeper\s+no\s+x\/#\(1\)/m);
    assert.equal((await cli(['session', 'delete', 'keeper'], alice)).code, 0);
    assert.match((await cli(['session', 'list'], alice)).stdout, /no MQTT sessions/);

    const retained = await cli(['retained', 'list', '--filter', 'sensors/#'], alice);
    assert.match(retained.stdout, /^sensors\/t1\s+1\s+4B\s+\S+\s+21\.5$/m);
    assert.equal((await cli(['retained', 'delete', 'sensors/t1'], alice)).code, 0);
    assert.match((await cli(['retained', 'list'], alice)).stdout, /no retained messages/);
  });

  it('lists, describes, resets (with a progress line) and deletes a Kafka consumer group', async () => {
    assert.equal((await cli(['stream', 'create', 'events', '--partitions', '2'], alice)).code, 0);
    const kafka = new Kafka({
      brokers: [broker.kafka],
      clientId: 'cli-e2e',
      logLevel: logLevel.NOTHING,
      sasl: { mechanism: 'plain', username: 'alice', password: alice.FLOWMQ_PASSWORD },
      retry: { retries: 8, initialRetryTime: 100 },
    });
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({ topic: 'events', messages: Array.from({ length: 10 }, (_, i) => ({ key: `k${i}`, value: `e${i}` })) });
    await producer.disconnect();
    const consumer = kafka.consumer({ groupId: 'readers', sessionTimeout: 10_000, heartbeatInterval: 300, maxWaitTimeInMs: 200 });
    let read = 0;
    await consumer.connect();
    await consumer.subscribe({ topics: ['events'], fromBeginning: true });
    await consumer.run({ autoCommitInterval: 50, eachMessage: async () => void read++ });
    try {
      await eventually(() => read === 10, 20_000, 'the group read every message');
      // A member is connected: the group shows it, and a reset is refused (the group must be empty).
      await eventually(
        async () => /^readers\s+kafka\s+Stable\s+1\s+0$/m.test((await cli(['consumer-group', 'list'], alice)).stdout),
        20_000,
        'a stable group with lag 0',
      );
      const busy = await cli(['consumer-group', 'reset', 'readers', '--to', 'earliest'], alice);
      assert.equal(busy.code, 1);
      assert.match(busy.stderr, /\(INVALID_ARGUMENT\)/);
    } finally {
      await consumer.disconnect();
    }
    const reset = await cli(['consumer-group', 'reset', 'readers', '--to', 'earliest'], alice);
    assert.equal(reset.code, 0, reset.stderr);
    // Not a terminal: no redrawn bar, only the final line.
    assert.equal(reset.stderr, 'resetting readers [##############################] 1/1 stream(s)\n');
    assert.match(reset.stdout, /^events\s+0\s+0\s+\d+\s+\d+$/m);
    const described = json<{ lag: number; offsets: Array<{ stream: string; committed: number }> }>(
      (await cli(['consumer-group', 'describe', 'readers', '--json'], alice)).stdout,
    );
    assert.equal(described.lag, 10);
    assert.deepEqual(
      described.offsets.map((o) => [o.stream, o.committed]),
      [
        ['events', 0],
        ['events', 0],
      ],
    );
    const toOffset = await cli(['consumer-group', 'reset', 'readers', '--stream', 'events', '--offset', '2', '--json'], alice);
    assert.equal(toOffset.code, 0, toOffset.stderr);
    assert.equal(toOffset.stderr, '', 'no progress line with --json');
    assert.ok(json<{ offsets: Array<{ committed: number }> }>(toOffset.stdout).offsets.every((o) => o.committed === 2));
    assert.equal((await cli(['consumer-group', 'delete', 'readers'], alice)).code, 0);
    assert.match((await cli(['consumer-group', 'list'], alice)).stdout, /no consumer groups/);
  });

  it('lists connected clients with filters and kicks one', async () => {
    const c = await mqtt.connectAsync(broker.mqttUrl, {
      clientId: 'kick-me',
      protocolVersion: 5,
      username: 'alice',
      password: alice.FLOWMQ_PASSWORD,
      reconnectPeriod: 0,
    });
    const closed = new Promise<number | undefined>((resolve) => c.on('disconnect', (p) => resolve(p.reasonCode)));
    try {
      const list = await cli(['client', 'list', '--protocol', 'mqtt', '--for-user', 'alice'], alice);
      assert.equal(list.code, 0, list.stderr);
      const row = list.stdout.split('\n').find((l) => /\skick-me\s/.test(l));
      assert.ok(row, list.stdout);
      assert.match(row, /^(\S+)\s+mqtt\s+alice\s+default\s+kick-me\s+127\.0\.0\.1:\d+\s/);
      const none = await cli(['client', 'list', '--protocol', 'kafka'], alice);
      assert.match(none.stdout, /no clients connected/);
      const id = row.split(/\s+/)[0];
      const kick = await cli(['client', 'kick', id], alice);
      assert.equal(kick.code, 0, kick.stderr);
      assert.equal(await closed, 0x98, 'MQTT v5 DISCONNECT with Administrative action');
      const again = await cli(['client', 'kick', id], alice);
      assert.equal(again.code, 1);
      assert.match(again.stderr, /\(NOT_FOUND\)/);
    } finally {
      c.end(true);
    }
  });

  it('shows status, and reads and sets the log level at run time', async () => {
    const status = await cli(['status'], alice);
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, /^ready:\s+yes$/m);
    assert.match(status.stdout, /^mqtt\s+127\.0\.0\.1:\d+\s+\d+$/m);
    assert.equal((await cli(['log-level', 'debug'], alice)).code, 0);
    assert.match((await cli(['log-level'], alice)).stdout, /log level: debug/);
    assert.equal((await cli(['log-level', 'info'], alice)).code, 0);
    const bad = await cli(['log-level', 'loud'], alice);
    assert.equal(bad.code, 2);
  });

  it('answers usage errors with exit code 2 before asking the broker anything', async () => {
    for (const args of [
      ['nope'],
      ['stream', 'create'],
      ['stream', 'create', 'x', '--partitions', '0'],
      ['policy', 'add', 'p', '--allow'],
      ['user', 'list', '--bogus'],
      ['consumer-group', 'reset', 'g'],
    ]) {
      const r = await broker.cli(args, alice);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, /^flowmq: /);
    }
    // The server flag is checked too, and an unreachable broker is an operation failure (1), said plainly.
    const unreachable = await run(process.execPath, [FLOWMQ_BIN, 'stream', 'list', '--server', 'http://127.0.0.1:1'], { env: alice });
    assert.equal(unreachable.code, 1);
    assert.match(unreachable.stderr, /cannot reach the broker at http:\/\/127\.0\.0\.1:1/);
  });
});
