/**
 * Namespace links (src/core/links.ts, links-config.ts): subject mapping and coverage, validation of the configured
 * shape, stream and service imports on an Engine, shadow interest, grants, and the hop limit that ends a cycle.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  Engine,
  makeMessage,
  mapLevels,
  subjectCovers,
  validateNamespaceLinks,
  type Message,
  type NamespaceLinkDef,
  type Subscriber,
  type Subscription,
} from '../../src/core/index.js';
import { MemoryStreams } from '../helpers/memory-storage.js';

class Sink implements Subscriber {
  readonly got: Message[] = [];
  constructor(readonly id: string) {}
  deliver(msg: Message, _subs: Subscription[]): void {
    this.got.push(msg);
  }
}

function setup(defs: NamespaceLinkDef[]) {
  const m = new MemoryStreams();
  const engine = new Engine(m, m);
  const out = engine.links.configure('test', defs);
  return { engine, out };
}

function sub(engine: Engine, ns: string, subject: string): Sink {
  const s = new Sink(`${ns}:${subject}`);
  engine.subscribe(ns === 'default' ? subject : `$ns.${ns}.${subject}`, s, { qos: 0, rule: 'nats', ...(ns === 'default' ? {} : { namespace: ns }) });
  return s;
}

function pub(engine: Engine, ns: string, topic: string, init: Partial<Message> = {}): void {
  engine.publish(makeMessage(ns === 'default' ? topic : `$ns/${ns}/${topic}`, Buffer.from('x'), { ...init, ...(ns === 'default' ? {} : { namespace: ns }) }));
}

describe('namespace links', () => {
  it('maps wildcards in order and checks that an export covers an import', () => {
    assert.deepEqual(mapLevels(['a', 'b', 'c'], ['a', '>'], ['x', '>']), ['x', 'b', 'c']);
    assert.deepEqual(mapLevels(['a', 'b', 'c'], ['a', '*', '*'], ['*', 'y', '*']), ['b', 'y', 'c']);
    assert.equal(mapLevels(['a'], ['a', '>'], ['x', '>']), null);
    assert.equal(mapLevels(['b', 'c'], ['a', '>'], ['x', '>']), null);
    assert.ok(subjectCovers('a.>', 'a.b.>'));
    assert.ok(subjectCovers('a.*', 'a.b'));
    assert.ok(!subjectCovers('a.*', 'a.>'));
    assert.ok(!subjectCovers('a.b.>', 'a.>'));
    assert.ok(!subjectCovers('a.>', 'a'));
  });

  it('validates the configured shape', () => {
    const ok = validateNamespaceLinks(
      {
        exports: [
          { stream: 'a.>', accounts: ['t2'] },
          { service: 's.*', response_type: 'Stream' },
        ],
        imports: [{ stream: { account: 't1', subject: 'a.>' }, to: 'b.>' }],
      },
      'ns',
    );
    assert.equal(ok.exports[1]!.response_type, 'stream');
    for (const bad of [
      { exports: [{ stream: 'a.>', service: 'b' }] },
      { exports: [{ stream: 'a.>.b' }] },
      { exports: [{ stream: '$ns.t1.x' }] },
      { exports: [{ stream: 'a', response_type: 'singleton' }] },
      { imports: [{ stream: { account: 't1', subject: 'a.>' }, to: 'b.*' }] },
      { imports: [{ service: { account: 't1', subject: 'a.>' }, prefix: 'p' }] },
      { imports: [{ stream: { account: 'no/such', subject: 'a' } }] },
      { imports: [{ stream: { account: 't1', subject: 'a' }, extra: 1 }] },
    ]) {
      assert.throws(() => validateNamespaceLinks(bad, 'ns'), /ns/, JSON.stringify(bad));
    }
  });

  it('stream import: a publish in the exporter reaches the importer at the mapped subject, reply moved along', () => {
    const { engine, out } = setup([
      { namespace: 't1', exports: [{ stream: 'a.>' }], imports: [] },
      { namespace: 't2', exports: [], imports: [{ stream: { account: 't1', subject: 'a.>' }, prefix: 'p' }] },
      { namespace: 'default', exports: [], imports: [{ stream: { account: 't1', subject: 'a.>' }, to: 'd.>' }] },
    ]);
    assert.equal(out.refused.length, 0);
    const t2 = sub(engine, 't2', 'p.>');
    const d = sub(engine, 'default', 'd.>');
    pub(engine, 't1', 'a/b', { responseTopic: '$ns/t1/_INBOX/1', retain: true });
    pub(engine, 't1', 'z/b');
    assert.deepEqual(
      t2.got.map((m) => [m.topic, m.responseTopic, m.namespace, m.retain]),
      [['$ns/t2/p/a/b', '$ns/t2/_INBOX/1', 't2', false]],
    );
    assert.deepEqual(
      d.got.map((m) => [m.topic, m.namespace]),
      [['d/b', undefined]],
    );
  });

  it('shadow interest: an exported subject has live interest only where an importer subscribes', () => {
    const { engine } = setup([
      { namespace: 't1', exports: [{ stream: 'a.>' }], imports: [] },
      { namespace: 't2', exports: [], imports: [{ stream: { account: 't1', subject: 'a.>' } }] },
    ]);
    assert.equal(engine.hasLiveSubscribers('$ns/t1/a/x'), false);
    sub(engine, 't2', 'a.x');
    assert.equal(engine.hasLiveSubscribers('$ns/t1/a/x'), true);
    assert.equal(engine.hasLiveSubscribers('$ns/t1/a/y'), false);
  });

  it('service import: the request reaches the exporter with a reply of its own; one response goes back (singleton)', () => {
    const { engine } = setup([
      { namespace: 't1', exports: [{ service: 'svc.>' }], imports: [] },
      { namespace: 't2', exports: [], imports: [{ service: { account: 't1', subject: 'svc.>' }, to: 'remote.>' }] },
    ]);
    const responder = sub(engine, 't1', 'svc.>');
    const inbox = sub(engine, 't2', '_INBOX.>');
    pub(engine, 't2', 'remote/echo', { responseTopic: '$ns/t2/_INBOX/r1' });
    assert.equal(responder.got.length, 1);
    const req = responder.got[0]!;
    assert.equal(req.topic, '$ns/t1/svc/echo');
    assert.match(req.responseTopic!, /^\$ns\/t1\/_R_\//);
    pub(engine, 't1', req.responseTopic!.slice('$ns/t1/'.length));
    pub(engine, 't1', req.responseTopic!.slice('$ns/t1/'.length));
    assert.deepEqual(
      inbox.got.map((m) => m.topic),
      ['$ns/t2/_INBOX/r1'],
    );
    assert.equal(engine.links.pendingResponses, 0);
    // Nobody in t1: a 503 status to the requester.
    const none = setup([
      { namespace: 't1', exports: [{ service: 'svc.>' }], imports: [] },
      { namespace: 't2', exports: [], imports: [{ service: { account: 't1', subject: 'svc.>' } }] },
    ]).engine;
    const box = sub(none, 't2', '_INBOX.>');
    pub(none, 't2', 'svc/x', { responseTopic: '$ns/t2/_INBOX/r2' });
    assert.deepEqual(
      box.got.map((m) => [m.topic, m.status]),
      [['$ns/t2/_INBOX/r2', '503']],
    );
  });

  it('overlapping service imports: the most specific one serves a request (nats.js kv: froma.$KV.> beside froma.>)', () => {
    const { engine } = setup([
      { namespace: 't1', exports: [{ service: '$JS.API.>' }, { service: '$KV.>' }], imports: [] },
      {
        namespace: 't2',
        exports: [],
        imports: [
          { service: { account: 't1', subject: '$KV.>' }, to: 'froma.$KV.>' },
          { service: { account: 't1', subject: '$JS.API.>' }, to: 'froma.>' },
        ],
      },
    ]);
    const kv = sub(engine, 't1', '$KV.>');
    const api = sub(engine, 't1', '$JS.API.>');
    pub(engine, 't2', 'froma/$KV/a/C', { responseTopic: '$ns/t2/_INBOX/1' });
    pub(engine, 't2', 'froma/STREAM/INFO/x', { responseTopic: '$ns/t2/_INBOX/2' });
    assert.deepEqual(
      kv.got.map((m) => m.topic),
      ['$ns/t1/$KV/a/C'],
    );
    assert.deepEqual(
      api.got.map((m) => m.topic),
      ['$ns/t1/$JS/API/STREAM/INFO/x'],
    );
  });

  it('refuses imports of exports that are missing, not covering or not granted; nothing crosses', () => {
    const { engine, out } = setup([
      { namespace: 't1', exports: [{ stream: 'a.>', accounts: ['t2'] }, { stream: 'b.c' }], imports: [] },
      {
        namespace: 't3',
        exports: [],
        imports: [
          { stream: { account: 't1', subject: 'a.>' } },
          { stream: { account: 't1', subject: 'b.>' } },
          { stream: { account: 'nobody', subject: 'x' } },
          { service: { account: 't1', subject: 'a.>' } },
        ],
      },
    ]);
    assert.deepEqual(
      out.refused.map((r) => r.reason),
      ["t1's export is not granted to t3", 't1 exports no stream covering b.>', 'nobody exports no stream covering x', 't1 exports no service covering a.>'],
    );
    const t3 = sub(engine, 't3', '>');
    pub(engine, 't1', 'a/x');
    pub(engine, 't1', 'b/c');
    assert.equal(t3.got.length, 0);
  });

  it('a cycle of imports stops at the hop limit', () => {
    const { engine } = setup([
      { namespace: 't1', exports: [{ stream: 'a.>' }], imports: [{ stream: { account: 't2', subject: 'a.>' } }] },
      { namespace: 't2', exports: [{ stream: 'a.>' }], imports: [{ stream: { account: 't1', subject: 'a.>' } }] },
    ]);
    const t2 = sub(engine, 't2', 'a.>');
    pub(engine, 't1', 'a/x');
    assert.ok(t2.got.length >= 1 && t2.got.length <= 8, String(t2.got.length));
    assert.ok(engine.links.stats.loopsCut >= 1);
  });
});
