/**
 * SASL on Kafka listeners, byte level: what is advertised, the pre-authentication gate, SaslHandshake v0 (raw
 * tokens) and v1 + SaslAuthenticate, error codes 33/34/58 each followed by a close, and one adapter shared by two
 * listeners of which only one requires SASL.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Engine } from '../../../src/core/index.js';
import { MemoryUserStore, PasswordGuard, saslProvider } from '../../../src/control/index.js';
import { createKafkaAdapter, startKafkaListener, type KafkaAdapter } from '../../../src/protocols/kafka/index.js';
import {
  ApiKey,
  ApiVersionsApi,
  KafkaErrorCode as E,
  MetadataApi,
  SaslAuthenticateApi,
  SaslHandshakeApi,
  decodeResponse,
} from '../../../src/protocols/kafka/codec/index.js';
import type { ProtocolListener } from '../../../src/protocols/types.js';
import { MemoryStreams } from '../../helpers/memory-storage.js';
import { RawClient, captureLogger, metadataRequest as md, type CapturedLog } from './helpers.js';

const plainToken = (user: string, pw: string) => Buffer.from(`\0${user}\0${pw}`, 'utf8');

describe('kafka SASL', () => {
  let log: CapturedLog;
  let adapter: KafkaAdapter;
  let secured: ProtocolListener;
  let open: ProtocolListener;
  let guard: PasswordGuard;

  before(async () => {
    const m = new MemoryStreams();
    const engine = new Engine(m, m);
    log = captureLogger();
    const users = await MemoryUserStore.fromPasswords([{ username: 'alice', password: 'wonderland' }]);
    const ctx = { engine, logger: log.logger, brokerId: 1 };
    guard = new PasswordGuard(users);
    adapter = createKafkaAdapter(ctx, { sasl: saslProvider(guard, ['PLAIN', 'SCRAM-SHA-256']) });
    secured = await startKafkaListener(ctx, { host: '127.0.0.1', port: 0, sasl: true }, {}, adapter);
    open = await startKafkaListener(ctx, { host: '127.0.0.1', port: 0 }, {}, adapter);
  });

  after(async () => {
    await secured.close();
    await open.close();
    await guard.close();
  });

  it('advertises SaslHandshake 0-1 and SaslAuthenticate 0-2 only when SASL is configured', async () => {
    const c = await RawClient.connect(secured.address().port);
    const av = await c.call(ApiVersionsApi, 3, { clientSoftwareName: 'raw', clientSoftwareVersion: '1' });
    const ranges = av.apiKeys.filter((k) => k.apiKey === ApiKey.SaslHandshake || k.apiKey === ApiKey.SaslAuthenticate);
    assert.deepEqual(ranges, [
      { apiKey: ApiKey.SaslHandshake, minVersion: 0, maxVersion: 1 },
      { apiKey: ApiKey.SaslAuthenticate, minVersion: 0, maxVersion: 2 },
    ]);
    c.close();

    const bare = await startKafkaListener(
      { engine: new Engine(new MemoryStreams(), new MemoryStreams()), logger: log.logger, brokerId: 1 },
      { host: '127.0.0.1', port: 0 },
    );
    try {
      const d = await RawClient.connect(bare.address().port);
      const av2 = await d.call(ApiVersionsApi, 3, { clientSoftwareName: 'raw', clientSoftwareVersion: '1' });
      assert.ok(!av2.apiKeys.some((k) => k.apiKey === ApiKey.SaslHandshake || k.apiKey === ApiKey.SaslAuthenticate));
      // Not offered: answered like any API that is not (header + UNSUPPORTED_VERSION), connection open.
      d.send(d.frame(SaslHandshakeApi, 1, { mechanism: 'PLAIN' }));
      assert.equal((await d.next()).readInt16BE(4), E.UNSUPPORTED_VERSION);
      assert.equal(await d.closesWithin(100), false);
      d.close();
    } finally {
      await bare.close();
    }
  });

  it('closes a connection that sends another API before authenticating, with a log line', async () => {
    const c = await RawClient.connect(secured.address().port);
    c.send(c.frame(MetadataApi, 9, md(['x'])));
    assert.equal(await c.closesWithin(2000), true);
    assert.ok(log.entries('request before SASL authentication').some((e) => e.api === 'Metadata'));
    assert.equal(adapter.engine.getStream('x'), undefined, 'nothing was done for it');
  });

  it('PLAIN over SaslHandshake v1 + SaslAuthenticate v2 (flexible), then the other APIs work', async () => {
    const c = await RawClient.connect(secured.address().port);
    const hs = await c.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' });
    assert.deepEqual(hs, { errorCode: E.NONE, mechanisms: ['PLAIN', 'SCRAM-SHA-256'] });
    const auth = await c.call(SaslAuthenticateApi, 2, { authBytes: plainToken('alice', 'wonderland') });
    assert.deepEqual(auth, { errorCode: E.NONE, errorMessage: null, authBytes: Buffer.alloc(0), sessionLifetimeMs: 0 });
    const m = await c.call(MetadataApi, 9, md(['after.auth']));
    assert.equal(m.topics[0].errorCode, E.NONE);
    // KIP-368 re-authentication is not offered: a second exchange is an illegal state.
    const again = await c.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' });
    assert.equal(again.errorCode, E.ILLEGAL_SASL_STATE);
    assert.equal(await c.closesWithin(2000), true);
  });

  it('a wrong password gets SASL_AUTHENTICATION_FAILED (58), then the connection closes', async () => {
    const c = await RawClient.connect(secured.address().port);
    await c.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' });
    const auth = await c.call(SaslAuthenticateApi, 1, { authBytes: plainToken('alice', 'wrong') });
    assert.equal(auth.errorCode, E.SASL_AUTHENTICATION_FAILED);
    assert.match(auth.errorMessage ?? '', /invalid credentials with SASL mechanism PLAIN/);
    assert.equal(await c.closesWithin(2000), true);
    const line = log.entries('SASL authentication failed').at(-1);
    assert.equal(line?.username, 'alice');
    assert.ok(!log.lines.some((l) => l.includes('wonderland') || l.includes('"wrong"')), 'passwords are never logged');
  });

  it('a login the password guard cannot check now (busy) is closed without an answer, so that clients retry (KIP-152)', async () => {
    const m = new MemoryStreams();
    const ctx = { engine: new Engine(m, m), logger: log.logger, brokerId: 1 };
    const busy = new PasswordGuard(await MemoryUserStore.fromPasswords([{ username: 'alice', password: 'wonderland' }]));
    await busy.close(); // a closed guard answers every check busy
    const l = await startKafkaListener(ctx, { host: '127.0.0.1', port: 0, sasl: true }, {}, createKafkaAdapter(ctx, { sasl: saslProvider(busy, ['PLAIN']) }));
    try {
      const c = await RawClient.connect(l.address().port);
      assert.equal((await c.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' })).errorCode, E.NONE);
      c.send(c.frame(SaslAuthenticateApi, 1, { authBytes: plainToken('alice', 'wonderland') }));
      // Not SASL_AUTHENTICATION_FAILED, which clients treat as final: the connection just closes.
      await assert.rejects(c.next(5000), /connection closed/);
      assert.match(String(log.entries('SASL authentication failed').at(-1)?.reason), /server busy/);
    } finally {
      await l.close();
    }
  });

  it('an unsupported mechanism gets UNSUPPORTED_SASL_MECHANISM (33) with the offered list, then a close', async () => {
    const c = await RawClient.connect(secured.address().port);
    const hs = await c.call(SaslHandshakeApi, 1, { mechanism: 'GSSAPI' });
    assert.deepEqual(hs, { errorCode: E.UNSUPPORTED_SASL_MECHANISM, mechanisms: ['PLAIN', 'SCRAM-SHA-256'] });
    assert.equal(await c.closesWithin(2000), true);
  });

  it('SaslAuthenticate without a handshake gets ILLEGAL_SASL_STATE (34), then a close', async () => {
    const c = await RawClient.connect(secured.address().port);
    const auth = await c.call(SaslAuthenticateApi, 0, { authBytes: plainToken('alice', 'wonderland') });
    assert.equal(auth.errorCode, E.ILLEGAL_SASL_STATE);
    assert.equal(await c.closesWithin(2000), true);
  });

  it('SaslHandshake v0: raw size-prefixed tokens without a Kafka header, then normal requests', async () => {
    const c = await RawClient.connect(secured.address().port);
    const hs = await c.call(SaslHandshakeApi, 0, { mechanism: 'SCRAM-SHA-256' });
    assert.equal(hs.errorCode, E.NONE);
    // A SCRAM first message as a bare token; the answer is a bare server-first message.
    const raw = (s: string) => {
      const t = Buffer.from(s, 'utf8');
      const f = Buffer.alloc(4 + t.length);
      f.writeInt32BE(t.length, 0);
      t.copy(f, 4);
      return f;
    };
    c.send(raw('n,,n=alice,r=clientnonce'));
    const serverFirst = (await c.next()).toString('utf8');
    assert.match(serverFirst, /^r=clientnonce[^,]+,s=[^,]+,i=4096$/);
    // A wrong proof: with raw tokens there is no error frame, only the close.
    const nonce = /^r=([^,]+)/.exec(serverFirst)?.[1] ?? '';
    c.send(raw(`c=biws,r=${nonce},p=${Buffer.alloc(32).toString('base64')}`));
    assert.equal(await c.closesWithin(2000), true);

    const d = await RawClient.connect(secured.address().port);
    assert.equal((await d.call(SaslHandshakeApi, 0, { mechanism: 'PLAIN' })).errorCode, E.NONE);
    d.send(raw('\0alice\0wonderland'));
    assert.equal((await d.next()).length, 0, 'PLAIN success: an empty token');
    const m = await d.call(MetadataApi, 1, md(['raw.ok']));
    assert.equal(m.topics[0].errorCode, E.NONE);
    d.close();
  });

  it('the listener that does not require SASL serves at once, and still accepts an optional exchange', async () => {
    const c = await RawClient.connect(open.address().port);
    const m = await c.call(MetadataApi, 9, md(['open.t']));
    assert.equal(m.topics[0].errorCode, E.NONE);
    assert.equal(m.brokers[0].port, open.address().port, 'each listener advertises its own port');
    const hs = await c.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' });
    assert.equal(hs.errorCode, E.NONE);
    c.close();
  });

  it('answers SaslAuthenticate v0 in the v0 layout (no session lifetime)', async () => {
    const c = await RawClient.connect(secured.address().port);
    await c.call(SaslHandshakeApi, 1, { mechanism: 'PLAIN' });
    c.send(c.frame(SaslAuthenticateApi, 0, { authBytes: plainToken('alice', 'wonderland') }, 77));
    const frame = await c.next();
    // correlation id, error code 0, null error message (-1), empty bytes: nothing more.
    assert.equal(frame.toString('hex'), '0000004d' + '0000' + 'ffff' + '00000000');
    assert.equal(decodeResponse(SaslAuthenticateApi, 0, frame).body.errorCode, E.NONE);
    c.close();
  });
});
