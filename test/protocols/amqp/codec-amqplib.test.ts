/**
 * The codec against a real client on a real socket: a minimal AMQP server made only of the codec (FrameReader,
 * decodeMethod, decodeContentHeader, encodeMethodFrame, encodeMessageFrames) takes an amqplib connection through
 * the handshake, a channel, a publish and a consume, both with every basic property, every header type and a
 * body larger than frame-max. What amqplib sends must decode to what it was given, and what we send must reach
 * its callbacks intact.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { test } from 'node:test';
import amqplib from 'amqplib';
import {
  FRAME_BODY,
  FRAME_HEADER,
  FRAME_METHOD,
  FrameReader,
  Typed,
  decodeContentHeader,
  decodeMethod,
  encodeMessageFrames,
  encodeMethodFrame,
  type AmqpMethod,
  type BasicProperties,
  type ContentHeader,
  type Method,
} from '../../../src/protocols/amqp/codec/index.js';
import { plain } from './helpers.js';

const FRAME_MAX = 131072;

interface Published {
  method: Method<'basic.publish'>;
  header: ContentHeader;
  body: Buffer;
}

/** Everything a connection sent, and a promise per interesting event. */
class MiniServer {
  readonly methods: AmqpMethod[] = [];
  readonly published: Published[] = [];
  private waiters: Array<() => void> = [];

  constructor(
    private readonly deliverProps: BasicProperties,
    private readonly deliverBody: Buffer,
  ) {}

  /** Resolves once `check` holds (re-tested after every frame). */
  until(check: () => boolean): Promise<void> {
    if (check()) return Promise.resolve();
    return new Promise((resolve) => {
      const w = (): void => {
        if (check()) resolve();
        else this.waiters.push(w);
      };
      this.waiters.push(w);
    });
  }

  serve(socket: Socket): void {
    const reader = new FrameReader({ frameMax: FRAME_MAX });
    let content: { method: Method<'basic.publish'>; header?: ContentHeader; parts: Buffer[]; got: number } | null = null;
    const send = (channel: number, m: AmqpMethod): void => void socket.write(encodeMethodFrame(channel, m));
    socket.on('data', (chunk: Buffer) => {
      reader.push(chunk);
      for (let f = reader.read(); f !== null; f = reader.read()) {
        if (f.type === 'protocol-header') {
          assert.equal(f.supported, true);
          send(0, {
            name: 'connection.start',
            versionMajor: 0,
            versionMinor: 9,
            serverProperties: { product: 'codec-test', capabilities: { publisher_confirms: true, consumer_cancel_notify: true } },
            mechanisms: 'PLAIN AMQPLAIN',
            locales: 'en_US',
          });
          continue;
        }
        if (f.type === FRAME_HEADER) {
          assert.ok(content !== null, 'a content header follows a publish');
          content.header = decodeContentHeader(f.payload, true);
        } else if (f.type === FRAME_BODY) {
          assert.ok(content?.header !== undefined, 'a body frame follows a content header');
          content.parts.push(Buffer.from(f.payload));
          content.got += f.payload.length;
        }
        if (content?.header !== undefined && content.got === content.header.bodySize) {
          this.published.push({ method: content.method, header: content.header, body: Buffer.concat(content.parts) });
          content = null;
        }
        if (f.type === FRAME_METHOD) {
          const m = decodeMethod(f.payload);
          this.methods.push(m);
          switch (m.name) {
            case 'connection.start-ok':
              send(0, { name: 'connection.tune', channelMax: 2047, frameMax: FRAME_MAX, heartbeat: 0 });
              break;
            case 'connection.open':
              send(0, { name: 'connection.open-ok' });
              break;
            case 'channel.open':
              send(f.channel, { name: 'channel.open-ok' });
              break;
            case 'basic.publish':
              content = { method: m, parts: [], got: 0 };
              break;
            case 'basic.consume':
              send(f.channel, { name: 'basic.consume-ok', consumerTag: 'ctag-1' });
              socket.write(
                encodeMessageFrames(
                  f.channel,
                  { name: 'basic.deliver', consumerTag: 'ctag-1', deliveryTag: 1, redelivered: true, exchange: 'amq.topic', routingKey: 'a.b.c' },
                  this.deliverProps,
                  this.deliverBody,
                  FRAME_MAX,
                ),
              );
              break;
            case 'channel.close':
              send(f.channel, { name: 'channel.close-ok' });
              break;
            case 'connection.close':
              send(0, { name: 'connection.close-ok' });
              break;
          }
        }
        for (const w of this.waiters.splice(0)) w();
      }
    });
  }
}

