import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ANY, headersMatch, mqttAccepts, ONE, parseBindingKey, parseHeadersBinding, REST, routingKeyLevels } from '../../src/core/index.js';

describe('matching rules per binding', () => {
  it('parses AMQP topic patterns: * and # anywhere, #.# collapsed, / inside a word swapped on the unified topic space', () => {
    assert.deepEqual(parseBindingKey('a.*.#', 'amqp', true), ['a', ONE, ANY]);
    assert.deepEqual(parseBindingKey('#.b.#.#', 'amqp', true), [ANY, 'b', ANY]);
    assert.deepEqual(parseBindingKey('x/y.z', 'amqp', true), ['x.y', 'z']);
    assert.deepEqual(parseBindingKey('x/y.z', 'amqp', false), ['x/y', 'z'], 'other topic exchanges keep words as they are');
    assert.deepEqual(parseBindingKey('a.+.>', 'amqp', true), ['a', '+', '>'], 'MQTT and NATS wildcards are literal words in AMQP');
    assert.deepEqual(parseBindingKey('', 'amqp', true), [], 'the empty key is zero words');
    assert.deepEqual(parseBindingKey('a..b', 'amqp', true), ['a', '', 'b']);
    assert.deepEqual(parseBindingKey('*a.b#', 'amqp', true), ['*a', 'b#'], 'wildcards only as whole words');
  });
  it('parses MQTT filters with MQTT validation', () => {
    assert.deepEqual(parseBindingKey('a/+/#', 'mqtt', true), ['a', ONE, ANY]);
    assert.deepEqual(parseBindingKey('a.b/*', 'mqtt', true), ['a.b', '*']);
    for (const bad of ['a/#/b', 'a+', '']) assert.throws(() => parseBindingKey(bad, 'mqtt', true), { code: 'INVALID_FILTER' });
  });
  it('parses NATS subjects: * one token, > one or more trailing, no empty tokens', () => {
    assert.deepEqual(parseBindingKey('a.*.>', 'nats', true), ['a', ONE, REST]);
    assert.deepEqual(parseBindingKey('a.#', 'nats', true), ['a', '#'], '# is literal in NATS');
    for (const bad of ['a.>.b', 'a..b', '', '.a']) assert.throws(() => parseBindingKey(bad, 'nats', true), { code: 'INVALID_FILTER' });
  });
  it('splits routing keys into words; the empty key is zero words', () => {
    assert.deepEqual(routingKeyLevels('a.b'), ['a', 'b']);
    assert.deepEqual(routingKeyLevels(''), []);
    assert.deepEqual(routingKeyLevels('.'), ['', '']);
  });
  it('applies the MQTT $ rule only to wildcard matches of $ topics', () => {
    assert.equal(mqttAccepts('$SYS/x', true), false);
    assert.equal(mqttAccepts('$SYS/x', false), true);
    assert.equal(mqttAccepts('a/$x', true), true);
  });
  it('matches headers by value bytes; numbers and booleans as text', () => {
    const h = (o: Record<string, string>) => Object.entries(o).map(([key, v]) => ({ key, value: Buffer.from(v) }));
    const p = parseHeadersBinding({ n: 5, t: true, b: Buffer.from('raw') });
    assert.equal(p.mode, 'all');
    assert.ok(headersMatch(p, h({ n: '5', t: 'true', b: 'raw', extra: 'x' })));
    assert.ok(!headersMatch(p, h({ n: '5', t: 'true' })));
    assert.ok(headersMatch(parseHeadersBinding({}), []), 'all with nothing to compare matches everything');
    assert.ok(!headersMatch(parseHeadersBinding({ 'x-match': 'any' }), h({ a: '1' })), 'any with nothing to compare matches nothing');
    assert.ok(!headersMatch(parseHeadersBinding({ a: '1' }), [{ key: 'a', value: null }]));
  });
  it('compares the type classes an AMQP publish names, as RabbitMQ: int 1 is not the string "1"; headers without one compare as bytes', () => {
    const one = [{ key: 'a', value: Buffer.from('1') }];
    const int = new Map([['a', 'int']]);
    const str = new Map([['a', 'str']]);
    assert.ok(headersMatch(parseHeadersBinding({ a: 1 }), one, int));
    assert.ok(!headersMatch(parseHeadersBinding({ a: 1 }), one, str));
    assert.ok(!headersMatch(parseHeadersBinding({ a: '1' }), one, int));
    assert.ok(headersMatch(parseHeadersBinding({ a: '1' }), one, str));
    assert.ok(headersMatch(parseHeadersBinding({ a: 1 }), one), 'no classes (MQTT, Kafka, NATS): bytes only');
    assert.ok(headersMatch(parseHeadersBinding({ a: null }), one, str), 'void: presence only, whatever the class');
    assert.ok(!headersMatch(parseHeadersBinding({ a: 1.5 }), [{ key: 'a', value: Buffer.from('1.5') }], int));
    assert.ok(headersMatch(parseHeadersBinding({ a: 1.5 }), [{ key: 'a', value: Buffer.from('1.5') }], new Map([['a', 'float']])));
  });
});
