/**
 * allow_responses for directory users (src/protocols/nats/responses.ts): a policy's `respond` action on the request's
 * topic lets the receiver publish to its reply subject max times within ttl (--nats-response-max/-ttl), without any
 * publish permission; beyond that, after the ttl, without `respond`, or against a deny on the reply topic: nats-server's
 * Permissions Violation and nothing delivered (proved with a marker reply sent after, on the same connection).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { RawClient, makeAccess, startNats, until, type TestAccess } from './helpers.js';

const users = [
  { username: 'req', password: 'p' },
  { username: 'resp', password: 'p' },
];

async function setup(a: TestAccess, respond = true): Promise<void> {
  const d = a.directory;
  await d.putPolicy({ name: 'req', effect: 'allow', actions: ['publish', 'subscribe'], resources: ['topic:svc/#', 'topic:inbox/#'], principals: ['user:req'] });
  await d.putPolicy({
    name: 'resp',
    effect: 'allow',
    actions: respond ? ['subscribe', 'respond'] : ['subscribe'],
    resources: ['topic:svc/#'],
    principals: ['user:resp'],
  });
}

async function client(port: number, user: string): Promise<RawClient> {
  const c = await RawClient.connect(port);
  c.send(`CONNECT {"user":"${user}","pass":"p","verbose":false}\r\n`);
  await c.flush();
  return c;
}

/** The requester subscribed to inbox.>, the responder to svc.>; answers both. */
async function pair(port: number): Promise<{ req: RawClient; resp: RawClient }> {
  const req = await client(port, 'req');
  const resp = await client(port, 'resp');
  req.send('SUB inbox.> 1\r\n');
  resp.send('SUB svc.> 1\r\n');
  await Promise.all([req.flush(), resp.flush()]);
  return { req, resp };
}

/** A request from `req` on svc.x with reply inbox.<n>, waited for at the responder. */
async function request(req: RawClient, resp: RawClient, n: number): Promise<void> {
  const before = resp.msgs().length;
  req.send(`PUB svc.x inbox.${n} 1\r\nq\r\n`);
  await until(() => resp.msgs().length > before, 5000, `request ${n}`);
}

const replies = (c: RawClient) => c.msgs().map((m) => `${m.subject}=${m.payload.toString()}`);

describe('NATS allow_responses for directory users', () => {
  it('max replies per request; a further one is a Permissions Violation and not delivered; no other publish', async () => {
    const a = await makeAccess({ users, anonymous: false });
    await setup(a);
    const s = await startNats({}, { access: a, responses: { max: 2, ttlMs: 0 } });
    try {
      const { req, resp } = await pair(s.port);
      await request(req, resp, 1);
      for (const p of ['a', 'b', 'c']) resp.send(`PUB inbox.1 1\r\n${p}\r\n`);
      resp.send('PUB inbox.2 1\r\nx\r\n'); // never asked: no reply subject of a request
      resp.send('PUB svc.y 1\r\nx\r\n');
      await resp.flush();
      await request(req, resp, 3);
      resp.send('PUB inbox.3 1\r\nm\r\n');
      await until(() => replies(req).includes('inbox.3=m'), 5000, 'the marker reply');
      assert.deepEqual(replies(req), ['inbox.1=a', 'inbox.1=b', 'inbox.3=m']);
      assert.deepEqual(resp.errors(), [
        'Permissions Violation for Publish to "inbox.1"',
        'Permissions Violation for Publish to "inbox.2"',
        'Permissions Violation for Publish to "svc.y"',
      ]);
      req.close();
      resp.close();
    } finally {
      await s.close();
      await a.close();
    }
  });

  it('a reply after the ttl is refused', async () => {
    const a = await makeAccess({ users, anonymous: false });
    await setup(a);
    const s = await startNats({}, { access: a, responses: { max: 1, ttlMs: 50 } });
    try {
      const { req, resp } = await pair(s.port);
      await request(req, resp, 1);
      // Past the ttl (time passing is the point here, not a wait for something to happen).
      await new Promise((r) => setTimeout(r, 120));
      resp.send('PUB inbox.1 4\r\nlate\r\n');
      await request(req, resp, 2);
      resp.send('PUB inbox.2 1\r\nm\r\n');
      await until(() => replies(req).includes('inbox.2=m'), 5000, 'the marker reply');
      assert.deepEqual(replies(req), ['inbox.2=m']);
      assert.deepEqual(resp.errors(), ['Permissions Violation for Publish to "inbox.1"']);
      req.close();
      resp.close();
    } finally {
      await s.close();
      await a.close();
    }
  });

  it('without the respond action, or against a deny on the reply topic, no reply passes', async () => {
    for (const variant of ['no-respond', 'deny'] as const) {
      const a = await makeAccess({ users, anonymous: false });
      await setup(a, variant !== 'no-respond');
      if (variant === 'deny') {
        await a.directory.putPolicy({ name: 'resp-deny', effect: 'deny', actions: ['publish'], resources: ['topic:inbox/1'], principals: ['user:resp'] });
      }
      // The marker's reply subject: allowed for the responder by a plain publish policy in both variants.
      await a.directory.putPolicy({ name: 'resp-marker', effect: 'allow', actions: ['publish'], resources: ['topic:inbox/m'], principals: ['user:resp'] });
      const s = await startNats({}, { access: a });
      try {
        const { req, resp } = await pair(s.port);
        await request(req, resp, 1);
        resp.send('PUB inbox.1 1\r\nr\r\nPUB inbox.m 1\r\nm\r\n');
        await until(() => replies(req).includes('inbox.m=m'), 5000, 'the marker');
        assert.deepEqual(replies(req), ['inbox.m=m'], variant);
        assert.deepEqual(resp.errors(), ['Permissions Violation for Publish to "inbox.1"'], variant);
        req.close();
        resp.close();
      } finally {
        await s.close();
        await a.close();
      }
    }
  });
});
