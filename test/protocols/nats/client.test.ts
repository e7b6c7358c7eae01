import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, StringCodec } from 'nats';
import { startNats } from './helpers.js';

describe('NATS connection with the nats client', () => {
  it('pub/sub with a wildcard and max, request/reply, no-responders', async () => {
    const s = await startNats();
    const nc = await connect({ servers: `127.0.0.1:${s.port}` });
    const sc = StringCodec();
    const sub = nc.subscribe('a.*', { max: 2 });
    const got: string[] = [];
    const done = (async () => {
      for await (const m of sub) got.push(`${m.subject}:${sc.decode(m.data)}`);
    })();
    nc.publish('a.b', sc.encode('one'));
    nc.publish('a.c', sc.encode('two'));
    await done;
    assert.deepEqual(got, ['a.b:one', 'a.c:two']);
    nc.subscribe('svc', { callback: (_e, m) => m.respond(sc.encode('pong:' + sc.decode(m.data))) });
    const r = await nc.request('svc', sc.encode('x'));
    assert.equal(sc.decode(r.data), 'pong:x');
    await assert.rejects(nc.request('nobody', sc.encode('x'), { timeout: 2000 }), /503|no responders/i);
    await nc.close();
    await s.close();
  });
});
