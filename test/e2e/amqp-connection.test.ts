/**
 * AMQP 0-9-1 connections end to end against bin/flowmq: the handshake with amqplib (server properties,
 * credentials through the users file, virtual hosts), and bad input from a raw client (protocol header, frame-end,
 * frame-max, unknown methods, content out of order), each answered with the spec's reply code while other
 * connections carry on.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import amqp from 'amqplib';
import { FlowmqProcess } from './harness.js';
import { amqpFixture, RawAmqp, amqpUrl, connectAmqp, defs, frame, startAmqpBroker } from './amqp-helpers.js';

describe('e2e: AMQP connections', () => {
  const f = amqpFixture();

  it('amqplib connects; the server announces its capabilities; a channel round-trips a message', async () => {
    const conn = await connectAmqp(f.broker);
    const props = (conn.connection as unknown as { serverProperties: Record<string, unknown> }).serverProperties;
    assert.equal(props.product, 'FlowMQ');
    const caps = props.capabilities as Record<string, boolean>;
    for (const c of [
      'publisher_confirms',
      'basic.nack',
      'consumer_cancel_notify',
      'exchange_exchange_bindings',
      'per_consumer_qos',
      'authentication_failure_close',
      'connection.blocked',
    ]) {
      assert.equal(caps[c], true, c);
    }
    const ch = await conn.createChannel();
    const q = await ch.assertQueue('', { exclusive: true });
    assert.match(q.queue, /^amq\.gen-/);
    ch.sendToQueue(q.queue, Buffer.from('hello'));
    const m = await new Promise<amqp.GetMessage | false>((resolve) => {
      const poll = async () => {
        const r = await ch.get(q.queue, { noAck: true });
        if (r) resolve(r);
        else setTimeout(() => void poll(), 20);
      };
      void poll();
    });
    assert.ok(m);
    assert.equal(m.content.toString(), 'hello');
    await conn.close();
  });

  it('a virtual host other than / is refused with 530', async () => {
    // amqplib reports the refusal without its code: the raw client checks the code.
    await assert.rejects(amqp.connect(amqpUrl(f.broker, 'guest', 'guest', 'other')), /ConnectionClose/);
    const raw = await RawAmqp.open(f.broker.ports.amqp!);
    raw.write(Buffer.from('AMQP\x00\x00\x09\x01', 'latin1'));
    await raw.method();
    raw.send('ConnectionStartOk', 0, { clientProperties: {}, mechanism: 'PLAIN', response: Buffer.from('\0guest\0guest'), locale: 'en_US' });
    await raw.method();
    raw.send('ConnectionTuneOk', 0, { channelMax: 0, frameMax: 131072, heartbeat: 0 });
    raw.send('ConnectionOpen', 0, { virtualHost: 'other', capabilities: '', insist: false });
    const close = await raw.method();
    assert.equal(close?.method, 'ConnectionClose');
    assert.equal(close?.fields.replyCode, 530);
    raw.close();
  });

  it('a wrong protocol header is answered with AMQP 0-9-1 and the socket closed', async () => {
    const raw = await RawAmqp.open(f.broker.ports.amqp!);
    raw.write(Buffer.from('AMQP\x00\x00\x08\x00', 'latin1'));
    const reply = await raw.bytes(8);
    assert.deepEqual([...reply], [0x41, 0x4d, 0x51, 0x50, 0, 0, 9, 1]);
    await raw.bytes(1); // then the close
    assert.equal(raw.closed, true);
  });

  it('an HTTP request on the AMQP port gets the protocol header too', async () => {
    const raw = await RawAmqp.open(f.broker.ports.amqp!);
    raw.write(Buffer.from('GET / HTTP/1.1\r\n\r\n'));
    const reply = await raw.bytes(8);
    assert.equal(reply.toString('latin1'), 'AMQP\x00\x00\x09\x01');
    raw.close();
  });

  async function expectConnectionClose(raw: RawAmqp, code: number): Promise<void> {
    for (;;) {
      const m = await raw.method();
      assert.ok(m, `expected connection.close ${code}, the socket closed`);
      if (m.method === 'ConnectionClose') {
        assert.equal(m.fields.replyCode, code, String(m.fields.replyText));
        raw.send('ConnectionCloseOk', 0, {});
        return;
      }
    }
  }

  it('a bad frame-end octet closes the connection with 501 (frame error); others carry on', async () => {
    const other = await connectAmqp(f.broker);
    const och = await other.createChannel();
    const raw = await RawAmqp.open(f.broker.ports.amqp!);
    await raw.handshake();
    const qos = defs.encodeMethod(defs.BasicQos as number, 1, { prefetchSize: 0, prefetchCount: 1, global: false });
    qos[qos.length - 1] = 0x00;
    raw.write(qos);
    await expectConnectionClose(raw, 501);
    raw.close();
    // Another connection is not affected.
    await och.assertQueue('after-501', { exclusive: true });
    await other.close();
  });

  it('a frame above the negotiated frame-max closes the connection with 501', async () => {
    const raw = await RawAmqp.open(f.broker.ports.amqp!);
    await raw.handshake({ frameMax: 4096 });
    raw.write(frame(3, 1, Buffer.alloc(5000)));
    await expectConnectionClose(raw, 501);
    raw.close();
  });

  it('before tune-ok a frame above frame-min-size (4096) closes the connection with 501', async () => {
    const raw = await RawAmqp.open(f.broker.ports.amqp!);
    raw.write(Buffer.from('AMQP\x00\x00\x09\x01', 'latin1'));
    assert.equal((await raw.method())?.method, 'ConnectionStart');
    raw.write(frame(1, 0, Buffer.alloc(5000)));
    await expectConnectionClose(raw, 501);
    raw.close();
  });

  it('an unknown class or method closes the connection with 540 (not implemented)', async () => {
    const raw = await RawAmqp.open(f.broker.ports.amqp!);
    await raw.handshake();
    const p = Buffer.alloc(4);
    p.writeUInt16BE(77, 0);
    p.writeUInt16BE(1, 2);
    raw.write(frame(1, 1, p));
    await expectConnectionClose(raw, 540);
    raw.close();
  });

  it('content before basic.publish closes the connection with 505 (unexpected frame)', async () => {
    const raw = await RawAmqp.open(f.broker.ports.amqp!);
    await raw.handshake();
    raw.write(frame(3, 1, Buffer.from('body without a header')));
    await expectConnectionClose(raw, 505);
    raw.close();
  });

  it('a method on a channel that is not open closes the connection with 504 (channel error)', async () => {
    const raw = await RawAmqp.open(f.broker.ports.amqp!);
    await raw.handshake();
    raw.send('BasicQos', 7, { prefetchSize: 0, prefetchCount: 1, global: false });
    await expectConnectionClose(raw, 504);
    raw.close();
  });

  it('a body larger than amqp-max-message-size closes the channel with 406, not the connection', async () => {
    const small = await startAmqpBroker(['--amqp-max-message-size', '1KiB']);
    try {
      const conn = await connectAmqp(small);
      const ch = await conn.createChannel();
      const closed = new Promise<Error>((resolve) => ch.on('error', resolve));
      ch.publish('amq.direct', 'x', Buffer.alloc(2048));
      const err = await closed;
      assert.match(err.message, /406/);
      assert.match(err.message, /larger than configured max size/);
      const ch2 = await conn.createChannel();
      await ch2.checkExchange('amq.direct');
      await conn.close();
    } finally {
      await small.stop();
      small.cleanup();
    }
  });
});

describe('e2e: AMQP authentication against the users file', () => {
  let broker: FlowmqProcess;
  before(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'flowmq-amqp-users-'));
    writeFileSync(join(dir, 'users.yaml'), '- username: alice\n  password: "wonder:land"\n');
    broker = await startAmqpBroker(['--users-file', join(dir, 'users.yaml')]);
  });
  after(async () => {
    await broker.stop();
    broker.cleanup();
  });

  it('PLAIN with the right password connects; a wrong one is refused with 403', async () => {
    const ok = await amqp.connect(amqpUrl(broker, 'alice', 'wonder:land'));
    await ok.close();
    await assert.rejects(amqp.connect(amqpUrl(broker, 'alice', 'wrong')), /403|ACCESS_REFUSED/);
    await assert.rejects(amqp.connect(amqpUrl(broker, 'guest', 'guest')), /403|ACCESS_REFUSED/);
  });

  it('AMQPLAIN is checked the same way', async () => {
    const url = `amqp://127.0.0.1:${broker.ports.amqp}`;
    const ok = await amqp.connect(url, { credentials: amqp.credentials.amqplain('alice', 'wonder:land') });
    await ok.close();
    await assert.rejects(amqp.connect(url, { credentials: amqp.credentials.amqplain('alice', 'nope') }), /403|ACCESS_REFUSED/);
  });

  it('user-id must be the authenticated user (406), as RabbitMQ checks it', async () => {
    const conn = await amqp.connect(amqpUrl(broker, 'alice', 'wonder:land'));
    const ch = await conn.createChannel();
    const q = await ch.assertQueue('', { exclusive: true });
    ch.sendToQueue(q.queue, Buffer.from('mine'), { userId: 'alice' });
    const got = await new Promise<amqp.GetMessage>((resolve) => {
      const poll = async () => {
        const r = await ch.get(q.queue, { noAck: true });
        if (r) resolve(r);
        else setTimeout(() => void poll(), 20);
      };
      void poll();
    });
    assert.equal(got.properties.userId, 'alice');
    const closed = new Promise<Error>((resolve) => ch.on('error', resolve));
    ch.sendToQueue(q.queue, Buffer.from('forged'), { userId: 'bob' });
    assert.match((await closed).message, /406/);
    await conn.close();
  });
});
