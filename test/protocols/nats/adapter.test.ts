/**
 * The NATS adapter's message mapping (subjects, headers, reserved headers, status) and its options.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { makeMessage, type Message } from '../../../src/core/index.js';
import { applyNatsHeaders, natsHeaderBlock, subjectToTopic, topicToSubject } from '../../../src/protocols/nats/mapping.js';
import { parseHeaders } from '../../../src/protocols/nats/codec/index.js';
import { resolveNatsOptions } from '../../../src/protocols/nats/options.js';

describe('NATS mapping', () => {
  it('subjects and unified topics swap separators (a bijection); +, # and NUL cannot be published', () => {
    const cases: Array<[string, string]> = [
      ['a.b.c', 'a/b/c'],
      ['a.b/c', 'a/b.c'],
      ['x/y', 'x.y'],
      ['$JS.API.INFO', '$JS/API/INFO'],
      ['single', 'single'],
    ];
    for (const [subject, topic] of cases) {
      assert.equal(subjectToTopic(subject), topic);
      assert.equal(topicToSubject(topic), subject);
    }
    for (const bad of ['a.+', 'a.#', 'a+b', 'nul\u0000x']) assert.equal(subjectToTopic(bad), null, bad);
  });

  it('an HPUB header block becomes headers (repeated keys kept in order), Nats-Msg-Id the message id, a status the status', () => {
    const msg: Message = makeMessage('t', Buffer.alloc(0));
    applyNatsHeaders(msg, parseHeaders(Buffer.from('NATS/1.0 503 Gone\r\nA: 1\r\nnats-msg-id: x9\r\nA: 2\r\n\r\n')));
    assert.deepEqual(
      msg.headers.map((h) => [h.key, h.value?.toString()]),
      [
        ['A', '1'],
        ['nats-msg-id', 'x9'],
        ['A', '2'],
      ],
    );
    assert.equal(msg.messageId, 'x9');
    assert.equal(msg.status, '503 Gone');
  });

  it("a message without headers or properties has no header block (MSG); reserved headers do not override the publisher's", () => {
    assert.equal(natsHeaderBlock(makeMessage('t', Buffer.alloc(0))), null);
    const m = makeMessage('t', Buffer.alloc(0), {
      headers: [{ key: 'content-type', value: Buffer.from('mine') }],
      contentType: 'application/json',
      correlationData: Buffer.from('corr'),
      messageId: 'm1',
    });
    assert.equal(natsHeaderBlock(m)!.toString(), 'NATS/1.0\r\ncontent-type: mine\r\nCorrelation-Id: corr\r\nNats-Msg-Id: m1\r\n\r\n');
    // A status that is not three digits is not rendered (the block stays valid).
    const st = makeMessage('t', Buffer.alloc(0), { status: 'oops' });
    assert.equal(natsHeaderBlock(st)!.toString(), 'NATS/1.0\r\n\r\n');
    const ok = makeMessage('t', Buffer.alloc(0), { status: '408 Request Timeout' });
    assert.deepEqual(parseHeaders(natsHeaderBlock(ok)!), { status: 408, description: 'Request Timeout', entries: [] });
  });
});

describe('NATS options', () => {
  it('defaults as nats-server (1 MiB payload, 4096 control line, 64 MiB pending, 2 min pings, 2 pings out, 2 s auth)', () => {
    const o = resolveNatsOptions();
    assert.equal(o.maxPayload, 1024 * 1024);
    assert.equal(o.maxControlLine, 4096);
    assert.equal(o.maxPending, 64 * 1024 * 1024);
    assert.equal(o.maxPendingMsgs, 0);
    assert.equal(o.pingIntervalMs, 120_000);
    assert.equal(o.maxPingsOut, 2);
    assert.equal(o.authTimeoutMs, 2000);
  });

  it('refuses values the connection cannot work with', () => {
    assert.throws(() => resolveNatsOptions({ maxControlLine: 10 }), /maxControlLine/);
    assert.throws(() => resolveNatsOptions({ maxPayload: 0 }), /maxPayload/);
    assert.throws(() => resolveNatsOptions({ maxPending: -1 }), /maxPending/);
    assert.throws(() => resolveNatsOptions({ pingIntervalMs: 1.5 }), /pingIntervalMs/);
  });
});
