/**
 * The NATS connection (src/protocols/nats/connection.ts) over loopback TCP with raw bytes: what nats-server 2.9.10
 * answers to each situation (+OK, -ERR texts, closes), the hostile-client limits, and the no-responders and
 * slow-consumer rules.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { makeMessage, type Message, type Subscriber, type Subscription } from '../../../src/core/index.js';
import { makeAccess } from './helpers.js';
import { GatedStreams } from '../../helpers/memory-storage.js';
import { RawClient, serverSockets, startNats, until } from './helpers.js';

const CONNECT = 'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n';

class Sink implements Subscriber {
  readonly got: Message[] = [];
  constructor(readonly id: string) {}
  deliver(msg: Message, _subs: Subscription[]): void {
    this.got.push(msg);
  }
}

describe('NATS connection: handshake and options', () => {
  it('INFO first: nats-server 2.9.10, proto 1, headers, max_payload, a client id, no auth_required without credentials', async () => {
    const s = await startNats({ maxPayload: 12345 });
    const c = await RawClient.connect(s.port);
    const info = (await c.waitFor((o) => o.op === 'info')) as { op: 'info'; info: Record<string, unknown> };
    assert.equal(info.info.version, '2.9.10');
    assert.equal(info.info.proto, 1);
    assert.equal(info.info.headers, true);
    assert.equal(info.info.max_payload, 12345);
    assert.equal(info.info.server_name, 'flowmq-1');
    assert.equal(typeof info.info.client_id, 'number');
    assert.equal(info.info.client_ip, '127.0.0.1');
    assert.equal(info.info.auth_required, undefined);
    c.close();
    await s.close();
  });

  it('verbose: +OK after CONNECT, SUB, PUB and UNSUB', async () => {
    const s = await startNats();
    const c = await RawClient.connect(s.port);
    c.send('CONNECT {"verbose":true}\r\nSUB v 1\r\nPUB v 2\r\nhi\r\nUNSUB 1\r\nPING\r\n');
    await c.waitFor((o) => o.op === 'pong');
    assert.deepEqual(
      c.ops.filter((o) => o.op !== 'info').map((o) => o.op),
      ['ok', 'ok', 'ok', 'msg', 'ok', 'pong'],
    );
    c.close();
    await s.close();
  });

  it('operations are case-insensitive and a PUB before CONNECT is served when no credentials are configured', async () => {
    const s = await startNats();
    const c = await RawClient.connect(s.port);
    c.send('sub lower 7\r\npub lower 3\r\nabc\r\nping\r\n');
    await c.waitFor((o) => o.op === 'pong');
    const m = c.msgs();
    assert.equal(m.length, 1);
    assert.equal(m[0]!.sid, '7');
    assert.equal(m[0]!.payload.toString(), 'abc');
    c.close();
    await s.close();
  });

  it("no CONNECT within the auth timeout: -ERR 'Authentication Timeout' and close", async () => {
    const s = await startNats({ authTimeoutMs: 100 });
    const c = await RawClient.connect(s.port);
    await c.closed;
    assert.deepEqual(c.errors(), ['Authentication Timeout']);
    assert.equal(s.adapter.stats.authTimeouts, 1);
    await s.close();
  });

  it('the server PINGs a silent client and closes it as stale after max pings out', async () => {
    const s = await startNats({ pingIntervalMs: 40, maxPingsOut: 2, authTimeoutMs: 5000 });
    const c = await RawClient.connect(s.port);
    c.send(CONNECT);
    await c.closed;
    assert.equal(c.ops.filter((o) => o.op === 'ping').length, 2);
    assert.deepEqual(c.errors(), ['Stale Connection']);
    assert.equal(s.adapter.stats.staleConnections, 1);
    await s.close();
  });

  it('a client that answers PINGs stays connected', async () => {
    // Three intervals of slack for each answer (a loaded machine must not make the test's client look stale), and
    // more PINGs answered than may be outstanding: only the PONGs keep it connected.
    const s = await startNats({ pingIntervalMs: 150, maxPingsOut: 3, authTimeoutMs: 5000 });
    const c = await RawClient.connect(s.port);
    c.send(CONNECT);
    let answered = 0;
    while (answered < 5) {
      const from = c.ops.length;
      await c.waitFor((o) => o.op === 'ping', from);
      c.send('PONG\r\n');
      answered++;
    }
    await c.flush();
    assert.equal(c.isClosed, false);
    assert.deepEqual(c.errors(), []);
    c.close();
    await s.close();
  });

  it('no_responders without headers is refused as nats-server does', async () => {
    const s = await startNats();
    const c = await RawClient.connect(s.port);
    c.send('CONNECT {"no_responders":true}\r\n');
    await c.closed;
    assert.deepEqual(c.errors(), ['no responders requires headers support']);
    await s.close();
  });

  it('HPUB from a client that did not announce headers: -ERR and close', async () => {
    const s = await startNats();
    const c = await RawClient.connect(s.port);
    c.send('CONNECT {}\r\nHPUB h 12 14\r\nNATS/1.0\r\n\r\nhi\r\n');
    await c.closed;
    assert.deepEqual(c.errors(), ['message headers not supported']);
    await s.close();
  });
});

describe('NATS connection: errors that keep the connection and errors that close it', () => {
  it('a publish subject the unified topic space cannot hold (+, #) is refused; the connection stays', async () => {
    const s = await startNats();
    const c = await RawClient.connect(s.port);
    c.send(`${CONNECT}SUB > 1\r\nPUB a.+ 1\r\nx\r\nPUB a.# 1\r\nx\r\nPUB ok 1\r\ny\r\n`);
    await c.flush();
    assert.deepEqual(c.errors(), ['Invalid Publish Subject', 'Invalid Publish Subject']);
    assert.deepEqual(
      c.msgs().map((m) => m.subject),
      ['ok'],
    );
    assert.equal(s.adapter.stats.invalidSubjects, 2);
    c.close();
    await s.close();
  });

  it('pedantic: a wildcard publish subject is refused; without pedantic it is a literal token', async () => {
    const s = await startNats();
    const c = await RawClient.connect(s.port);
    c.send('CONNECT {"pedantic":true}\r\nSUB a.> 1\r\nPUB a.* 1\r\nx\r\nPUB a..b 1\r\nx\r\n');
    await c.flush();
    assert.deepEqual(c.errors(), ['Invalid Publish Subject', 'Invalid Publish Subject']);
    c.send('CONNECT {"pedantic":false}\r\nPUB a.* 1\r\nz\r\n');
    await c.flush();
    assert.deepEqual(
      c.msgs().map((m) => `${m.subject}=${m.payload}`),
      ['a.*=z'],
    );
    c.close();
    await s.close();
  });

  it("SUB to an invalid subject: -ERR 'Invalid Subject', the connection stays", async () => {
    const s = await startNats();
    const c = await RawClient.connect(s.port);
    c.send(`${CONNECT}SUB a..b 1\r\nSUB a.>.b 2\r\nSUB .a 3\r\nSUB good 4\r\nPUB good 1\r\nx\r\n`);
    await c.flush();
    assert.deepEqual(c.errors(), ['Invalid Subject', 'Invalid Subject', 'Invalid Subject']);
    assert.deepEqual(
      c.msgs().map((m) => m.sid),
      ['4'],
    );
    c.close();
    await s.close();
  });

  it('subscriptions over the per-connection limit are refused; the others keep working', async () => {
    const s = await startNats({ maxSubscriptions: 2 });
    const c = await RawClient.connect(s.port);
    c.send(`${CONNECT}SUB l.a 1\r\nSUB l.b 2\r\nSUB l.c 3\r\nPUB l.a 1\r\nx\r\nPUB l.c 1\r\nx\r\n`);
    await c.flush();
    assert.deepEqual(c.errors(), ['Maximum Subscriptions Exceeded']);
    assert.deepEqual(
      c.msgs().map((m) => m.sid),
      ['1'],
    );
    // UNSUB frees a place.
    c.send('UNSUB 2\r\nSUB l.c 3\r\nPUB l.c 1\r\nx\r\n');
    await c.flush();
    assert.deepEqual(
      c.msgs().map((m) => m.sid),
      ['1', '3'],
    );
    c.close();
    await s.close();
  });

  it("an unknown operation closes that connection with nats-server's text; others are unaffected", async () => {
    const s = await startNats();
    const bad = await RawClient.connect(s.port);
    const good = await RawClient.connect(s.port);
    good.send(`${CONNECT}SUB x 1\r\n`);
    await good.flush();
    bad.send(`${CONNECT}FOO bar\r\n`);
    await bad.closed;
    assert.deepEqual(bad.errors(), ['Unknown Protocol Operation']);
    good.send('PUB x 2\r\nok\r\n');
    await good.flush();
    assert.equal(good.msgs().length, 1);
    assert.equal(s.adapter.stats.protocolErrors, 1);
    assert.ok(s.logs.some((l) => l.msg === 'nats: protocol error'));
    good.close();
    await s.close();
  });

  it('a PUB larger than max_payload is refused at the control line, before its payload arrives', async () => {
    const s = await startNats({ maxPayload: 1024 });
    const c = await RawClient.connect(s.port);
    c.send(`${CONNECT}PUB big 1025\r\n`);
    await c.closed;
    assert.deepEqual(c.errors(), ['Maximum Payload Violation']);
    await s.close();
  });

  it("connections over the limit get -ERR 'maximum connections exceeded'", async () => {
    const s = await startNats({ maxConnections: 1 });
    const a = await RawClient.connect(s.port);
    a.send(CONNECT);
    await a.flush();
    const b = await RawClient.connect(s.port);
    await b.closed;
    assert.deepEqual(b.errors(), ['maximum connections exceeded']);
    assert.equal(s.adapter.stats.connectionsRefused, 1);
    assert.equal(a.isClosed, false);
    a.close();
    await s.close();
  });
});

describe('NATS connection: authentication', () => {
  it('with a token configured, any operation before CONNECT is an Authorization Violation, before its payload is read', async () => {
    const s = await startNats({}, { token: 'tok' });
    const c = await RawClient.connect(s.port);
    const info = (await c.waitFor((o) => o.op === 'info')) as { op: 'info'; info: Record<string, unknown> };
    assert.equal(info.info.auth_required, true);
    // A large announced payload: refused at once, not buffered.
    c.send('PUB x 1000000\r\n');
    await c.closed;
    assert.deepEqual(c.errors(), ['Authorization Violation']);
    await s.close();
  });

  it('before CONNECT only one control line is buffered: a longer first line is refused as nats-server refuses it', async () => {
    const s = await startNats({ maxControlLine: 128 }, { token: 'tok' });
    const c = await RawClient.connect(s.port);
    c.send(`CONNECT {"auth_token":"${'x'.repeat(200)}"`);
    await c.closed;
    assert.deepEqual(c.errors(), ['maximum control line exceeded']);
    await s.close();
  });

  it('operations pipelined behind CONNECT wait for its check, then run in order', async () => {
    const s = await startNats({}, { token: 'tok' });
    const c = await RawClient.connect(s.port);
    c.send('CONNECT {"auth_token":"tok","verbose":true}\r\nSUB p 1\r\nPUB p 2\r\nhi\r\nPING\r\n');
    await c.waitFor((o) => o.op === 'pong');
    assert.deepEqual(
      c.ops.filter((o) => o.op !== 'info').map((o) => o.op),
      ['ok', 'ok', 'ok', 'msg', 'pong'],
    );
    c.close();
    await s.close();
  });

  it('a wrong token or none: Authorization Violation and close; failures are counted and logged rate limited', async () => {
    const s = await startNats({}, { token: 'tok' });
    for (const connect of ['CONNECT {"auth_token":"nope"}\r\n', 'CONNECT {}\r\n', 'CONNECT {"user":"u","pass":"p"}\r\n']) {
      const c = await RawClient.connect(s.port);
      c.send(connect);
      await c.closed;
      assert.deepEqual(c.errors(), ['Authorization Violation'], connect);
    }
    assert.equal(s.adapter.stats.authFailures, 3);
    assert.ok(s.logs.some((l) => l.msg === 'nats: login refused'));
    await s.close();
  });

  it('repeated token failures from one address are slowed by the throttle', async () => {
    const s = await startNats({}, { token: 'tok' });
    // The throttle lets a few failures through at once, then spaces the checks; a right token afterwards still
    // gets in (once its turn comes).
    for (let i = 0; i < 5; i++) {
      const c = await RawClient.connect(s.port);
      c.send('CONNECT {"auth_token":"bad"}\r\n');
      await c.closed;
    }
    assert.ok(s.access.guard.throttle.failures('address', '127.0.0.1') >= 5);
    const ok = await RawClient.connect(s.port);
    ok.send('CONNECT {"auth_token":"tok"}\r\n');
    await ok.flush();
    assert.deepEqual(ok.errors(), []);
    ok.close();
    await s.close();
  });
});

describe('NATS connection: users of the directory (access.password)', () => {
  const guard = async (anonymous: boolean) => makeAccess({ users: [{ username: 'alice', password: 'wonder' }], anonymous });

  it('user/pass checked by the guard; operations pipelined behind CONNECT wait for the check; a wrong password is refused', async () => {
    const g = await guard(false);
    const s = await startNats({}, { access: g });
    const ok = await RawClient.connect(s.port);
    ok.send('CONNECT {"user":"alice","pass":"wonder"}\r\nSUB a 1\r\nPUB a 1\r\nx\r\nPING\r\n');
    await ok.waitFor((o) => o.op === 'pong');
    assert.equal(ok.msgs().length, 1);
    const bad = await RawClient.connect(s.port);
    bad.send('CONNECT {"user":"alice","pass":"nope"}\r\nPING\r\n');
    await bad.closed;
    assert.deepEqual(bad.errors(), ['Authorization Violation']);
    assert.equal(
      bad.ops.some((o) => o.op === 'pong'),
      false,
      'nothing after the refused CONNECT was served',
    );
    const anon = await RawClient.connect(s.port);
    anon.send('CONNECT {}\r\n');
    await anon.closed;
    assert.deepEqual(anon.errors(), ['Authorization Violation']);
    assert.equal(g.guard.stats.bad, 1);
    ok.close();
    await s.close();
    await g.close();
  });

  it('with anonymous access allowed, a client without CONNECT is served as nats-server serves it', async () => {
    const g = await guard(true);
    const s = await startNats({}, { access: g });
    const c = await RawClient.connect(s.port);
    const info = (await c.waitFor((o) => o.op === 'info')) as { op: 'info'; info: Record<string, unknown> };
    assert.equal(info.info.auth_required, undefined);
    c.send('SUB a 1\r\nPUB a 1\r\nx\r\n');
    await c.flush();
    assert.equal(c.msgs().length, 1);
    assert.deepEqual(c.errors(), []);
    c.close();
    await s.close();
    await g.close();
  });
});

describe('NATS connection: deliveries and mapping', () => {
  it('a NATS publish reaches the core as a unified topic with headers, reply and Nats-Msg-Id', async () => {
    const s = await startNats();
    const sink = new Sink('sink');
    s.engine.subscribe('orders/#', sink, { qos: 0 });
    const c = await RawClient.connect(s.port);
    const hdr = 'NATS/1.0\r\nNats-Msg-Id: m-1\r\nX-A: 1\r\nX-A: 2\r\n\r\n';
    c.send(`${CONNECT}SUB _INBOX.r 9\r\nHPUB orders.new.a/b _INBOX.r ${hdr.length} ${hdr.length + 4}\r\n${hdr}body\r\n`);
    await c.flush();
    assert.equal(sink.got.length, 1);
    const m = sink.got[0]!;
    assert.equal(m.topic, 'orders/new/a.b');
    assert.equal(m.responseTopic, '_INBOX/r');
    assert.equal(m.messageId, 'm-1');
    assert.deepEqual(
      m.headers.map((h) => `${h.key}=${h.value?.toString()}`),
      ['Nats-Msg-Id=m-1', 'X-A=1', 'X-A=2'],
    );
    assert.equal(m.payload.toString(), 'body');
    c.close();
    await s.close();
  });

  it('an HPUB with a zero-length header block is a message without headers (nats.js sends one for js.publish)', async () => {
    const s = await startNats();
    const c = await RawClient.connect(s.port);
    c.send(`${CONNECT}SUB z 1\r\nHPUB z 0 2\r\nhi\r\n`);
    await c.flush();
    assert.deepEqual(c.errors(), []);
    const m = c.msgs();
    assert.equal(m.length, 1);
    assert.equal(m[0]!.headers, null);
    assert.equal(m[0]!.payload.toString(), 'hi');
    c.close();
    await s.close();
  });

  it('header blocks pass between NATS clients byte for byte, as nats-server passes them on unread', async () => {
    const s = await startNats();
    const sink = new Sink('sink');
    s.engine.subscribe('hb/#', sink, { qos: 0 });
    const sub = await RawClient.connect(s.port);
    sub.send(`${CONNECT}SUB hb.> 1\r\n`);
    await sub.flush();
    const pub = await RawClient.connect(s.port);
    pub.send(CONNECT);
    const blocks = [
      'NATS/1.0\r\n\r\n', // no entries
      'NATS/1.0   503    No Responders  \r\n\r\n', // a status line with extra blanks
      'NATS/1.0 abc\r\n\r\n', // a status that is no number
      'NATS/1.0\r\nX-Key:   spaced value  \r\nx-key:second\r\n\r\n', // blanks and case as sent
      'NATS/1.1\r\nnot a header line\r\n\r\n', // not a block FlowMQ can read at all
    ];
    blocks.forEach((b, i) => pub.send(`HPUB hb.${i} ${Buffer.byteLength(b)} ${Buffer.byteLength(b) + 2}\r\n${b}p${i}\r\n`));
    pub.send('PUB hb.end 3\r\nend\r\n');
    await pub.flush();
    await sub.waitFor((o) => o.op === 'msg' && o.subject === 'hb.end');
    assert.deepEqual(pub.errors(), []);
    assert.equal(pub.isClosed, false);
    const got = sub.msgs();
    assert.deepEqual(
      got.map((m) => m.subject),
      [...blocks.map((_, i) => `hb.${i}`), 'hb.end'],
    );
    blocks.forEach((b, i) => {
      assert.equal(got[i]!.headers?.toString('latin1'), b, `block ${i} as sent`);
      assert.equal(got[i]!.payload.toString(), `p${i}`);
    });
    // The other protocols see what could be read: the entries and the status of the blocks that parse.
    const byTopic = new Map(sink.got.map((m) => [m.topic, m]));
    assert.equal(byTopic.get('hb/1')!.status, '503 No Responders');
    assert.deepEqual(
      byTopic.get('hb/3')!.headers.map((h) => `${h.key}=${h.value?.toString()}`),
      ['X-Key=spaced value', 'x-key=second'],
    );
    assert.deepEqual(byTopic.get('hb/4')!.headers, []);
    sub.close();
    pub.close();
    await s.close();
  });

  it('a core message is delivered with its properties as headers (HMSG) to a headers client, as MSG to others', async () => {
    const s = await startNats();
    const h = await RawClient.connect(s.port);
    const plain = await RawClient.connect(s.port);
    h.send(`${CONNECT}SUB dev.* 1\r\n`);
    plain.send('CONNECT {}\r\nSUB dev.* 1\r\n');
    await h.flush();
    await plain.flush();
    s.engine.publish(
      makeMessage('dev/x.y', Buffer.from('p'), {
        headers: [
          { key: 'k', value: Buffer.from('v') },
          { key: 'empty', value: null },
          { key: 'bad key', value: Buffer.from('dropped') },
          { key: 'größe', value: Buffer.from('dropped') },
          { key: 'nl', value: Buffer.from('two\r\nlines') },
        ],
        contentType: 'text/plain',
        correlationData: Buffer.from([0xff, 0x00]),
        messageId: 'id-7',
        responseTopic: 'reply/to.me',
      }),
    );
    await h.flush();
    await plain.flush();
    const hm = h.msgs()[0]!;
    assert.equal(hm.subject, 'dev.x/y');
    assert.equal(hm.reply, 'reply.to/me');
    assert.equal(
      hm.headers!.toString(),
      'NATS/1.0\r\nk: v\r\nempty: \r\nnl: two  lines\r\nContent-Type: text/plain\r\nCorrelation-Id: base64:/wA=\r\nNats-Msg-Id: id-7\r\n\r\n',
    );
    const pm = plain.msgs()[0]!;
    assert.equal(pm.headers, null);
    assert.equal(pm.payload.toString(), 'p');
    h.close();
    plain.close();
    await s.close();
  });

  it('deliverTopic names the MSG subject and status renders the NATS/1.0 status line', async () => {
    const s = await startNats();
    const c = await RawClient.connect(s.port);
    c.send(`${CONNECT}SUB _INBOX.pull 5\r\n`);
    await c.flush();
    s.engine.publish(makeMessage('_INBOX/pull', Buffer.from('rec'), { deliverTopic: 'orders/new' }));
    s.engine.publish(makeMessage('_INBOX/pull', Buffer.alloc(0), { status: '404 No Messages' }));
    await c.flush();
    const [a, b] = c.msgs();
    assert.equal(a!.subject, 'orders.new');
    assert.equal(a!.payload.toString(), 'rec');
    assert.equal(b!.subject, '_INBOX.pull');
    assert.equal(b!.headers!.toString(), 'NATS/1.0 404 No Messages\r\n\r\n');
    c.close();
    await s.close();
  });

  it("no-responders: 503 on the requester's own inbox subscription when nothing is reached, none when a stream captured it", async () => {
    const s = await startNats();
    await s.engine.createStream({ name: 'captured', partitions: 1, bindings: ['kept/#'] });
    const c = await RawClient.connect(s.port);
    c.send(`${CONNECT}SUB _INBOX.x.* 1\r\nPUB nobody _INBOX.x.1 1\r\na\r\nPUB kept.one _INBOX.x.2 1\r\nb\r\n`);
    await c.flush();
    const m = c.msgs();
    assert.equal(m.length, 1);
    assert.equal(m[0]!.subject, '_INBOX.x.1');
    assert.equal(m[0]!.headers!.toString(), 'NATS/1.0 503\r\n\r\n');
    assert.equal(m[0]!.payload.length, 0);
    assert.equal(s.adapter.stats.noResponders, 1);
    c.close();
    await s.close();
  });

  it("a request goes through the adapter's NatsPublisher (JetStream's hook) with its reply as a unified topic", async () => {
    const seen: string[] = [];
    const s = await startNats({}, {}, (engine) => ({
      publish(msg, reply) {
        seen.push(`${msg.topic} ${reply}`);
        const info = { delivered: 0, captured: [], queued: 0 };
        engine.publish(msg, info);
        return info;
      },
    }));
    const c = await RawClient.connect(s.port);
    const info = (await c.waitFor((o) => o.op === 'info')) as { op: 'info'; info: Record<string, unknown> };
    assert.equal(info.info.jetstream, true);
    c.send(`${CONNECT}PUB js.a _INBOX.q 1\r\nx\r\nPUB js.b 1\r\ny\r\n`);
    await c.flush();
    assert.deepEqual(seen, ['js/a _INBOX/q']);
    c.close();
    await s.close();
  });

  it('echo off: a queue group member on the publishing connection passes its share to the other members', async () => {
    const s = await startNats();
    const self = await RawClient.connect(s.port);
    const other = await RawClient.connect(s.port);
    self.send('CONNECT {"echo":false}\r\nSUB e.q grp 1\r\n');
    other.send(`${CONNECT}SUB e.q grp 1\r\n`);
    await self.flush();
    await other.flush();
    for (let i = 0; i < 10; i++) self.send(`PUB e.q 1\r\n${i}\r\n`);
    await self.flush();
    await until(() => other.msgs().length === 10, 5000, 'every message at the other member');
    assert.equal(self.msgs().length, 0);
    self.close();
    other.close();
    await s.close();
  });

  it('queue subscriptions of the same group share, plain ones all get it; UNSUB max counts per subscription', async () => {
    const s = await startNats();
    const a = await RawClient.connect(s.port);
    const b = await RawClient.connect(s.port);
    a.send(`${CONNECT}SUB g.x grp 1\r\nSUB g.x 2\r\nUNSUB 2 2\r\n`);
    b.send(`${CONNECT}SUB g.x grp 1\r\n`);
    await a.flush();
    await b.flush();
    const p = await RawClient.connect(s.port);
    p.send(CONNECT);
    for (let i = 0; i < 10; i++) p.send(`PUB g.x 1\r\n${i}\r\n`);
    await p.flush();
    await a.flush();
    await b.flush();
    const grpA = a.msgs().filter((m) => m.sid === '1').length;
    const grpB = b.msgs().length;
    assert.equal(grpA + grpB, 10);
    assert.ok(grpA > 0 && grpB > 0);
    assert.equal(a.msgs().filter((m) => m.sid === '2').length, 2);
    a.close();
    b.close();
    p.close();
    await s.close();
  });
});

describe('NATS connection: slow consumers', () => {
  it('a subscriber that does not read is closed past max pending bytes, logged and counted; others keep getting messages', async () => {
    const s = await startNats({ maxPending: 128 * 1024 });
    const slow = await RawClient.connect(s.port);
    slow.send(`${CONNECT}SUB sc 1\r\n`);
    await slow.flush();
    slow.socket.pause();
    const good = await RawClient.connect(s.port);
    good.send(`${CONNECT}SUB sc 1\r\n`);
    await good.flush();
    const p = await RawClient.connect(s.port);
    p.send(CONNECT);
    const payload = 'x'.repeat(4096);
    let sent = 0;
    while (s.adapter.stats.slowConsumers === 0) {
      for (let i = 0; i < 32; i++) p.send(`PUB sc ${payload.length}\r\n${payload}\r\n`);
      sent += 32;
      await p.flush();
      assert.ok(sent < 200_000, 'never detected');
    }
    p.send(`PUB sc 3\r\nend\r\n`);
    sent++;
    await p.flush();
    await until(() => good.msgs().length === sent, 10_000, 'good subscriber got everything');
    assert.ok(s.logs.some((l) => l.msg === 'Slow Consumer Detected'));
    assert.equal(s.adapter.connections(), 2);
    slow.close();
    good.close();
    p.close();
    await s.close();
  });

  it('maxPendingMsgs bounds the messages the socket has not taken', async () => {
    const s = await startNats({ maxPendingMsgs: 1000 });
    const slow = await RawClient.connect(s.port);
    slow.send(`${CONNECT}SUB sm 1\r\n`);
    await slow.flush();
    slow.socket.pause();
    const p = await RawClient.connect(s.port);
    p.send(CONNECT);
    let sent = 0;
    const batch = 'PUB sm 16\r\n0123456789abcdef\r\n'.repeat(1000);
    while (s.adapter.stats.slowConsumers === 0) {
      p.send(batch);
      sent += 1000;
      await p.flush();
      assert.ok(sent < 5_000_000, 'never detected');
    }
    assert.equal(s.adapter.connections(), 1);
    slow.close();
    p.close();
    await s.close();
  });
});

describe('NATS connection: durable writes and shutdown', () => {
  it('publishes captured by a stream are not awaited, but past 10,000 unsettled writes the publisher is not read until they settle', async () => {
    const storage = new GatedStreams();
    storage.hold = true;
    const s = await startNats({}, {}, undefined, storage);
    await s.engine.createStream({ name: 'held', partitions: 1, bindings: ['held/#'] });
    const c = await RawClient.connect(s.port);
    c.send(CONNECT);
    await c.flush();
    c.send('PUB held.x 1\r\nx\r\n'.repeat(10_000) + 'PING\r\n');
    await until(() => storage.held >= 10_000, 10_000, 'held writes');
    const server = [...serverSockets][0]!;
    await until(() => server.isPaused(), 10_000, 'the publisher socket paused');
    storage.release();
    await c.waitFor((o) => o.op === 'pong');
    assert.equal(server.isPaused(), false);
    c.close();
    await s.close();
  });

  it('a failed durable write is counted and logged; the connection stays', async () => {
    const storage = new GatedStreams();
    storage.fail = true;
    const s = await startNats({}, {}, undefined, storage);
    await s.engine.createStream({ name: 'failing', partitions: 1, bindings: ['failing/#'] });
    const c = await RawClient.connect(s.port);
    c.send(`${CONNECT}PUB failing.x 1\r\nx\r\n`);
    await c.flush();
    await until(() => s.adapter.stats.writeFailures === 1, 5000, 'the failure counted');
    assert.ok(s.logs.some((l) => l.msg === 'nats: a publish could not be stored'));
    await c.flush();
    c.close();
    await s.close();
  });

  it('a stream that closed before the adapter got it is let go at once (closeAll does not wait for it)', async () => {
    const s = await startNats();
    const { PassThrough } = await import('node:stream');
    const gone = new PassThrough();
    gone.destroy();
    await new Promise((r) => setImmediate(r));
    s.adapter.handle(gone, { remoteAddress: '127.0.0.9', remotePort: 1, tls: false }, { available: false, required: false });
    await Promise.race([
      s.adapter.closeAll(),
      new Promise((_, reject) => setTimeout(() => reject(new Error('closeAll waits for a stream that is gone')), 5000).unref()),
    ]);
    assert.equal(s.adapter.connections(), 0);
    await s.close();
  });

  it('closeAll (broker shutdown) flushes what is queued and closes every connection', async () => {
    const s = await startNats();
    const a = await RawClient.connect(s.port);
    const b = await RawClient.connect(s.port);
    a.send(`${CONNECT}SUB bye 1\r\n`);
    b.send(CONNECT);
    await a.flush();
    await b.flush();
    s.engine.publish(makeMessage('bye', Buffer.from('last')));
    await s.adapter.closeAll();
    await a.closed;
    await b.closed;
    assert.deepEqual(
      a.msgs().map((m) => m.payload.toString()),
      ['last'],
    );
    assert.equal(s.adapter.connections(), 0);
    await s.close();
  });
});
