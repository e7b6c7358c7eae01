/**
 * JetStream consumers beside Debian's nats-server 2.9.10: the same raw API scenario runs against bin/flowmq and
 * nats-server and the transcripts must be equal. Covered: pull requests with max_bytes (each message counted as
 * subject + ack reply subject + header block + payload; one that does not fit ends the request with `409 Message
 * Size Exceeds MaxBytes` and Nats-Pending-Messages / Nats-Pending-Bytes, an exact fit ends it without a status),
 * consumer updates (filter_subject may change, 10012 for fixed fields), nats-server's refusals of push-only and
 * negative settings, num_replicas (> 1 on one broker: 10074) and CONSUMER.CREATE's subject naming the consumer.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, createInbox, headers, StringCodec, type NatsConnection } from 'nats';
import { sideBySide, step, type Entry } from './nats-side-by-side.js';

const sc = StringCodec();

async function api(nc: NatsConnection, subject: string, body?: unknown): Promise<Record<string, unknown>> {
  const m = await nc.request(`$JS.API.${subject}`, sc.encode(body === undefined ? '' : JSON.stringify(body)), { timeout: 3000 });
  return JSON.parse(sc.decode(m.data)) as Record<string, unknown>;
}

function outcome(r: Record<string, unknown>): unknown {
  const e = r.error as { code: number; err_code: number; description: string } | undefined;
  if (e !== undefined) return [e.code, e.err_code, e.description];
  const c = r.config as Record<string, unknown>;
  return ['ok', r.name, c.durable_name ?? null, c.filter_subject ?? null, c.num_replicas, c.inactive_threshold ?? null];
}

/** A pull request's answers: [payload length] per message, [code, description, pending msgs, pending bytes] per status; ends at the first status. */
async function pull(nc: NatsConnection, consumer: string, body: unknown): Promise<unknown[]> {
  const inbox = createInbox();
  const sub = nc.subscribe(inbox);
  const got: unknown[] = [];
  nc.publish(`$JS.API.CONSUMER.MSG.NEXT.MB.${consumer}`, sc.encode(JSON.stringify(body)), { reply: inbox });
  for await (const m of sub) {
    if (m.headers?.code !== undefined && m.headers.code > 0) {
      got.push([m.headers.code, m.headers.description, m.headers.get('Nats-Pending-Messages'), m.headers.get('Nats-Pending-Bytes')]);
      break;
    }
    got.push(m.data.length);
    // Exactly filled: no status comes; a no_wait request on the same inbox is the marker.
    if (got.length === 1 && (body as { marker?: boolean }).marker === true) {
      nc.publish(`$JS.API.CONSUMER.MSG.NEXT.MB.${consumer}`, sc.encode(JSON.stringify({ batch: 1, no_wait: true, max_bytes: 1 })), { reply: inbox });
    }
  }
  sub.unsubscribe();
  return got;
}

