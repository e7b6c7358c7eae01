/**
 * Golden byte fixtures for every AMQP 0-9-1 method the codec knows: one realistic argument set each and the
 * whole method frame in hex. The bytes were produced by amqplib's encoder (an independent implementation,
 * `amqplib/lib/defs`), and codec.test.ts re-checks them against it on every run, so they are not just our own
 * output frozen; codec-pika.test.ts checks them with a second client's codec (pika), and a few are also spelled
 * out byte by byte against the spec in codec.test.ts.
 */
import type { AmqpMethod } from '../../../src/protocols/amqp/codec/index.js';

export interface MethodFixture {
  channel: number;
  method: AmqpMethod;
  hex: string;
}

export const METHOD_FIXTURES: MethodFixture[] = [
  {
    channel: 0,
    method: {
      name: 'connection.start',
      versionMajor: 0,
      versionMinor: 9,
      serverProperties: { product: 'FlowMQ', version: '0.1.0', capabilities: { publisher_confirms: true, 'basic.nack': true } },
      mechanisms: 'PLAIN AMQPLAIN',
      locales: 'en_US',
    },
    hex: '0100000000007e000a000a0009000000590770726f647563745300000006466c6f774d510776657273696f6e5300000005302e312e300c6361706162696c69746965734600000022127075626c69736865725f636f6e6669726d7374010a62617369632e6e61636b74010000000e504c41494e20414d51504c41494e00000005656e5f5553ce',
  },
  {
    channel: 0,
    method: {
      name: 'connection.start-ok',
      clientProperties: { product: 'amqplib', platform: 'Node.JS v20', capabilities: { consumer_cancel_notify: true } },
      mechanism: 'PLAIN',
      response: Buffer.from('\0guest\0guest'),
      locale: 'en_US',
    },
    hex: '0100000000007c000a000b000000580770726f647563745300000007616d71706c696208706c6174666f726d530000000b4e6f64652e4a53207632300c6361706162696c6974696573460000001916636f6e73756d65725f63616e63656c5f6e6f74696679740105504c41494e0000000c00677565737400677565737405656e5f5553ce',
  },
  {
    channel: 0,
    method: { name: 'connection.secure', challenge: Buffer.from('challenge') },
    hex: '01000000000011000a0014000000096368616c6c656e6765ce',
  },
  {
    channel: 0,
    method: { name: 'connection.secure-ok', response: Buffer.from('\0guest\0guest') },
    hex: '01000000000014000a00150000000c006775657374006775657374ce',
  },
  {
    channel: 0,
    method: { name: 'connection.tune', channelMax: 2047, frameMax: 131072, heartbeat: 60 },
    hex: '0100000000000c000a001e07ff00020000003cce',
  },
  {
    channel: 0,
    method: { name: 'connection.tune-ok', channelMax: 2047, frameMax: 131072, heartbeat: 60 },
    hex: '0100000000000c000a001f07ff00020000003cce',
  },
  {
    channel: 0,
    method: { name: 'connection.open', virtualHost: '/' },
    hex: '01000000000008000a0028012f0000ce',
  },
  {
    channel: 0,
    method: { name: 'connection.open-ok' },
    hex: '01000000000005000a002900ce',
  },
  {
    channel: 0,
    method: {
      name: 'connection.close',
      replyCode: 320,
      replyText: "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'",
      classId: 0,
      methodId: 0,
    },
    hex: '01000000000056000a003201404b434f4e4e454354494f4e5f464f52434544202d2062726f6b657220666f7263656420636f6e6e656374696f6e20636c6f73757265207769746820726561736f6e202773687574646f776e2700000000ce',
  },
  {
    channel: 0,
    method: { name: 'connection.close-ok' },
    hex: '01000000000004000a0033ce',
  },
  {
    channel: 0,
    method: { name: 'connection.blocked', reason: 'low on memory' },
    hex: '01000000000012000a003c0d6c6f77206f6e206d656d6f7279ce',
  },
  {
    channel: 0,
    method: { name: 'connection.unblocked' },
    hex: '01000000000004000a003dce',
  },
  {
    channel: 0,
    method: { name: 'connection.update-secret', newSecret: Buffer.from('new-token'), reason: 'low on memory' },
    hex: '0100000000001f000a0046000000096e65772d746f6b656e0d6c6f77206f6e206d656d6f7279ce',
  },
  {
    channel: 0,
    method: { name: 'connection.update-secret-ok' },
    hex: '01000000000004000a0047ce',
  },
  {
    channel: 1,
    method: { name: 'channel.open' },
    hex: '010001000000050014000a00ce',
  },
  {
    channel: 1,
    method: { name: 'channel.open-ok' },
    hex: '010001000000080014000b00000000ce',
  },
  {
    channel: 1,
    method: { name: 'channel.flow', active: true },
    hex: '010001000000050014001401ce',
  },
  {
    channel: 1,
    method: { name: 'channel.flow-ok', active: false },
    hex: '010001000000050014001500ce',
  },
  {
    channel: 1,
    method: { name: 'channel.close', replyCode: 404, replyText: "NOT_FOUND - no queue 'orders' in vhost '/'", classId: 50, methodId: 10 },
    hex: '010001000000350014002801942a4e4f545f464f554e44202d206e6f20717565756520276f72646572732720696e2076686f737420272f270032000ace',
  },
  {
    channel: 1,
    method: { name: 'channel.close-ok' },
    hex: '0100010000000400140029ce',
  },
  {
    channel: 1,
    method: {
      name: 'exchange.declare',
      exchange: 'logs',
      type: 'topic',
      passive: false,
      durable: true,
      autoDelete: false,
      internal: true,
      noWait: false,
      arguments: { 'alternate-exchange': 'unrouted' },
    },
    hex: '010001000000360028000a0000046c6f677305746f7069630a0000002012616c7465726e6174652d65786368616e67655300000008756e726f75746564ce',
  },
  {
    channel: 1,
    method: { name: 'exchange.declare-ok' },
    hex: '010001000000040028000bce',
  },
  {
    channel: 1,
    method: { name: 'exchange.delete', exchange: 'logs', ifUnused: true, noWait: false },
    hex: '0100010000000c002800140000046c6f677301ce',
  },
  {
    channel: 1,
    method: { name: 'exchange.delete-ok' },
    hex: '0100010000000400280015ce',
  },
  {
    channel: 1,
    method: { name: 'exchange.bind', destination: 'dst', source: 'src', routingKey: 'a.#', noWait: true, arguments: {} },
    hex: '010001000000170028001e0000036473740373726303612e230100000000ce',
  },
  {
    channel: 1,
    method: { name: 'exchange.bind-ok' },
    hex: '010001000000040028001fce',
  },
  {
    channel: 1,
    method: { name: 'exchange.unbind', destination: 'dst', source: 'src', routingKey: 'a.b.c', noWait: false, arguments: { 'alternate-exchange': 'unrouted' } },
    hex: '01000100000039002800280000036473740373726305612e622e63000000002012616c7465726e6174652d65786368616e67655300000008756e726f75746564ce',
  },
  {
    channel: 1,
    method: { name: 'exchange.unbind-ok' },
    hex: '0100010000000400280033ce',
  },
  {
    channel: 1,
    method: {
      name: 'queue.declare',
      queue: 'orders',
      passive: false,
      durable: true,
      exclusive: false,
      autoDelete: false,
      noWait: false,
      arguments: { 'x-message-ttl': 60000, 'x-dead-letter-exchange': 'dlx', 'x-queue-type': 'classic' },
    },
    hex: '0100010000005d0032000a0000066f7264657273020000004b0d782d6d6573736167652d74746c490000ea6016782d646561642d6c65747465722d65786368616e67655300000003646c780c782d71756575652d747970655300000007636c6173736963ce',
  },
  {
    channel: 1,
    method: { name: 'queue.declare-ok', queue: 'amq.gen-JzTY20BRgKO-HjmUJj0wLg', messageCount: 42, consumerCount: 3 },
    hex: '0100010000002b0032000b1e616d712e67656e2d4a7a545932304252674b4f2d486a6d554a6a30774c670000002a00000003ce',
  },
  {
    channel: 1,
    method: { name: 'queue.bind', queue: 'orders', exchange: 'logs', routingKey: 'a.b.c', noWait: false, arguments: { 'alternate-exchange': 'unrouted' } },
    hex: '0100010000003d003200140000066f7264657273046c6f677305612e622e63000000002012616c7465726e6174652d65786368616e67655300000008756e726f75746564ce',
  },
  {
    channel: 1,
    method: { name: 'queue.bind-ok' },
    hex: '0100010000000400320015ce',
  },
  {
    channel: 1,
    method: { name: 'queue.purge', queue: 'orders', noWait: false },
    hex: '0100010000000e0032001e0000066f726465727300ce',
  },
  {
    channel: 1,
    method: { name: 'queue.purge-ok', messageCount: 42 },
    hex: '010001000000080032001f0000002ace',
  },
  {
    channel: 1,
    method: { name: 'queue.delete', queue: 'orders', ifUnused: true, ifEmpty: false, noWait: false },
    hex: '0100010000000e003200280000066f726465727301ce',
  },
  {
    channel: 1,
    method: { name: 'queue.delete-ok', messageCount: 42 },
    hex: '01000100000008003200290000002ace',
  },
  {
    channel: 1,
    method: { name: 'queue.unbind', queue: 'orders', exchange: 'logs', routingKey: 'a.b.c', arguments: { 'alternate-exchange': 'unrouted' } },
    hex: '0100010000003c003200320000066f7264657273046c6f677305612e622e630000002012616c7465726e6174652d65786368616e67655300000008756e726f75746564ce',
  },
  {
    channel: 1,
    method: { name: 'queue.unbind-ok' },
    hex: '0100010000000400320033ce',
  },
  {
    channel: 1,
    method: { name: 'basic.qos', prefetchSize: 0, prefetchCount: 10, global: true },
    hex: '0100010000000b003c000a00000000000a01ce',
  },
  {
    channel: 1,
    method: { name: 'basic.qos-ok' },
    hex: '01000100000004003c000bce',
  },
  {
    channel: 1,
    method: {
      name: 'basic.consume',
      queue: 'orders',
      consumerTag: '',
      noLocal: false,
      noAck: false,
      exclusive: true,
      noWait: false,
      arguments: { 'x-priority': 5 },
    },
    hex: '01000100000023003c00140000066f72646572730004000000100a782d7072696f726974794900000005ce',
  },
  {
    channel: 1,
    method: { name: 'basic.consume-ok', consumerTag: 'amq.ctag-1' },
    hex: '0100010000000f003c00150a616d712e637461672d31ce',
  },
  {
    channel: 1,
    method: { name: 'basic.cancel', consumerTag: 'amq.ctag-1', noWait: false },
    hex: '01000100000010003c001e0a616d712e637461672d3100ce',
  },
  {
    channel: 1,
    method: { name: 'basic.cancel-ok', consumerTag: 'amq.ctag-1' },
    hex: '0100010000000f003c001f0a616d712e637461672d31ce',
  },
  {
    channel: 1,
    method: { name: 'basic.publish', exchange: 'amq.topic', routingKey: 'sensors.kitchen.temp', mandatory: true, immediate: false },
    hex: '01000100000026003c0028000009616d712e746f7069631473656e736f72732e6b69746368656e2e74656d7001ce',
  },
  {
    channel: 1,
    method: { name: 'basic.return', replyCode: 312, replyText: 'NO_ROUTE', exchange: '', routingKey: 'nowhere' },
    hex: '01000100000018003c00320138084e4f5f524f55544500076e6f7768657265ce',
  },
  {
    channel: 1,
    method: { name: 'basic.deliver', consumerTag: 'amq.ctag-1', deliveryTag: 17, redelivered: true, exchange: 'logs', routingKey: 'a.b.c' },
    hex: '01000100000023003c003c0a616d712e637461672d31000000000000001101046c6f677305612e622e63ce',
  },
  {
    channel: 1,
    method: { name: 'basic.get', queue: 'orders', noAck: true },
    hex: '0100010000000e003c00460000066f726465727301ce',
  },
  {
    channel: 1,
    method: { name: 'basic.get-ok', deliveryTag: 1, redelivered: false, exchange: '', routingKey: 'orders', messageCount: 7 },
    hex: '01000100000019003c004700000000000000010000066f726465727300000007ce',
  },
  {
    channel: 1,
    method: { name: 'basic.get-empty' },
    hex: '01000100000005003c004800ce',
  },
  {
    channel: 1,
    method: { name: 'basic.ack', deliveryTag: 17, multiple: true },
    hex: '0100010000000d003c0050000000000000001101ce',
  },
  {
    channel: 1,
    method: { name: 'basic.reject', deliveryTag: 1099511627779, requeue: true },
    hex: '0100010000000d003c005a000001000000000301ce',
  },
  {
    channel: 1,
    method: { name: 'basic.recover-async', requeue: false },
    hex: '01000100000005003c006400ce',
  },
  {
    channel: 1,
    method: { name: 'basic.recover', requeue: true },
    hex: '01000100000005003c006e01ce',
  },
  {
    channel: 1,
    method: { name: 'basic.recover-ok' },
    hex: '01000100000004003c006fce',
  },
  {
    channel: 1,
    method: { name: 'basic.nack', deliveryTag: 9, multiple: false, requeue: true },
    hex: '0100010000000d003c0078000000000000000902ce',
  },
  {
    channel: 1,
    method: { name: 'confirm.select', noWait: false },
    hex: '010001000000050055000a00ce',
  },
  {
    channel: 1,
    method: { name: 'confirm.select-ok' },
    hex: '010001000000040055000bce',
  },
  {
    channel: 1,
    method: { name: 'tx.select' },
    hex: '01000100000004005a000ace',
  },
  {
    channel: 1,
    method: { name: 'tx.select-ok' },
    hex: '01000100000004005a000bce',
  },
  {
    channel: 1,
    method: { name: 'tx.commit' },
    hex: '01000100000004005a0014ce',
  },
  {
    channel: 1,
    method: { name: 'tx.commit-ok' },
    hex: '01000100000004005a0015ce',
  },
  {
    channel: 1,
    method: { name: 'tx.rollback' },
    hex: '01000100000004005a001ece',
  },
  {
    channel: 1,
    method: { name: 'tx.rollback-ok' },
    hex: '01000100000004005a001fce',
  },
];

/**
 * A content header frame with all 14 basic properties (channel 5, class 60, body-size 1234), from amqplib's
 * encodeProperties. The headers table holds a string and a nested table with a boolean.
 */
export const FULL_PROPERTIES_FIXTURE = {
  channel: 5,
  bodySize: 1234,
  properties: {
    contentType: 'text/plain',
    contentEncoding: 'gzip',
    headers: { a: 'b', n: { x: true } },
    deliveryMode: 2,
    priority: 5,
    correlationId: 'c1',
    replyTo: 'r',
    expiration: '60000',
    messageId: 'm',
    timestamp: 1700000000,
    type: 't',
    userId: 'guest',
    appId: 'app',
    clusterId: 'cl',
  },
  hex: '0200050000005b003c000000000000000004d2fffc0a746578742f706c61696e04677a6970000000130161530000000162016e46000000040178740102050263310172053630303030016d000000006553f10001740567756573740361707002636cce',
};
