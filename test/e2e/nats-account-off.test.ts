/**
 * An account without JetStream beside one with it, side by side with Debian's nats-server 2.9.10: nats-server's
 * config account B has no `jetstream` entry (A has `jetstream: enabled`); FlowMQ's namespace B has the quota
 * `jetstream: 0`. The same nats.js scenario runs against both and the transcripts must be equal: every JetStream API
 * of B answers `JetStream not enabled for account` (503, 10039) in its own response shape, a pull request and a direct
 * get are not answered (proved by the answer to a request sent after them on the same inbox), nats.js's
 * jetstreamManager() fails for B, and A uses JetStream meanwhile. Before: B had JetStream like every namespace.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, createInbox, StringCodec } from 'nats';
import { FlowmqProcess } from './harness.js';
import { startNatsServerJs, step, type Entry, type NatsServerJs } from './nats-side-by-side.js';

const sc = StringCodec();

/** nats-server: anonymous clients in A (startNatsServerJs's readiness check connects without credentials). */
const ACCOUNTS = `no_auth_user: a
accounts {
  A: { jetstream: enabled, users: [{ user: a, password: a }] }
  B: { users: [{ user: b, password: b }] }
}
`;

/** The API requests B makes (after `$JS.API.`), each with a body. */
const ANSWERED: Array<[string, unknown]> = [
  ['INFO', ''],
  ['STREAM.NAMES', {}],
  ['STREAM.LIST', {}],
  ['STREAM.CREATE.S', { name: 'S', subjects: ['s.>'] }],
  ['STREAM.UPDATE.S', { name: 'S', subjects: ['s.>'] }],
  ['STREAM.INFO.S', ''],
  ['STREAM.PURGE.S', ''],
  ['STREAM.DELETE.S', ''],
  ['STREAM.MSG.GET.S', { seq: 1 }],
  ['STREAM.MSG.DELETE.S', { seq: 1 }],
  ['CONSUMER.CREATE.S', { stream_name: 'S', config: { ack_policy: 'explicit' } }],
  ['CONSUMER.DURABLE.CREATE.S.D', { stream_name: 'S', config: { durable_name: 'D', ack_policy: 'explicit' } }],
  ['CONSUMER.NAMES.S', {}],
  ['CONSUMER.LIST.S', {}],
  ['CONSUMER.INFO.S.D', ''],
  ['CONSUMER.DELETE.S.D', ''],
];

/** Requests nats-server leaves unanswered for such an account. */
const UNANSWERED: Array<[string, unknown]> = [
  ['CONSUMER.MSG.NEXT.S.D', { batch: 1 }],
  ['DIRECT.GET.S', { seq: 1 }],
  ['STREAM.NAMES.extra', {}],
];

const body = (b: unknown): Uint8Array => sc.encode(typeof b === 'string' ? b : JSON.stringify(b));

async function scenario(url: string): Promise<Entry[]> {
  const out: Entry[] = [];
  const log = (label: string, v: unknown): void => void out.push([label, v]);
  const a = await connect({ servers: url, reconnect: false, user: 'a', pass: 'a' });
  const b = await connect({ servers: url, reconnect: false, user: 'b', pass: 'b' });
  try {
    for (const [api, req] of ANSWERED) {
      const m = await b.request(`$JS.API.${api}`, body(req), { timeout: 3000 });
      log(`B ${api}`, JSON.parse(sc.decode(m.data)));
    }
    // What reaches B's inbox, in order: the unanswered requests, then INFO as the marker.
    const inbox = createInbox();
    const got: string[] = [];
    const marker = new Promise<void>((resolve) => {
      const sub = b.subscribe(inbox);
      void (async () => {
        for await (const m of sub) {
          const j = m.data.length > 0 ? (JSON.parse(sc.decode(m.data)) as { type?: string }) : {};
          got.push(j.type ?? `status ${m.headers?.code ?? ''}`);
          if (j.type === 'io.nats.jetstream.api.v1.account_info_response') break;
        }
        resolve();
      })();
    });
    await b.flush();
    for (const [api, req] of UNANSWERED) b.publish(`$JS.API.${api}`, body(req), { reply: inbox });
    b.publish('$JS.API.INFO', body(''), { reply: inbox });
    await marker;
    log('B inbox before the marker', got);
    log(
      'B jetstreamManager()',
      await b.jetstreamManager().then(
        () => 'ok',
        (err: { code?: string; api_error?: { err_code?: number } }) => [err.code, err.api_error?.err_code ?? null],
      ),
    );
    const jsm = await a.jetstreamManager();
    log('A account info', (await jsm.getAccountInfo()).streams);
    const si = await jsm.streams.add({ name: 'S', subjects: ['s.>'] });
    log('A stream', si.config.name);
    const ack = await a.jetstream().publish('s.x', sc.encode('stored'));
    log('A publish', [ack.stream, ack.seq]);
    log('B INFO after A made a stream', JSON.parse(sc.decode((await b.request('$JS.API.INFO', body(''), { timeout: 3000 })).data)));
  } finally {
    await a.close();
    await b.close();
  }
  return out;
}

