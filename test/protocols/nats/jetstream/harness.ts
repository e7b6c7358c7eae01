/**
 * A JetStream client at the core's level for the service's unit tests: requests are core messages with a response
 * topic, answers are collected by a Subscriber on the inbox (rule 'nats'), as the NATS connection would see them.
 */
import pino from 'pino';
import {
  dotsToUnified,
  Engine,
  makeMessage,
  unifiedToDots,
  type Header,
  type Message,
  type Subscriber,
  type Subscription,
} from '../../../../src/core/index.js';
import { JetStream, type JetStreamOptions } from '../../../../src/protocols/nats/jetstream/index.js';
import { MemoryStreams } from '../../../helpers/memory-storage.js';

export const silent = pino({ level: 'silent' });

export class Inbox implements Subscriber {
  readonly got: Message[] = [];
  private waiters: Array<() => void> = [];
  readonly sub: Subscription;
  constructor(
    readonly engine: Engine,
    readonly id: string,
  ) {
    this.sub = engine.subscribe(`${id}.>`, this, { qos: 0, rule: 'nats' });
  }
  deliver(msg: Message, _subs: Subscription[]): void {
    this.got.push({ ...msg, payload: Buffer.from(msg.payload) });
    for (const w of this.waiters.splice(0)) w();
  }
  /** Waits until `n` messages arrived in total (a generous safety timeout only). */
  async waitFor(n: number, timeoutMs = 10_000): Promise<Message[]> {
    const deadline = Date.now() + timeoutMs;
    while (this.got.length < n) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${n} messages on ${this.id}, got ${this.got.length}`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, 200);
        this.waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
    return this.got;
  }
  take(): Message[] {
    return this.got.splice(0);
  }
}

export function json(m: Message): Record<string, any> {
  return JSON.parse(m.payload.toString('utf8')) as Record<string, any>;
}

export function hdr(m: Message, key: string): string | undefined {
  const h = m.headers.find((x) => x.key === key);
  return h === undefined ? undefined : (h.value?.toString('utf8') ?? '');
}

/** The NATS subject a delivery names (its stored subject) and its ack reply subject. */
export function natsSubject(m: Message): string {
  return unifiedToDots(m.deliverTopic ?? m.topic);
}
export function ackSubject(m: Message): string {
  return unifiedToDots(m.responseTopic ?? '');
}

let inboxes = 0;

export class Client {
  constructor(
    readonly engine: Engine,
    readonly js: JetStream,
  ) {}

  /** A request to a JetStream API subject; resolves with the JSON answer. */
  async api(subject: string, body?: unknown): Promise<Record<string, any>> {
    const m = await this.request(subject, body === undefined ? '' : typeof body === 'string' ? body : JSON.stringify(body));
    return json(m);
  }

  async request(subject: string, payload: string, headers: Header[] = []): Promise<Message> {
    const inbox = new Inbox(this.engine, `_INBOX.r${++inboxes}`);
    try {
      this.engine.publish(makeMessage(dotsToUnified(subject), Buffer.from(payload), { headers, responseTopic: dotsToUnified(`${inbox.id}.x`) }));
      return (await inbox.waitFor(1))[0];
    } finally {
      this.engine.unsubscribe(inbox.sub);
    }
  }

  /** A JetStream publish (what the NATS connection does for a PUB with a reply subject); resolves with the PubAck. */
  async publish(subject: string, payload: string, headers: Header[] = []): Promise<Record<string, any>> {
    const inbox = new Inbox(this.engine, `_INBOX.p${++inboxes}`);
    try {
      const reply = `${inbox.id}.x`;
      const msgId = headers.find((h) => h.key === 'Nats-Msg-Id')?.value?.toString();
      this.js.publish(
        makeMessage(dotsToUnified(subject), Buffer.from(payload), {
          headers,
          responseTopic: dotsToUnified(reply),
          ...(msgId !== undefined ? { messageId: msgId } : {}),
        }),
        reply,
      );
      return json((await inbox.waitFor(1))[0]);
    } finally {
      this.engine.unsubscribe(inbox.sub);
    }
  }

  /** Sends a pull request; deliveries and statuses arrive on the returned inbox. */
  pull(stream: string, consumer: string, body: unknown): Inbox {
    const inbox = new Inbox(this.engine, `_INBOX.f${++inboxes}`);
    this.engine.publish(
      makeMessage(dotsToUnified(`$JS.API.CONSUMER.MSG.NEXT.${stream}.${consumer}`), Buffer.from(typeof body === 'string' ? body : JSON.stringify(body)), {
        responseTopic: dotsToUnified(`${inbox.id}.x`),
      }),
    );
    return inbox;
  }

  /** Fetches until `n` messages (statuses included) arrived. */
  async fetch(stream: string, consumer: string, body: unknown, n: number): Promise<Message[]> {
    const inbox = this.pull(stream, consumer, body);
    try {
      return (await inbox.waitFor(n)).slice();
    } finally {
      this.engine.unsubscribe(inbox.sub);
    }
  }

  /** Acks a delivery (fire and forget, as msg.ack() does). */
  ack(m: Message, body = '+ACK'): void {
    this.engine.publish(makeMessage(m.responseTopic!, Buffer.from(body)));
  }

  /** Acks with a reply (ackAck): resolves with the confirmation. */
  async ackSync(m: Message, body = '+ACK'): Promise<Message> {
    return this.request(ackSubject(m), body);
  }
}

export async function setup(opts: JetStreamOptions = {}, store?: MemoryStreams) {
  const m = store ?? new MemoryStreams();
  const engine = new Engine(m, m);
  await engine.load();
  const js = new JetStream(engine, silent, { tickMs: 20, flushDelayMs: 5, ...opts });
  await js.start();
  return { m, engine, js, c: new Client(engine, js) };
}

/** ns from ms */
export const ns = (ms: number) => ms * 1e6;
