/**
 * Helpers of the policy-bypass suite (policy-bypass*.test.ts): the users file every case runs with, and "taps":
 * a subscription of one principal through one real client (MQTT.js 3.1.1 / 5, nats, amqplib, a stream read back
 * through the admin API) that records every payload it receives, so that a case can prove absence with a marker:
 * `until(marker)` waits for the marker and returns what came before it.
 *
 * Secret payloads all start with `SECRET` (`secretOf`); `leaked` finds them in anything a tap received, also
 * inside JSON replies that carry the payload base64-encoded (a JetStream STREAM.MSG.GET reply, an admin API
 * browse), whose base64 of a payload starting with `SECRET` always starts with `U0VDUkVU`.
 */
import assert from 'node:assert/strict';
import mqtt, { type MqttClient } from 'mqtt';
import amqp, { type Channel, type ChannelModel } from 'amqplib';
import { connect, StringCodec, type NatsConnection, type Subscription } from 'nats';
import kafkajsPkg, { type Consumer } from 'kafkajs';
import { eventually } from './harness.js';

const { Kafka, logLevel } = kafkajsPkg;
export const sc = StringCodec();

/**
 * alice, bob and carol; everyone is allowed everything, and bob is denied every action on `topic:secret/#`
 * (the natural policy an operator writes, which must hold on every path).
 */
export const POLICIES = [
  { name: 'everyone-all', effect: 'allow', actions: ['*'], resources: ['*:*'], principals: ['everyone'] },
  { name: 'bob-no-secret', effect: 'deny', actions: ['*'], resources: ['topic:secret/#'], principals: ['user:bob'] },
] as const;
export const USERS = ['alice', 'bob', 'carol'] as const;

/** The same as a users file (--users-file). */
export const USERS_YAML = [
  'users:',
  ...USERS.map((u) => `  - {username: ${u}, password: ${u}-pw}`),
  'policies:',
  ...POLICIES.map((p) => `  - ${JSON.stringify(p)}`),
  '',
].join('\n');

export type User = 'alice' | 'bob' | 'carol';
export const password = (u: User): string => `${u}-pw`;

let seq = 0;
/** A fresh unique token (client ids, queue and consumer names, markers). */
export const uniq = (p = 'u'): string => `${p}${process.pid.toString(36)}${(++seq).toString(36)}${Math.random().toString(36).slice(2, 6)}`;

/** A secret payload: `SECRET:<tag>`. */
export const secretOf = (tag: string): string => `SECRET:${tag}`;

/** Whether a received payload holds a secret, in clear or base64-encoded inside a JSON reply. */
export function isLeak(payload: string): boolean {
  return payload.includes('SECRET') || payload.includes('U0VDUkVU');
}

/** The secret payloads among `payloads`. */
export const leaked = (payloads: string[]): string[] => payloads.filter(isLeak);

/** Fails when `payloads` hold a secret, naming how many and the first few (not the whole list). */
export function noLeak(payloads: string[], who: string): void {
  const l = leaked(payloads);
  if (l.length > 0)
    assert.fail(
      `${who} received ${l.length} secret payload(s), e.g. ${l
        .slice(0, 3)
        .map((p) => (p.length > 120 ? p.slice(0, 120) + '…' : p))
        .join(' ; ')}`,
    );
}

/** One principal's subscription through one client, recording payloads as they arrive. */
export interface Tap {
  readonly name: string;
  readonly payloads: string[];
  /** Waits for `marker` (a safety net of 15 s, not a timing assertion) and returns the payloads before it. */
  until(marker: string): Promise<string[]>;
  close(): Promise<void>;
}

function makeTap(name: string, payloads: string[], close: () => Promise<void>, poll?: () => Promise<void>): Tap {
  return {
    name,
    payloads,
    async until(marker: string) {
      await eventually(
        async () => {
          if (poll) await poll();
          return payloads.includes(marker);
        },
        15_000,
        `marker ${marker} at ${name}`,
      );
      return payloads.slice(0, payloads.indexOf(marker));
    },
    close,
  };
}

export async function mqttConnect(url: string, user: User, version: 4 | 5, opts: mqtt.IClientOptions = {}): Promise<MqttClient> {
  return mqtt.connectAsync(url, {
    protocolVersion: version,
    reconnectPeriod: 0,
    username: user,
    password: password(user),
    clientId: uniq(`${user}-`),
    ...opts,
  });
}

