/**
 * JetStream names per namespace (names.ts): which API token is a stream, how a tenant's are qualified, that a
 * client-written `~` name is nobody's, what a stream's outputs look like, and the subject length in byte counts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { namespaceNames } from '../../../../src/core/index.js';
import {
  ackTopicPrefix,
  inSubject,
  namesOf,
  outSubject,
  ownStream,
  qualifyAckLevels,
  qualifyApi,
  subjectLength,
} from '../../../../src/protocols/nats/jetstream/names.js';

const t1 = namespaceNames('t1');
const def = namespaceNames('default');
const tok = (s: string): string[] => s.split('.');

describe('JetStream names per namespace', () => {
  it('qualifies the stream token of every API subject that names one, and only it', () => {
    const cases: Array<[string, string]> = [
      ['STREAM.CREATE.orders', 'STREAM.CREATE.t1~orders'],
      ['STREAM.UPDATE.orders', 'STREAM.UPDATE.t1~orders'],
      ['STREAM.INFO.orders', 'STREAM.INFO.t1~orders'],
      ['STREAM.DELETE.orders', 'STREAM.DELETE.t1~orders'],
      ['STREAM.PURGE.orders', 'STREAM.PURGE.t1~orders'],
      ['STREAM.MSG.GET.orders', 'STREAM.MSG.GET.t1~orders'],
      ['STREAM.MSG.DELETE.orders', 'STREAM.MSG.DELETE.t1~orders'],
      ['DIRECT.GET.KV_cfg.$KV.cfg.k', 'DIRECT.GET.t1~KV_cfg.$KV.cfg.k'],
      ['CONSUMER.CREATE.orders.c1.orders.x', 'CONSUMER.CREATE.t1~orders.c1.orders.x'],
      ['CONSUMER.DURABLE.CREATE.orders.c1', 'CONSUMER.DURABLE.CREATE.t1~orders.c1'],
      ['CONSUMER.NAMES.orders', 'CONSUMER.NAMES.t1~orders'],
      ['CONSUMER.LIST.orders', 'CONSUMER.LIST.t1~orders'],
      ['CONSUMER.INFO.orders.c1', 'CONSUMER.INFO.t1~orders.c1'],
      ['CONSUMER.DELETE.orders.c1', 'CONSUMER.DELETE.t1~orders.c1'],
      ['CONSUMER.MSG.NEXT.orders.c1', 'CONSUMER.MSG.NEXT.t1~orders.c1'],
      ['STREAM.NAMES', 'STREAM.NAMES'],
      ['STREAM.LIST', 'STREAM.LIST'],
      ['INFO', 'INFO'],
    ];
    for (const [asked, internal] of cases) {
      assert.deepEqual(qualifyApi(t1, tok(asked)), tok(internal), asked);
      // default's are the names themselves (the same array: nothing built).
      const t = tok(asked);
      assert.equal(qualifyApi(def, t), t, asked);
    }
  });

  it('a client-written qualified stream name is no stream, in every namespace', () => {
    for (const names of [def, t1]) {
      assert.equal(qualifyApi(names, tok('STREAM.INFO.t2~orders')), null);
      assert.equal(qualifyApi(names, tok('CONSUMER.MSG.NEXT.t2~orders.c1')), null);
      assert.equal(qualifyAckLevels(names, '$JS/ACK/t2~orders/c1/1/1/1/0/0'.split('/')), null);
    }
    assert.deepEqual(qualifyAckLevels(t1, '$JS/ACK/orders/c1/1/1/1/0/0'.split('/')), '$JS/ACK/t1~orders/c1/1/1/1/0/0'.split('/'));
  });

  it('derives what a stream shows from its internal name', () => {
    assert.equal(namesOf('t1~orders'), t1);
    assert.equal(namesOf('orders'), def);
    assert.equal(ownStream('t1~orders'), 'orders');
    assert.equal(ownStream('orders'), 'orders');
    assert.equal(ackTopicPrefix('t1~orders', 'c1', 'ACK'), '$ns/t1/$JS/ACK/orders/c1/');
    assert.equal(ackTopicPrefix('orders', 'c1', 'FC'), '$JS/FC/orders/c1/');
    assert.equal(inSubject(t1, 'orders.>'), '$ns.t1.orders.>');
    assert.equal(inSubject(t1, '>'), '>');
    assert.equal(outSubject(t1, '$ns.t1.orders.>'), 'orders.>');
    assert.equal(inSubject(def, 'orders.>'), 'orders.>');
    // A namespace name's dots are written `/` in its NATS prefix (one token).
    assert.equal(inSubject(namespaceNames('a.b'), 'x'), '$ns.a/b.x');
  });

  it('counts a stored subject as the namespace wrote it', () => {
    assert.equal(subjectLength('$ns/t1/orders/x'), 'orders/x'.length);
    assert.equal(subjectLength('orders/x'), 'orders/x'.length);
    assert.equal(subjectLength('$JS/API/INFO'), '$JS/API/INFO'.length);
  });
});
