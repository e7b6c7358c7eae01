/**
 * Every feature group end to end with the Eclipse Mosquitto command-line clients (mosquitto_pub /
 * mosquitto_sub 2.0.11, MQTT 3.1.1 and, with -V mqttv5 / -D, MQTT 5.0) against an in-process broker. The
 * restart and kill -9 cases run against the real process in test/e2e/mqtt-durability.test.ts.
 *
 * Not covered with these clients, because mosquitto_sub 2.0.11 has no option for them: No Local and Retain
 * Handling (MQTT.js covers them in v5.test.ts); server-to-client topic aliases (its library reports a protocol
 * error on the first alias-only PUBLISH it receives; MQTT.js covers that direction).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import mqtt from 'mqtt';
import { MemorySessionStore } from '../../../src/core/index.js';
import { run, sleep, startBroker, until, type TestBroker } from './helpers.js';

interface Sub {
  /** Message lines (printed with the -F format given), once the client has exited. */
  done: Promise<{ code: number | null; lines: string[]; stderr: string }>;
  kill(signal: NodeJS.Signals): void;
}

const MARK = '>> ';

describe('mqtt with mosquitto_pub / mosquitto_sub', () => {
  let b: TestBroker;
  const host = () => ['-h', '127.0.0.1', '-p', String(b.port)];
  before(async () => {
    b = await startBroker({ tickMs: 50, sysIntervalMs: 200 }, undefined, { sessions: new MemorySessionStore() });
  });
  after(() => b.close());

  /**
   * Starts mosquitto_sub and resolves once its SUBACK arrived (read from its -d output, line-buffered with
   * stdbuf because its stdout is block-buffered on a pipe). `format` is its -F output format.
   */
  async function sub(args: string[], format = '%t %p', timeoutMs = 10_000): Promise<Sub> {
    const p = spawn('stdbuf', ['-oL', 'mosquitto_sub', ...host(), '-d', '-F', MARK + format, ...args]);
    let out = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    const done = new Promise<{ code: number | null; lines: string[]; stderr: string }>((resolve) =>
      p.on('close', (code) => {
        clearTimeout(timer);
        resolve({
          code,
          stderr,
          lines: out
            .split('\n')
            .filter((l) => l.startsWith(MARK))
            .map((l) => l.slice(MARK.length)),
        });
      }),
    );
    await until(() => out.includes('received SUBACK') || p.exitCode !== null, 'mosquitto_sub to subscribe', timeoutMs);
    return { done, kill: (s) => p.kill(s) };
  }

  async function pub(args: string[], input?: string): Promise<void> {
    const r = await run('mosquitto_pub', [...host(), ...args], input);
    assert.equal(r.code, 0, r.stderr);
  }

  for (const v of ['mqttv311', 'mqttv5']) {
    test(`${v}: QoS 0, 1 and 2 from mosquitto_pub to mosquitto_sub at QoS 2, and each capped by a QoS 1 subscription`, async () => {
      const s2 = await sub(['-V', v, '-t', `qos/${v}/#`, '-q', '2', '-C', '3'], '%t %q %p');
      const s1 = await sub(['-V', v, '-t', `qos/${v}/#`, '-q', '1', '-C', '3'], '%t %q %p');
      for (const q of ['0', '1', '2']) await pub(['-V', v, '-q', q, '-t', `qos/${v}/${q}`, '-m', `m${q}`]);
      // [MQTT-3.3.5-1] delivered at min(published QoS, granted QoS).
      assert.deepEqual((await s2.done).lines, [`qos/${v}/0 0 m0`, `qos/${v}/1 1 m1`, `qos/${v}/2 2 m2`]);
      assert.deepEqual((await s1.done).lines, [`qos/${v}/0 0 m0`, `qos/${v}/1 1 m1`, `qos/${v}/2 1 m2`]);
    });
  }

  test('retained: set, replace and clear (-r, -r -n); RETAIN 1 for a new subscriber [MQTT-3.3.1-6]', async () => {
    await pub(['-r', '-q', '1', '-t', 'ret/x', '-m', 'one']);
    await pub(['-V', 'mqttv5', '-r', '-q', '1', '-t', 'ret/x', '-m', 'two']);
    const got = await sub(['-t', 'ret/#', '--retained-only', '-C', '1'], '%t %r %p');
    assert.deepEqual((await got.done).lines, ['ret/x 1 two']);
    // [MQTT-3.3.1-10] a zero-length retained message clears the topic.
    await pub(['-r', '-n', '-t', 'ret/x']);
    const none = await sub(['-t', 'ret/#', '--retained-only', '-W', '1']);
    assert.deepEqual((await none.done).lines, []);
  });

  test('will: published when mosquitto_sub is killed (socket lost), not when it disconnects [MQTT-3.1.2-8] [MQTT-3.14.4-3]', async () => {
    const watch = await sub(['-t', 'will/#', '-q', '1', '-W', '5', '-C', '1'], '%t %p');
    const lost = await sub(['--will-topic', 'will/lost', '--will-payload', 'bye', '--will-qos', '1', '-t', 'nothing/1']);
    const clean = await sub(['-V', 'mqttv5', '--will-topic', 'will/clean', '--will-payload', 'bye', '-t', 'nothing/2', '-E']);
    assert.equal((await clean.done).code, 0);
    lost.kill('SIGKILL');
    assert.deepEqual((await watch.done).lines, ['will/lost bye']);
  });

  test('wildcards + and #; $SYS/# sees the statistics, # does not match $ topics [MQTT-4.7.2-1]', async () => {
    const w = await sub(['-t', 'wc/+/c', '-t', 'wc2/#', '-C', '3']);
    for (const t of ['wc/b/c', 'wc/b/d', 'wc/b/c/d', 'wc2', 'wc2/x/y']) await pub(['-t', t, '-m', t]);
    assert.deepEqual((await w.done).lines, ['wc/b/c wc/b/c', 'wc2 wc2', 'wc2/x/y wc2/x/y']);
    const sys = await sub(['-t', '$SYS/#', '-C', '1'], '%t');
    assert.match((await sys.done).lines[0] ?? '', /^\$SYS\/broker\//);
    await pub(['-r', '-t', 'plain/t', '-m', 'v']);
    const all = await sub(['-t', '#', '--retained-only', '-W', '1'], '%t');
    assert.deepEqual((await all.done).lines, ['plain/t']);
    await pub(['-r', '-n', '-t', 'plain/t']);
  });

  test('shared subscription: two mosquitto_sub in $share/g/... split the messages, each once', async () => {
    const a = await sub(['-V', 'mqttv5', '-t', '$share/g/sh/#', '-q', '1', '-C', '2'], '%p');
    const c = await sub(['-t', '$share/g/sh/#', '-q', '1', '-C', '2'], '%p');
    await pub(['-q', '1', '-t', 'sh/x', '-l'], 'm1\nm2\nm3\nm4\n');
    const [ra, rc] = await Promise.all([a.done, c.done]);
    assert.equal(ra.lines.length, 2);
    assert.equal(rc.lines.length, 2);
    assert.deepEqual([...ra.lines, ...rc.lines].sort(), ['m1', 'm2', 'm3', 'm4']);
  });

  test('v5 properties from mosquitto_pub -D: user properties, content type, response topic, correlation data, payload format, expiry', async () => {
    const js = await mqtt.connectAsync(b.url, { protocolVersion: 5, reconnectPeriod: 0 });
    const jsGot: mqtt.IPublishPacket[] = [];
    js.on('message', (_t, _p, packet) => jsGot.push(packet));
    await js.subscribeAsync('props/#', { qos: 1 });
    const s = await sub(['-V', 'mqttv5', '-t', 'props/#', '-C', '1'], '%P|%C|%R|%D|%F|%E|%p');
    await pub([
      '-V',
      'mqttv5',
      '-q',
      '1',
      '-t',
      'props/x',
      '-m',
      'hi',
      '-D',
      'publish',
      'user-property',
      'k1',
      'v1',
      '-D',
      'publish',
      'user-property',
      'k1',
      'v2',
      '-D',
      'publish',
      'content-type',
      'text/plain',
      '-D',
      'publish',
      'response-topic',
      'props/reply',
      '-D',
      'publish',
      'correlation-data',
      'abc',
      '-D',
      'publish',
      'payload-format-indicator',
      '1',
      '-D',
      'publish',
      'message-expiry-interval',
      '100',
    ]);
    // [MQTT-3.3.2-17] [MQTT-3.3.2-18] user properties unaltered and in order, duplicate keys kept.
    const line = (await s.done).lines[0] ?? '';
    const [up, ct, rt, cd, pf, exp, payload] = line.split('|');
    assert.deepEqual([up, ct, rt, cd, pf, payload], ['k1:v1 k1:v2', 'text/plain', 'props/reply', 'abc', '1', 'hi']);
    // [MQTT-3.3.2-6] the expiry sent on is what is left of it.
    assert.ok(Number(exp) > 90 && Number(exp) <= 100, exp);
    await until(() => jsGot.length === 1, 'MQTT.js to receive it');
    const p = jsGot[0].properties;
    assert.deepEqual({ ...p?.userProperties }, { k1: ['v1', 'v2'] });
    assert.equal(p?.correlationData?.toString(), 'abc');
    await js.endAsync();
  });

  test('v5 request/response with mosquitto_rr: response topic and correlation data reach the responder and back', async () => {
    const responder = await mqtt.connectAsync(b.url, { protocolVersion: 5, reconnectPeriod: 0 });
    responder.on('message', (_t, payload, packet) => {
      const rt = packet.properties?.responseTopic;
      if (rt !== undefined) responder.publish(rt, `re: ${payload.toString()}`, { qos: 1, properties: { correlationData: packet.properties?.correlationData } });
    });
    await responder.subscribeAsync('rr/req', { qos: 1 });
    const r = await run('mosquitto_rr', [...host(), '-t', 'rr/req', '-e', 'rr/resp', '-m', 'ping', '-W', '5']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), 're: ping');
    await responder.endAsync();
  });

  test('v5 message expiry: an expired message is not delivered to a resumed mosquitto_sub -c -x session [MQTT-3.3.2-5]', async () => {
    const id = ['-V', 'mqttv5', '-i', 'mos-exp', '-c', '-x', '60', '-q', '1', '-t', 'exp/#'];
    assert.equal((await (await sub([...id, '-E'])).done).code, 0);
    await pub(['-V', 'mqttv5', '-q', '1', '-t', 'exp/short', '-m', 'stale', '-D', 'publish', 'message-expiry-interval', '1']);
    await pub(['-V', 'mqttv5', '-q', '1', '-t', 'exp/long', '-m', 'fresh', '-D', 'publish', 'message-expiry-interval', '100']);
    await sleep(1100);
    const back = await sub([...id, '-C', '1', '-W', '5']);
    assert.deepEqual((await back.done).lines, ['exp/long fresh']);
    await run('mosquitto_sub', [...host(), '-V', 'mqttv5', '-i', 'mos-exp', '-x', '0', '-t', 'exp/#', '-E']);
  });

  test('v5 topic alias from mosquitto_pub (-D publish topic-alias, later publishes carry only the alias)', async () => {
    const s = await sub(['-V', 'mqttv5', '-t', 'alias/#', '-C', '3']);
    await pub(['-V', 'mqttv5', '-t', 'alias/x', '-D', 'publish', 'topic-alias', '1', '-l'], 'a\nb\nc\n');
    assert.deepEqual((await s.done).lines, ['alias/x a', 'alias/x b', 'alias/x c']);
  });

  test('v5 subscription identifier (-D subscribe subscription-identifier) comes back with each message [MQTT-3.3.4-3]', async () => {
    const s = await sub(['-V', 'mqttv5', '-t', 'sid/#', '-D', 'subscribe', 'subscription-identifier', '42', '-C', '1'], '%S %p');
    await pub(['-t', 'sid/x', '-m', 'hi']);
    assert.deepEqual((await s.done).lines, ['42 hi']);
  });

  test('v5 retain as published (--retain-as-published) keeps RETAIN on live delivery; without it RETAIN is 0 [MQTT-3.3.1-12]', async () => {
    const rap = await sub(['-V', 'mqttv5', '-t', 'rap/x', '--retain-as-published', '-C', '1'], '%r %p');
    const plain = await sub(['-V', 'mqttv5', '-t', 'rap/x', '-C', '1'], '%r %p');
    await pub(['-r', '-t', 'rap/x', '-m', 'kept']);
    assert.deepEqual((await rap.done).lines, ['1 kept']);
    assert.deepEqual((await plain.done).lines, ['0 kept']);
    await pub(['-r', '-n', '-t', 'rap/x']);
  });

  for (const v of ['mqttv311', 'mqttv5']) {
    test(`${v}: persistent session with -c${v === 'mqttv5' ? ' -x' : ''}: messages published while away are delivered on return`, async () => {
      const id = ['-V', v, '-i', `mos-ps-${v}`, '-c', '-q', '1', '-t', `ps/${v}/#`, ...(v === 'mqttv5' ? ['-x', '60'] : [])];
      assert.equal((await (await sub([...id, '-E'])).done).code, 0);
      await pub(['-q', '1', '-t', `ps/${v}/a`, '-m', 'one']);
      await pub(['-q', '2', '-t', `ps/${v}/b`, '-m', 'two']);
      const back = await sub([...id, '-C', '2']);
      assert.deepEqual((await back.done).lines, [`ps/${v}/a one`, `ps/${v}/b two`]);
    });
  }

  test('v5 -x 1: the session expires one second after the disconnect [MQTT-3.1.2-23]', async () => {
    const id = ['-V', 'mqttv5', '-i', 'mos-short', '-c', '-x', '1', '-q', '1', '-t', 'short/#'];
    assert.equal((await (await sub([...id, '-E'])).done).code, 0);
    await sleep(1300);
    await pub(['-q', '1', '-t', 'short/a', '-m', 'too late']);
    const back = await sub([...id, '-W', '1']);
    assert.deepEqual((await back.done).lines, []);
  });
});