/** An MQTT subscription (QoS 1) of `user` on `filter`; throws when the SUBACK refuses it. */
export async function mqttTap(url: string, user: User, filter: string, version: 4 | 5): Promise<Tap> {
  const c = await mqttConnect(url, user, version);
  const payloads: string[] = [];
  c.on('message', (_t, p) => payloads.push(p.toString()));
  await c.subscribeAsync(filter, { qos: 1 });
  return makeTap(`${user} MQTT ${version === 4 ? '3.1.1' : '5'} ${filter}`, payloads, () => c.endAsync(true));
}

/** The SUBACK's answer to one subscription: the granted QoS, or the failure code (0x80, 0x87...). */
export async function subackCode(c: MqttClient, filter: string, qos: 0 | 1 = 1): Promise<number> {
  try {
    const granted = await c.subscribeAsync(filter, { qos });
    return granted[0]!.qos;
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (typeof code === 'number') return code;
    // mqtt.js rejects a refused subscription with the SUBACK packet attached (its return codes in `granted`).
    const granted = (err as { packet?: { granted?: unknown[] } }).packet?.granted;
    if (Array.isArray(granted) && typeof granted[0] === 'number') return granted[0];
    throw err;
  }
}

export async function natsConnect(server: string, user: User): Promise<NatsConnection> {
  return connect({ servers: server, user, pass: password(user), reconnect: false, name: uniq(`${user}-`) });
}

/** A NATS subscription of `user` (optionally in a queue group); the connection is flushed, so the SUB is in. */
export async function natsTap(server: string, user: User, subject: string, queue?: string): Promise<Tap> {
  const nc = await natsConnect(server, user);
  return natsTapOn(nc, user, subject, queue, () => nc.close());
}

export async function natsTapOn(
  nc: NatsConnection,
  user: User,
  subject: string,
  queue?: string,
  close: () => Promise<void> = async () => undefined,
): Promise<Tap> {
  const payloads: string[] = [];
  const sub: Subscription = nc.subscribe(subject, queue !== undefined ? { queue } : {});
  void (async () => {
    try {
      for await (const m of sub) payloads.push(sc.decode(m.data));
    } catch {
      // a refused subscription ends here; the marker never comes and the case says so
    }
  })();
  await nc.flush();
  return makeTap(`${user} NATS ${subject}${queue !== undefined ? ` (queue ${queue})` : ''}`, payloads, async () => {
    sub.unsubscribe();
    await close();
  });
}

export function amqpUrlOf(port: number, user: User): string {
  return `amqp://${user}:${password(user)}@127.0.0.1:${port}`;
}

/** An amqplib connection whose errors are kept (a refused channel must not crash the test process). */
export async function amqpConnect(port: number, user: User): Promise<ChannelModel> {
  const c = await amqp.connect(amqpUrlOf(port, user));
  c.on('error', () => undefined);
  return c;
}

/** A channel whose closing error (channel.close from the broker) is kept in `closedWith`. */
export async function amqpChannel(c: ChannelModel): Promise<Channel & { closedWith: Promise<Error> }> {
  const ch = (await c.createChannel()) as Channel & { closedWith: Promise<Error> };
  ch.closedWith = new Promise((resolve) => ch.on('error', resolve));
  return ch;
}

/** A server-named exclusive queue of `user` bound to amq.topic with each of `keys`, consumed without acks. */
export async function amqpTap(port: number, user: User, keys: string[]): Promise<Tap> {
  const conn = await amqpConnect(port, user);
  const ch = await amqpChannel(conn);
  const q = await ch.assertQueue('', { exclusive: true });
  for (const k of keys) await ch.bindQueue(q.queue, 'amq.topic', k);
  const payloads: string[] = [];
  await ch.consume(q.queue, (m) => m !== null && payloads.push(m.content.toString()), { noAck: true });
  return makeTap(`${user} AMQP queue bound to amq.topic with ${keys.join(', ')}`, payloads, () => conn.close().catch(() => undefined));
}

/** Status and parsed body of an admin API request made as `user` (HTTP Basic). */
export async function apiAs<T = unknown>(http: string, user: User, method: string, path: string, body?: unknown): Promise<{ status: number; body: T }> {
  const headers: Record<string, string> = { authorization: `Basic ${Buffer.from(`${user}:${password(user)}`).toString('base64')}` };
  if (method !== 'GET') headers['content-type'] = 'application/json';
  const res = await fetch(http + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    // not JSON
  }
  return { status: res.status, body: parsed as T };
}