describe('e2e: a NATS account without JetStream beside one with it, side by side with nats-server 2.9.10', () => {
  let broker: FlowmqProcess;
  let server: NatsServerJs | undefined;
  let ours: Entry[];
  let theirs: Entry[];

  before(async () => {
    broker = await FlowmqProcess.start();
    // Nobody exists yet: loopback may use the admin API to make the first user, an admin who makes the rest.
    await broker.api('POST', '/api/v1/users', { username: 'admin', password: 'admin-pw', groups: ['admins'] });
    broker.credentials = { username: 'admin', password: 'admin-pw' };
    await broker.api('POST', '/api/v1/namespaces', { name: 'A' });
    await broker.api('POST', '/api/v1/users', { username: 'a', password: 'a', namespace: 'A' });
    await broker.api('POST', '/api/v1/namespaces', { name: 'B', quotas: { jetstream: 0 } });
    await broker.api('POST', '/api/v1/users', { username: 'b', password: 'b', namespace: 'B' });
    server = await startNatsServerJs('nats-server-account-off-', ACCOUNTS);
    ours = await scenario(broker.natsServer);
    theirs = await scenario(server.url);
  });
  after(async () => {
    server?.stop();
    await broker?.stop();
    broker?.cleanup();
  });

  it('answers every step as nats-server does', () => {
    if (process.env.INFO_DEBUG) for (let i = 0; i < theirs.length; i++) console.log(`OURS   ${JSON.stringify(ours[i])}\nTHEIRS ${JSON.stringify(theirs[i])}`);
    assert.deepEqual(ours, theirs);
  });

  it("answers B's API with 10039 in each API's shape, leaves pulls and direct gets unanswered, serves A", () => {
    const off = { code: 503, err_code: 10039, description: 'JetStream not enabled for account' };
    for (const [api] of ANSWERED) assert.deepEqual((step(ours, `B ${api}`) as { error: unknown }).error, off, api);
    assert.deepEqual(step(ours, 'B STREAM.NAMES'), {
      type: 'io.nats.jetstream.api.v1.stream_names_response',
      error: off,
      total: 0,
      offset: 0,
      limit: 0,
      streams: null,
    });
    assert.deepEqual(step(ours, 'B STREAM.PURGE.S'), { type: 'io.nats.jetstream.api.v1.stream_purge_response', error: off, purged: 0 });
    assert.deepEqual(step(ours, 'B inbox before the marker'), ['io.nats.jetstream.api.v1.account_info_response']);
    assert.deepEqual(step(ours, 'B jetstreamManager()'), ['503', 10039]);
    assert.deepEqual([step(ours, 'A account info'), step(ours, 'A stream'), step(ours, 'A publish')], [0, 'S', ['S', 1]]);
    assert.deepEqual((step(ours, 'B INFO after A made a stream') as { error: unknown }).error, off);
  });
});