async function scenario(server: string): Promise<Entry[]> {
  const nc = await connect({ servers: server });
  const out: Entry[] = [];
  const log = (label: string, v: unknown): void => void out.push([label, v]);
  try {
    await api(nc, 'STREAM.CREATE.MB', { name: 'MB', subjects: ['mb.>'] });
    const h = headers();
    h.set('X-Key', 'value');
    await nc.request('mb.a', sc.encode('0123456789'), { timeout: 3000 });
    await nc.request('mb.a', sc.encode('0123456789'), { timeout: 3000, headers: h });
    await nc.request('mb.bb', sc.encode('x'.repeat(100)), { timeout: 3000 });
    // Consumer names of one length: the ack reply subjects (counted) are as long on both.
    const pulls: Array<[string, Record<string, unknown>]> = [
      ['c1', { batch: 5, max_bytes: 50, expires: 1e9 }],
      ['c2', { batch: 5, max_bytes: 60, expires: 1e9 }],
      ['c3', { batch: 5, max_bytes: 150, expires: 1e9 }],
      ['c4', { batch: 5, max_bytes: 10, no_wait: true }],
      ['c5', { batch: 5, max_bytes: 1000, no_wait: true }],
      ['c6', { batch: 5, max_bytes: 55, expires: 1e9, marker: true }],
    ];
    for (const [name, body] of pulls) {
      await api(nc, `CONSUMER.CREATE.MB.${name}`, { stream_name: 'MB', config: { durable_name: name, ack_policy: 'explicit' } });
      const { marker: _m, ...req } = body;
      log(`pull ${JSON.stringify(req)}`, await pull(nc, name, body));
    }
    const base = { durable_name: 'd', ack_policy: 'explicit', filter_subject: 'mb.a' };
    const cr = async (label: string, cfg: Record<string, unknown>, subject = 'CONSUMER.CREATE.MB.d') =>
      log(label, outcome(await api(nc, subject, { stream_name: 'MB', config: cfg })));
    await cr('create', base);
    await cr('filter mb.bb', { ...base, filter_subject: 'mb.bb' });
    await cr('filter none', { ...base, filter_subject: undefined });
    await cr('filter outside', { ...base, filter_subject: 'x.y' });
    await cr('deliver policy', { ...base, deliver_policy: 'new' });
    await cr('ack policy', { ...base, ack_policy: 'all' });
    await cr('max waiting', { ...base, max_waiting: 10 });
    await cr('max waiting negative', { ...base, max_waiting: -1 });
    await cr('max batch negative', { ...base, max_batch: -1 });
    await cr('to push', { ...base, deliver_subject: 'dlv' });
    await cr('heartbeat on pull', { ...base, idle_heartbeat: 1e9 });
    await cr('flow control on pull', { ...base, flow_control: true });
    await cr('rate limit on pull', { ...base, rate_limit_bps: 1000 });
    await cr('num_replicas 1', { ...base, num_replicas: 1 });
    await cr('num_replicas 3', { ...base, num_replicas: 3 });
    await cr('num_replicas -1', { ...base, num_replicas: -1 });
    await cr('push p', { durable_name: 'p', ack_policy: 'explicit', deliver_subject: 'dp' }, 'CONSUMER.CREATE.MB.p');
    await cr('push max waiting', { durable_name: 'p', ack_policy: 'explicit', deliver_subject: 'dp', max_waiting: 5 }, 'CONSUMER.CREATE.MB.p');
    await cr('push flow control alone', { durable_name: 'p', ack_policy: 'explicit', deliver_subject: 'dp', flow_control: true }, 'CONSUMER.CREATE.MB.p');
    await cr('push heartbeat', { durable_name: 'p', ack_policy: 'explicit', deliver_subject: 'dp', idle_heartbeat: 1e9 }, 'CONSUMER.CREATE.MB.p');
    await cr('push to pull', { durable_name: 'p', ack_policy: 'explicit' }, 'CONSUMER.CREATE.MB.p');
    await cr('body name differs', { name: 'x', ack_policy: 'explicit' }, 'CONSUMER.CREATE.MB.y');
    await cr('durable differs', { name: 'x', durable_name: 'x', ack_policy: 'explicit' }, 'CONSUMER.CREATE.MB.y3');
    await cr('durable, body name differs', { name: 'x', durable_name: 'y4', ack_policy: 'explicit' }, 'CONSUMER.CREATE.MB.y4');
  } finally {
    await nc.close();
  }
  return out;
}

describe('e2e: JetStream consumers beside nats-server 2.9.10', () => {
  const t = sideBySide('nats-server-cons-', scenario);

  it('answers every step as nats-server does', () => {
    assert.deepEqual(t.ours, t.theirs);
  });

  it('max_bytes: 409 with what is left when a message does not fit, nothing when exactly filled', () => {
    assert.deepEqual(step(t.ours, 'pull {"batch":5,"max_bytes":50,"expires":1000000000}'), [[409, 'Message Size Exceeds MaxBytes', '5', '50']]);
    // 4 + 41 + 0 + 10 = 55 bytes for the first message: 5 left.
    assert.deepEqual(step(t.ours, 'pull {"batch":5,"max_bytes":60,"expires":1000000000}'), [10, [409, 'Message Size Exceeds MaxBytes', '4', '5']]);
    // Exactly filled: the next answer on the inbox is the marker request's (its 1 byte fits nothing).
    assert.deepEqual(step(t.ours, 'pull {"batch":5,"max_bytes":55,"expires":1000000000}'), [10, [409, 'Message Size Exceeds MaxBytes', '1', '1']]);
  });

  it('consumer updates and refusals with nats-server’s codes', () => {
    assert.deepEqual(step(t.ours, 'filter mb.bb'), ['ok', 'd', 'd', 'mb.bb', 0, null]);
    assert.deepEqual(step(t.ours, 'deliver policy'), [500, 10012, 'deliver policy can not be updated']);
    assert.deepEqual(step(t.ours, 'heartbeat on pull'), [400, 10088, 'consumer idle heartbeat requires a push based consumer']);
    assert.deepEqual(step(t.ours, 'num_replicas 3'), [500, 10074, 'replicas > 1 not supported in non-clustered mode']);
    assert.deepEqual(step(t.ours, 'body name differs'), ['ok', 'y', null, null, 0, 5e9]);
  });
});