interface BrowseItem {
  offset: number;
  topic: string;
  value: string | null;
  encoding: 'utf8' | 'base64';
}

/** Every message of partition 0 of a stream, through the admin API's message browser, as `user`. */
export async function browse(http: string, user: User, stream: string): Promise<{ status: number; items: BrowseItem[] }> {
  const items: BrowseItem[] = [];
  let offset = 0;
  for (;;) {
    const r = await apiAs<{ items: BrowseItem[]; next: number | null }>(
      http,
      user,
      'GET',
      `/api/v1/streams/${encodeURIComponent(stream)}/messages?partition=0&offset=${offset}&limit=1000`,
    );
    if (r.status !== 200) return { status: r.status, items };
    items.push(...r.body.items);
    if (r.body.next === null) return { status: 200, items };
    offset = r.body.next;
  }
}

export const browseValues = (items: BrowseItem[]): string[] =>
  items.map((i) => (i.value === null ? '' : i.encoding === 'base64' ? Buffer.from(i.value, 'base64').toString() : i.value));

/** A stream `user` creates through the admin API bound to `bindings`, read back through the message browser. */
export async function streamTap(http: string, user: User, bindings: string[]): Promise<Tap> {
  const name = uniq(`${user}-tap-`);
  const r = await apiAs(http, user, 'POST', '/api/v1/streams', { name, partitions: 1, bindings });
  assert.equal(r.status, 201, `${user} creates stream ${name} bound to ${bindings}: ${JSON.stringify(r.body)}`);
  const payloads: string[] = [];
  return makeTap(
    `${user} stream bound to ${bindings.join(', ')} (read through the admin API)`,
    payloads,
    async () => {
      await apiAs(http, user, 'DELETE', `/api/v1/streams/${encodeURIComponent(name)}`);
    },
    async () => {
      const b = await browse(http, user, name);
      payloads.splice(0, payloads.length, ...browseValues(b.items));
    },
  );
}

/** KafkaJS with SASL PLAIN as `user`, no retries (a refusal shows at once). */
export function kafkaAs(broker: string, user: User) {
  return new Kafka({
    clientId: uniq(`${user}-`),
    brokers: [broker],
    sasl: { mechanism: 'plain', username: user, password: password(user) },
    logLevel: logLevel.NOTHING,
    retry: { retries: 0 },
    connectionTimeout: 5000,
  });
}

/** KafkaJS wraps protocol errors: the type named anywhere in the chain (as kafka-auth.test.ts reads them). */
export function kafkaErrorType(err: unknown): string {
  type E = { type?: string; message?: string; originalError?: unknown; cause?: unknown; name?: string; errors?: unknown[] };
  const seen: string[] = [];
  // KafkaJS wraps per-topic errors (CreateTopics) in a KafkaJSAggregateError's `errors`.
  const walk = (x: unknown, depth: number): void => {
    const e = x as E | undefined;
    if (!e || depth > 5) return;
    if (e.type) seen.push(e.type);
    if (e.name) seen.push(e.name);
    seen.push(e.message ?? '');
    if (Array.isArray(e.errors)) for (const sub of e.errors) walk(sub, depth + 1);
    walk(e.originalError ?? e.cause, depth + 1);
  };
  walk(err, 0);
  return seen.join(' | ');
}

/**
 * A KafkaJS consumer (its own group, from the beginning) of `topic` as `user` until it has `n` messages, or until
 * the broker refuses it (subscribe or a fetch crashing the consumer): the values it got and the refusal, if any.
 */
export async function kafkaRead(broker: string, user: User, topic: string, n: number): Promise<{ values: string[]; error: string | null }> {
  const consumer: Consumer = kafkaAs(broker, user).consumer({ groupId: uniq(`${user}-g-`), retry: { retries: 0 }, maxWaitTimeInMs: 100 });
  const values: string[] = [];
  let error: string | null = null;
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  consumer.on(consumer.events.CRASH, (e) => {
    error = kafkaErrorType(e.payload.error);
    done();
  });
  const timer = setTimeout(() => {
    error ??= 'timed out (15 s) with neither all messages nor a refusal';
    done();
  }, 15_000);
  try {
    await consumer.connect();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ message }) => {
        values.push(message.value?.toString() ?? '');
        if (values.length >= n) done();
      },
    });
    await finished;
  } catch (err) {
    error = kafkaErrorType(err);
  } finally {
    clearTimeout(timer);
    await consumer.disconnect().catch(() => undefined);
  }
  return { values, error };
}
