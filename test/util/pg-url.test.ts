import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { endpointsOf, parsePostgresUrl } from '../../src/util/pg-url.js';

describe('parsePostgresUrl (libpq multi-host URLs)', () => {
  it('splits hosts into single-host URLs, in order, without target_session_attrs', () => {
    const p = parsePostgresUrl('postgres://u:p%40w@h1:5433,h2,[::1]:5435/db?target_session_attrs=read-write&sslmode=disable');
    assert.deepEqual(p.hosts, [
      { host: 'h1', port: 5433 },
      { host: 'h2', port: 5432 },
      { host: '[::1]', port: 5435 },
    ]);
    assert.equal(p.targetSessionAttrs, 'read-write');
    assert.deepEqual(p.urls, [
      'postgres://u:p%40w@h1:5433/db?sslmode=disable',
      'postgres://u:p%40w@h2:5432/db?sslmode=disable',
      'postgres://u:p%40w@[::1]:5435/db?sslmode=disable',
    ]);
    assert.equal(endpointsOf('postgres://u:secret@h1:5433,h2/db'), 'h1:5433,h2:5432');
  });

  it('defaults: read-write with several hosts, any with one; a single-host URL is kept as it was', () => {
    assert.equal(parsePostgresUrl('postgresql://a:1,b:2/db').targetSessionAttrs, 'read-write');
    const one = parsePostgresUrl('postgres://flowmq@127.0.0.1:5432/flowmq?options=-c%20search_path%3Dx');
    assert.equal(one.targetSessionAttrs, 'any');
    assert.deepEqual(one.urls, ['postgres://flowmq@127.0.0.1:5432/flowmq?options=-c%20search_path%3Dx']);
    assert.equal(parsePostgresUrl('postgres://a/db?target_session_attrs=primary').targetSessionAttrs, 'primary');
    // A socket directory given as a parameter: no host in the authority.
    assert.deepEqual(parsePostgresUrl('postgres:///db?host=/run/postgresql').urls, ['postgres:///db?host=/run/postgresql']);
  });

  it('refuses what FlowMQ cannot use', () => {
    assert.throws(() => parsePostgresUrl('postgres://a,b/db?target_session_attrs=standby'), /only any, read-write or primary/);
    assert.throws(() => parsePostgresUrl('postgres://a:99999,b/db'), /port must be 1-65535/);
    assert.throws(() => parsePostgresUrl('postgres://a,,b/db'), /is not host or host:port/);
    assert.throws(() => parsePostgresUrl('mysql://a/db'), /expected postgres/);
  });
});
