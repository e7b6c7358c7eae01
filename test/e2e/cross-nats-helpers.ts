/**
 * Helpers of the cross-protocol NATS tests (test/e2e/cross-nats-*.test.ts): a broker running all four protocols,
 * `nats` npm client connections, and collectors for NATS, MQTT.js and amqplib that prove absence the way the other
 * cross-protocol tests do: by a marker message sent after what must not arrive.
 */
import { connect, type ConnectionOptions, type Msg, type NatsConnection, type Subscription, type SubscriptionOptions } from 'nats';
import type { IPublishPacket } from 'mqtt';
import { after, before } from 'node:test';
import type { Channel, ChannelModel } from 'amqplib';
import { eventually, FlowmqProcess } from './harness.js';
import { connectAmqp } from './amqp-helpers.js';

/**
 * A broker with its MQTT, Kafka, AMQP and NATS listeners on free ports (AMQP heartbeats off, as the AMQP tests do; no
 * KIP-134 initial rebalance delay: each Kafka group here has one member, and 3 s per group proves nothing).
 */
export async function startNatsBroker(args: string[] = []): Promise<FlowmqProcess> {
  const b = await FlowmqProcess.start({ args: ['--amqp-heartbeat', '0', '--kafka-group-initial-rebalance-delay', '0', ...args] });
  await eventually(() => b.ports.nats !== undefined, 10_000, 'the NATS listener');
  return b;
}

/** What a cross-protocol describe block shares: one broker, a NATS connection, an amqplib connection and channel. */
export interface CrossFixture {
  broker: FlowmqProcess;
  nc: NatsConnection;
  conn: ChannelModel;
  ch: Channel;
}

/** Starts the fixture before the block's tests (the NATS connection named `name`) and closes it after them. */
export function crossFixture(name: string): CrossFixture {
  const f = {} as CrossFixture;
  before(async () => {
    f.broker = await startNatsBroker();
    f.nc = await connectNats(f.broker, { name });
    f.conn = await connectAmqp(f.broker);
    f.ch = await f.conn.createChannel();
  });
  after(async () => {
    await f.nc?.close().catch(() => undefined);
    await f.conn?.close().catch(() => undefined);
    await f.broker?.stop();
    f.broker?.cleanup();
  });
  return f;
}

/** A `nats` client connection that never reconnects (a test must see a dropped connection, not hide it). */
export function connectNats(b: FlowmqProcess, opts: ConnectionOptions = {}): Promise<NatsConnection> {
  return connect({ servers: b.natsServer, reconnect: false, timeout: 10_000, ...opts });
}

/** What a NATS subscriber saw of one message, decoded while the message is at hand. */
export interface NatsSeen {
  subject: string;
  reply: string;
  data: string;
  /** Every header with all its values in order; null when the message came as MSG (no header block). */
  headers: Record<string, string[]> | null;
  /** The header block's status line (code and description), '' without one. */
  status: string;
  /** The error accessing the headers threw, if any (an undecodable header block). */
  headerError?: string;
}

export function seen(m: Msg): NatsSeen {
  const out: NatsSeen = { subject: m.subject, reply: m.reply ?? '', data: Buffer.from(m.data).toString(), headers: null, status: '' };
  try {
    const h = m.headers;
    if (h !== undefined) {
      out.headers = {};
      for (const k of h.keys()) out.headers[k] = h.values(k);
      out.status = h.code > 0 ? h.status : '';
    }
  } catch (e) {
    out.headerError = (e as Error).message;
  }
  return out;
}

/** A NATS subscription that records what arrives; `until(marker)` resolves with what came before the marker. */
export function natsCollector(
  nc: NatsConnection,
  subject: string,
  opts: SubscriptionOptions = {},
): { sub: Subscription; got: NatsSeen[]; until(payload: string, timeoutMs?: number): Promise<NatsSeen[]> } {
  const got: NatsSeen[] = [];
  const sub = nc.subscribe(subject, {
    ...opts,
    callback: (err, m) => {
      if (err === null) got.push(seen(m));
    },
  });
  return {
    sub,
    got,
    async until(payload: string, timeoutMs = 10_000) {
      await eventually(
        () => got.some((s) => s.data === payload),
        timeoutMs,
        `NATS marker ${payload} on ${subject} (have ${got.map((g) => g.data).join(', ')})`,
      );
      const i = got.findIndex((s) => s.data === payload);
      return got.splice(0, i + 1).slice(0, i);
    },
  };
}

/** MQTT.js user properties as arrays of values (it gives a string for one value, an array for several). */
export function userProps(p: IPublishPacket): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [k, v] of Object.entries(p.properties?.userProperties ?? {})) out[k] = Array.isArray(v) ? v.map(String) : [String(v)];
  return out;
}

export function timeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`timed out: ${what}`)), ms).unref())]);
}
