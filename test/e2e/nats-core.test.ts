/**
 * Core NATS against a real `flowmq start` process with the `nats` npm client (2.29): wildcards, queue groups,
 * request/reply and no-responders, headers, drain, echo off, UNSUB with max, max payload, a slow consumer closed
 * while the others keep working, and authentication failures (users file, token).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, headers as natsHeaders, StringCodec, type NatsConnection, type Subscription } from 'nats';
import { FlowmqProcess } from './harness.js';

const sc = StringCodec();

/** Collects the subjects and payloads a subscription receives until `n` arrived. */
async function take(sub: Subscription, n: number): Promise<string[]> {
  const out: string[] = [];
  if (n === 0) return out;
  for await (const m of sub) {
    out.push(`${m.subject}=${sc.decode(m.data)}`);
    if (out.length >= n) break;
  }
  return out;
}

/** Waits until `cond` holds (a safety net of 10 s, not a timing assertion). */
async function until(cond: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('NATS core with the nats client', () => {
  let broker: FlowmqProcess;
  const conns: NatsConnection[] = [];
  const open = async (opts: Record<string, unknown> = {}) => {
    const nc = await connect({ servers: broker.natsServer, ...opts });
    conns.push(nc);
    return nc;
  };

  before(async () => {
    broker = await FlowmqProcess.start({ args: ['--nats-max-pending', '262144', '--nats-max-payload', '65536'] });
  });
  after(async () => {
    await Promise.allSettled(conns.map((c) => c.close()));
    await broker.stop();
  });

  it("INFO names nats-server 2.9.10 with headers and FlowMQ's own version", async () => {
    const nc = await open();
    const info = nc.info!;
    assert.equal(info.version, '2.9.10');
    assert.equal(info.proto, 1);
    assert.equal(info.headers, true);
    assert.equal(info.max_payload, 65536);
    assert.match(String((info as unknown as Record<string, unknown>).flowmq_version), /^\d+\.\d+\.\d+/);
    assert.match(info.server_id, /^N[A-Z2-7]{55}$/);
  });

  it('wildcards: `*` one token, `>` one or more (a.> does not match a), exact subjects', async () => {
    const nc = await open();
    const star = nc.subscribe('w.*');
    const rest = nc.subscribe('w.>');
    const exact = nc.subscribe('w.b.c');
    await nc.flush();
    const pub = await open();
    for (const s of ['w', 'w.b', 'w.b.c', 'x.b', 'w.end']) pub.publish(s, sc.encode(s));
    assert.deepEqual(await take(star, 2), ['w.b=w.b', 'w.end=w.end']);
    assert.deepEqual(await take(rest, 3), ['w.b=w.b', 'w.b.c=w.b.c', 'w.end=w.end']);
    assert.deepEqual(await take(exact, 1), ['w.b.c=w.b.c']);
  });

  it('a `/` inside a token survives the round trip through unified topics', async () => {
    const nc = await open();
    const sub = nc.subscribe('slash.*');
    await nc.flush();
    nc.publish('slash.a/b', sc.encode('x'));
    assert.deepEqual(await take(sub, 1), ['slash.a/b=x']);
  });

  it('a queue group of 3 shares the messages: each once, every member some', async () => {
    const pub = await open();
    const members = await Promise.all([open(), open(), open()]);
    const counts = [0, 0, 0];
    const seen = new Set<string>();
    const plain = members[0]!.subscribe('q.work');
    let plainCount = 0;
    void (async () => {
      for await (const _m of plain) plainCount++;
    })();
    members.forEach((nc, i) =>
      nc.subscribe('q.*', {
        queue: 'workers',
        callback: (_e, m) => {
          counts[i]!++;
          seen.add(sc.decode(m.data));
        },
      }),
    );
    await Promise.all(members.map((m) => m.flush()));
    const N = 300;
    for (let i = 0; i < N; i++) pub.publish('q.work', sc.encode(String(i)));
    await pub.flush();
    await until(() => seen.size === N && plainCount === N, 'all queue deliveries');
    assert.equal(counts[0]! + counts[1]! + counts[2]!, N, 'each message to one member only');
    for (const c of counts) assert.ok(c > 0, `every member got some: ${counts}`);
  });

  it('request/reply, and no-responders (503) when nobody listens', async () => {
    const svc = await open();
    svc.subscribe('svc.echo', { callback: (_e, m) => m.respond(sc.encode(`re:${sc.decode(m.data)}`)) });
    await svc.flush();
    const nc = await open();
    const r = await nc.request('svc.echo', sc.encode('hi'), { timeout: 5000 });
    assert.equal(sc.decode(r.data), 're:hi');
    await assert.rejects(nc.request('svc.nobody', sc.encode('x'), { timeout: 5000 }), (e: Error & { code?: string }) => e.code === '503');
  });

  it('headers round trip (multi-valued, case kept) with HPUB/HMSG', async () => {
    const nc = await open();
    const sub = nc.subscribe('h.x', { max: 1 });
    await nc.flush();
    const h = natsHeaders();
    h.append('X-One', 'a');
    h.append('X-One', 'b');
    h.append('Trace', 'τ');
    nc.publish('h.x', sc.encode('body'), { headers: h });
    for await (const m of sub) {
      assert.equal(sc.decode(m.data), 'body');
      assert.deepEqual(m.headers?.values('X-One'), ['a', 'b']);
      assert.equal(m.headers?.get('Trace'), 'τ');
    }
  });

  it('echo off: a connection does not get its own publishes, others do', async () => {
    const quiet = await open({ noEcho: true });
    const other = await open();
    const mine = quiet.subscribe('echo.t');
    const theirs = other.subscribe('echo.t', { max: 2 });
    await quiet.flush();
    await other.flush();
    quiet.publish('echo.t', sc.encode('from-quiet'));
    other.publish('echo.t', sc.encode('from-other'));
    assert.deepEqual(await take(mine, 1), ['echo.t=from-other']);
    assert.deepEqual((await take(theirs, 2)).sort(), ['echo.t=from-other', 'echo.t=from-quiet']);
  });

  it('UNSUB with max: the subscription ends after that many messages', async () => {
    const nc = await open();
    const sub = nc.subscribe('max.t', { max: 3 });
    const marker = nc.subscribe('max.t');
    await nc.flush();
    for (let i = 0; i < 6; i++) nc.publish('max.t', sc.encode(String(i)));
    assert.deepEqual(await take(sub, 10), ['max.t=0', 'max.t=1', 'max.t=2']);
    assert.equal((await take(marker, 6)).length, 6);
    assert.equal(sub.getReceived(), 3);
  });

  it('drain: pending messages are delivered, then the connection closes', async () => {
    const nc = await open();
    const got: string[] = [];
    nc.subscribe('drain.t', { callback: (_e, m) => got.push(sc.decode(m.data)) });
    await nc.flush();
    const pub = await open();
    for (let i = 0; i < 50; i++) pub.publish('drain.t', sc.encode(String(i)));
    await pub.flush();
    await until(() => got.length === 50, 'deliveries before drain');
    await nc.drain();
    assert.ok(nc.isClosed());
  });

  it('a payload above max_payload is refused with the violation; the connection is closed', async () => {
    const raw = tcpConnect(broker.natsPort, '127.0.0.1');
    let text = '';
    raw.on('data', (b: Buffer) => (text += b.toString('latin1')));
    const closed = new Promise<void>((r) => raw.on('close', () => r()));
    raw.write('CONNECT {"verbose":false}\r\nPUB big 65537\r\n');
    await closed;
    assert.match(text, /-ERR 'Maximum Payload Violation'/);
    // The client library refuses it before sending, on the INFO's max_payload.
    const nc = await open();
    assert.throws(() => nc.publish('big', new Uint8Array(65537)), /MAX_PAYLOAD|payload/i);
  });

  it('a slow consumer is closed ("Slow Consumer Detected") while the other subscribers keep getting everything', async () => {
    // A raw subscriber that never reads: its pending bytes pass --nats-max-pending (256 KiB).
    const slow = tcpConnect(broker.natsPort, '127.0.0.1');
    await new Promise<void>((r) => slow.once('connect', () => r()));
    slow.write('CONNECT {"verbose":false}\r\nSUB slow.t 1\r\nPING\r\n');
    await new Promise<void>((r) => slow.once('data', () => r()));
    slow.pause();
    const good = await open();
    let got = 0;
    good.subscribe('slow.t', { callback: () => got++ });
    await good.flush();
    const pub = await open();
    const payload = new Uint8Array(8 * 1024);
    const before = broker.logs.length;
    let sent = 0;
    // Until the broker says so (a socket's buffers hold a few MB at most: this ends), plus a last batch.
    while (!broker.logs.slice(before).some((l) => l.msg === 'Slow Consumer Detected')) {
      for (let i = 0; i < 64; i++) pub.publish('slow.t', payload);
      sent += 64;
      await pub.flush();
      assert.ok(sent < 100_000, 'the slow consumer was not detected');
    }
    for (let i = 0; i < 64; i++) pub.publish('slow.t', payload);
    sent += 64;
    await pub.flush();
    await until(() => got === sent, `the good subscriber's ${sent} messages`);
    const figures = await broker.api<{ protocols?: Record<string, Record<string, unknown>> } & Record<string, unknown>>('GET', '/api/v1/broker');
    assert.match(JSON.stringify(figures), /"slowConsumers":[1-9]/);
    slow.destroy();
  });
});

describe('NATS authentication', () => {
  let broker: FlowmqProcess;
  let dir: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-nats-auth-'));
    writeFileSync(join(dir, 'users.yaml'), '- username: alice\n  password: wonderland\n');
    broker = await FlowmqProcess.start({ args: ['--users-file', join(dir, 'users.yaml'), '--nats-token', 's3cret'] });
  });
  after(async () => {
    await broker.stop();
  });

  it('user/pass from the users file: right ones get in, wrong ones get Authorization Violation', async () => {
    const nc = await connect({ servers: broker.natsServer, user: 'alice', pass: 'wonderland' });
    const sub = nc.subscribe('auth.t', { max: 1 });
    nc.publish('auth.t', sc.encode('ok'));
    assert.deepEqual(await take(sub, 1), ['auth.t=ok']);
    await nc.close();
    await assert.rejects(
      connect({ servers: broker.natsServer, user: 'alice', pass: 'nope', reconnect: false }),
      (e: Error & { code?: string }) => e.code === 'AUTHORIZATION_VIOLATION',
    );
    await assert.rejects(connect({ servers: broker.natsServer, reconnect: false }), (e: Error & { code?: string }) => e.code === 'AUTHORIZATION_VIOLATION');
  });

  it('SIGHUP reloads the users file (as nats-server reloads its config): the broker lives on, and a subscription whose permission went gets the Permissions Violation', async () => {
    const file = join(dir, 'users.yaml');
    const write = (deny: string | null) =>
      writeFileSync(
        file,
        'users:\n  - {username: alice, password: wonderland}\n  - {username: bob, password: builder}\npolicies:\n' +
          '  - {name: alice-all, effect: allow, actions: [publish, subscribe], resources: ["topic:#"], principals: ["user:alice", "user:bob"]}\n' +
          (deny === null ? '' : `  - {name: alice-deny, effect: deny, actions: [subscribe], resources: ["${deny}"], principals: ["user:alice"]}\n`),
      );
    const reloads = () => broker.logs.filter((l) => l.msg === 'configuration reloaded').length;
    const hup = async () => {
      const before = reloads();
      broker.proc.kill('SIGHUP');
      await until(() => reloads() > before, 'the reload');
    };
    write(null);
    await hup();
    // bob, new in the file, logs in.
    await (await connect({ servers: broker.natsServer, user: 'bob', pass: 'builder', reconnect: false })).close();
    const nc = await connect({ servers: broker.natsServer, user: 'alice', pass: 'wonderland', reconnect: false });
    const errors: string[] = [];
    const watch = (subject: string) => {
      const got: string[] = [];
      nc.subscribe(subject, { callback: (err, m) => (err ? errors.push(err.message) : got.push(sc.decode(m.data))) });
      return got;
    };
    const secret = watch('secret.x');
    const open = watch('open.x');
    await nc.flush();
    // A policy added (secret/# denied): the secret.x subscription ends, open.x goes on.
    write('topic:secret/#');
    await hup();
    await until(() => errors.length === 1, 'the violation');
    assert.match(errors[0]!, /Permissions Violation for Subscription to "secret\.x"/);
    nc.publish('secret.x', sc.encode('s1'));
    nc.publish('open.x', sc.encode('o1'));
    await until(() => open.length === 1, 'the open message');
    // The policy changed (open/# denied instead): open.x ends; a new secret.x subscription is allowed again.
    write('topic:open/#');
    await hup();
    await until(() => errors.length === 2, 'the second violation');
    assert.match(errors[1]!, /Permissions Violation for Subscription to "open\.x"/);
    const secret2 = watch('secret.x');
    await nc.flush();
    nc.publish('secret.x', sc.encode('s2'));
    nc.publish('open.x', sc.encode('o2'));
    await until(() => secret2.length === 1, 'the second secret message');
    // The policy removed from the file: removed from the directory, open.x allowed again.
    write(null);
    await hup();
    const open2 = watch('open.x');
    await nc.flush();
    nc.publish('open.x', sc.encode('o3'));
    await until(() => open2.length === 1, 'the open message after the removal');
    assert.deepEqual({ secret, open, secret2, open2, errors: errors.length }, { secret: [], open: ['o1'], secret2: ['s2'], open2: ['o3'], errors: 2 });
    assert.equal(broker.proc.exitCode, null);
    await nc.close();
  });

  it('token: the configured one gets in, another is refused', async () => {
    const nc = await connect({ servers: broker.natsServer, token: 's3cret' });
    assert.equal(nc.info?.auth_required, true);
    await nc.close();
    await assert.rejects(
      connect({ servers: broker.natsServer, token: 'guess', reconnect: false }),
      (e: Error & { code?: string }) => e.code === 'AUTHORIZATION_VIOLATION',
    );
  });
});
