/** ClientRegistry (src/control/clients.ts): entries, kick, totals by protocol and namespace that never go down. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ClientRegistry } from '../../src/control/clients.js';

describe('ClientRegistry', () => {
  it('registers, lists, kicks and removes connections', () => {
    const r = new ClientRegistry();
    const kicked: string[] = [];
    const a = r.register({ protocol: 'mqtt', listener: 'mqtt', remoteAddress: '10.0.0.1', remotePort: 5000, kick: (why) => kicked.push(`a:${why}`) });
    const b = r.register({ protocol: 'kafka', listener: 'kafka', kick: (why) => kicked.push(`b:${why}`) });
    assert.notEqual(a.id, b.id);
    assert.equal(r.size, 2);
    assert.equal(r.get(a.id), a);
    a.user = 'alice';
    a.clientId = 'sensor-1';
    const v = a.view();
    assert.deepEqual(
      [v.protocol, v.listener, v.remoteAddress, v.remotePort, v.user, v.clientId, v.namespace],
      ['mqtt', 'mqtt', '10.0.0.1', 5000, 'alice', 'sensor-1', 'default'],
    );
    assert.equal(r.kick(a.id), true);
    assert.equal(r.kick('nope'), false);
    assert.deepEqual(kicked, ['a:kicked by an administrator']);
    a.close();
    a.close();
    assert.equal(r.size, 1);
    assert.deepEqual(r.list(), [b]);
  });

  it('totals by protocol and namespace keep what closed connections counted', () => {
    const r = new ClientRegistry();
    const sock = { bytesRead: 100, bytesWritten: 50 };
    const a = r.register({ protocol: 'mqtt', listener: 'mqtt', socket: sock, kick: () => undefined });
    a.messagesIn = 3;
    a.messagesOut = 2;
    assert.deepEqual(r.totals(), [{ protocol: 'mqtt', namespace: 'default', connections: 1, messagesIn: 3, messagesOut: 2, bytesIn: 100, bytesOut: 50 }]);
    a.close();
    assert.deepEqual(r.totals(), [{ protocol: 'mqtt', namespace: 'default', connections: 0, messagesIn: 3, messagesOut: 2, bytesIn: 100, bytesOut: 50 }]);
  });

  it('a connection moved to its namespace after login leaves what it counted before with the old one', () => {
    const r = new ClientRegistry();
    const sock = { bytesRead: 40, bytesWritten: 10 }; // the CONNECT and its CONNACK, counted under default
    const e = r.register({ protocol: 'amqp', listener: 'amqp', socket: sock, kick: () => undefined });
    const series = () => Object.fromEntries(r.totals().map((t) => [t.namespace, [t.connections, t.messagesIn, t.bytesIn, t.bytesOut]]));
    assert.deepEqual(series(), { default: [1, 0, 40, 10] });
    e.namespace = 'team-a';
    assert.deepEqual(series(), { default: [0, 0, 40, 10], 'team-a': [1, 0, 0, 0] }, "default's counters did not go down");
    sock.bytesRead = 140;
    e.messagesIn = 5;
    assert.deepEqual(series(), { default: [0, 0, 40, 10], 'team-a': [1, 5, 100, 0] });
    e.close();
    assert.deepEqual(series(), { default: [0, 0, 40, 10], 'team-a': [0, 5, 100, 0] });
  });
});