test('amqplib connects, publishes and consumes through a server built from the codec alone', async () => {
  const body = Buffer.alloc(300_000); // more than two frames at frame-max 131072
  for (let i = 0; i < body.length; i++) body[i] = (i * 7) % 256;
  const headers = {
    s: 'text',
    n: 42,
    neg: -70000,
    big: 2 ** 40,
    f: 0.5,
    t: true,
    nested: { deep: ['x', 1, false] },
    nil: null,
    bytes: Buffer.from([1, 2, 3]),
  };
  const deliverProps: BasicProperties = {
    contentType: 'application/octet-stream',
    contentEncoding: 'identity',
    headers: { ...headers, i8: new Typed('b', -5), u32: new Typed('i', 3000000000), ts: new Typed('T', 1700000000n) },
    deliveryMode: 2,
    priority: 3,
    correlationId: 'corr-1',
    replyTo: 'amq.rabbitmq.reply-to',
    expiration: '60000',
    messageId: 'msg-1',
    timestamp: 1700000000,
    type: 'order.created',
    userId: 'guest',
    appId: 'codec-test',
  };
  const mini = new MiniServer(deliverProps, body);
  const sockets = new Set<Socket>();
  const server = createServer((s) => {
    sockets.add(s);
    mini.serve(s);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  try {
    const conn = await amqplib.connect(`amqp://guest:guest@127.0.0.1:${port}`);
    const ch = await conn.createChannel();
    const published = {
      contentType: 'application/json',
      contentEncoding: 'utf-8',
      headers,
      deliveryMode: 2,
      priority: 7,
      correlationId: 'c-é',
      replyTo: 'replies',
      expiration: '1500',
      messageId: 'm-1',
      timestamp: 1700000001,
      type: 't',
      userId: 'guest',
      appId: 'amqplib-test',
    };
    ch.publish('amq.topic', 'sensors.kitchen', body, published);
    await mini.until(() => mini.published.length === 1);

    // what amqplib sent
    const startOk = mini.methods.find((m) => m.name === 'connection.start-ok') as Method<'connection.start-ok'>;
    assert.equal(startOk.mechanism, 'PLAIN');
    assert.deepEqual(startOk.response, Buffer.from('\0guest\0guest'));
    assert.equal(startOk.clientProperties.product, 'amqplib');
    const tuneOk = mini.methods.find((m) => m.name === 'connection.tune-ok') as Method<'connection.tune-ok'>;
    assert.equal(tuneOk.frameMax, FRAME_MAX);
    assert.deepEqual(
      mini.methods.find((m) => m.name === 'connection.open'),
      { name: 'connection.open', virtualHost: '/' },
    );
    const p = mini.published[0]!;
    assert.deepEqual(p.method, { name: 'basic.publish', exchange: 'amq.topic', routingKey: 'sensors.kitchen', mandatory: false, immediate: false });
    assert.equal(p.header.bodySize, body.length);
    assert.ok(p.body.equals(body));
    const { headers: gotHeaders, rawHeaders, ...rest } = p.header.properties;
    const { headers: _h, ...publishedRest } = published;
    assert.deepStrictEqual(rest, publishedRest);
    assert.ok(rawHeaders !== undefined && rawHeaders.length > 4);
    // amqplib picks its own tags for numbers ('b' for 42, 'l' for 2^40...): the values are what it was given
    const values = plain(gotHeaders) as Record<string, unknown>;
    for (const [k, v] of Object.entries(values)) if (v instanceof Typed) values[k] = typeof v.value === 'bigint' ? Number(v.value) : v.value;
    assert.deepStrictEqual(values, plain({ ...headers, nested: { deep: ['x', new Typed('b', 1), false] } }));

    // what we sent, as amqplib hands it to the application
    const msg = await new Promise<amqplib.ConsumeMessage>((resolve) => void ch.consume('q', (m) => m && resolve(m)));
    assert.deepEqual({ ...msg.fields }, { consumerTag: 'ctag-1', deliveryTag: 1, redelivered: true, exchange: 'amq.topic', routingKey: 'a.b.c' });
    assert.ok(msg.content.equals(body));
    const props = msg.properties;
    assert.equal(props.contentType, 'application/octet-stream');
    assert.equal(props.contentEncoding, 'identity');
    assert.equal(props.deliveryMode, 2);
    assert.equal(props.priority, 3);
    assert.equal(props.correlationId, 'corr-1');
    assert.equal(props.replyTo, 'amq.rabbitmq.reply-to');
    assert.equal(props.expiration, '60000');
    assert.equal(props.messageId, 'msg-1');
    assert.equal(props.timestamp, 1700000000);
    assert.equal(props.type, 'order.created');
    assert.equal(props.userId, 'guest');
    assert.equal(props.appId, 'codec-test');
    assert.deepEqual(props.headers, {
      ...headers,
      i8: -5,
      u32: 3000000000,
      ts: { '!': 'timestamp', value: 1700000000 },
    });

    await ch.close();
    await conn.close();
    assert.deepEqual(
      mini.methods.map((m) => m.name),
      ['connection.start-ok', 'connection.tune-ok', 'connection.open', 'channel.open', 'basic.publish', 'basic.consume', 'channel.close', 'connection.close'],
    );
  } finally {
    for (const s of sockets) s.destroy();
    server.close();
  }
});
