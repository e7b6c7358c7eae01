import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import mqtt from 'mqtt';
import { pino } from 'pino';
import { LatencyHistogram } from '../../src/core/index.js';
import { ClientRegistry, createMetrics } from '../../src/control/index.js';
import { startBroker } from '../../src/broker.js';
import { loadConfig } from '../../src/config/index.js';

/** One sample line of the exposition text: name, labels, value. */
interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Parses Prometheus text format 0.0.4 (what a scraper reads); throws on a line it cannot read. */
function parse(text: string): { samples: Sample[]; types: Map<string, string> } {
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const t = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (t) {
      types.set(t[1], t[2]);
      continue;
    }
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(m, `not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    // Prometheus reads values with Go's ParseFloat: NaN and Inf in any case (prom-client writes "Nan").
    const value = /^[+-]?inf$/i.test(m[3]) ? (m[3].startsWith('-') ? -Infinity : Infinity) : /^nan$/i.test(m[3]) ? NaN : Number(m[3]);
    assert.ok(!Number.isNaN(value) || /^nan$/i.test(m[3]), `bad value in: ${line}`);
    samples.push({ name: m[1], labels, value });
  }
  return { samples, types };
}

function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  return samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;
}

describe('createMetrics', () => {
  it('reads the client registry at each scrape: connections, messages and bytes by protocol and namespace', async () => {
    const clients = new ClientRegistry();
    const metrics = createMetrics({ clients });
    const sock = { bytesRead: 0, bytesWritten: 0 };
    const a = clients.register({ protocol: 'mqtt', listener: 'mqtt', socket: sock, kick: () => undefined });
    const b = clients.register({ protocol: 'kafka', listener: 'kafka', kick: () => undefined });
    b.namespace = 'team-a';
    a.messagesIn = 3;
    sock.bytesRead = 120;
    let { samples, types } = parse(await metrics.text());
    assert.equal(types.get('flowmq_connections'), 'gauge');
    assert.equal(types.get('flowmq_messages_in_total'), 'counter');
    assert.equal(value(samples, 'flowmq_connections', { protocol: 'mqtt', namespace: 'default' }), 1);
    assert.equal(value(samples, 'flowmq_connections', { protocol: 'kafka', namespace: 'team-a' }), 1);
    assert.equal(value(samples, 'flowmq_messages_in_total', { protocol: 'mqtt', namespace: 'default' }), 3);
    assert.equal(value(samples, 'flowmq_bytes_in_total', { protocol: 'mqtt', namespace: 'default' }), 120);

    // Figures move between scrapes; a closed connection leaves its counters in the totals (counters never go down).
    a.messagesIn = 5;
    a.messagesOut = 2;
    sock.bytesWritten = 40;
    a.close();
    ({ samples } = parse(await metrics.text()));
    assert.equal(value(samples, 'flowmq_connections', { protocol: 'mqtt', namespace: 'default' }), 0);
    assert.equal(value(samples, 'flowmq_messages_in_total', { protocol: 'mqtt', namespace: 'default' }), 5);
    assert.equal(value(samples, 'flowmq_messages_out_total', { protocol: 'mqtt', namespace: 'default' }), 2);
    assert.equal(value(samples, 'flowmq_bytes_out_total', { protocol: 'mqtt', namespace: 'default' }), 40);
  });

  it('writes latency histograms as cumulative buckets in seconds with _sum and _count', async () => {
    const h = new LatencyHistogram();
    const metrics = createMetrics({ wal: { size: () => 1234, commitLatency: h } });
    h.record(0.5); // 0.5 ms
    h.record(3); // 3 ms
    h.record(3);
    const { samples, types } = parse(await metrics.text());
    assert.equal(types.get('flowmq_wal_commit_seconds'), 'histogram');
    assert.equal(value(samples, 'flowmq_wal_bytes'), 1234);
    const buckets = samples.filter((s) => s.name === 'flowmq_wal_commit_seconds_bucket');
    const les = buckets.map((s) => (s.labels.le === '+Inf' ? Infinity : Number(s.labels.le)));
    assert.deepEqual(
      [...les].sort((x, y) => x - y),
      les,
      'buckets in increasing order',
    );
    for (let i = 1; i < buckets.length; i++) assert.ok(buckets[i].value >= buckets[i - 1].value, 'cumulative');
    assert.equal(value(samples, 'flowmq_wal_commit_seconds_bucket', { le: '+Inf' }), 3);
    assert.equal(value(samples, 'flowmq_wal_commit_seconds_count'), 3);
    assert.ok(Math.abs(value(samples, 'flowmq_wal_commit_seconds_sum')! - 0.0065) < 1e-9);
    // 0.5 ms is under the 1.28 ms bound, 3 ms is not; both under 5.12 ms.
    assert.equal(value(samples, 'flowmq_wal_commit_seconds_bucket', { le: '0.00128' }), 1);
    assert.equal(value(samples, 'flowmq_wal_commit_seconds_bucket', { le: '0.00512' }), 3);
  });

  it('caches consumer-group lag between scrapes and reads quotas and auth figures', async () => {
    let listed = 0;
    const groups = {
      async list() {
        listed++;
        return [{ name: 'g1', protocol: 'kafka', state: 'Stable', members: 2, lag: 7 * listed }];
      },
    };
    const quotas = {
      figures: () => ({ default: { connections: 1, throttled: 4, throttledMs: 1500, refusedConnections: 2, refusedWrites: 3 } }),
      storedBytes: () => new Map([['t1', { hot: 10, objects: 200 }]]),
    };
    const auth = { stats: { ok: 1, bad: 2, busy: 0, throttled: 3 } };
    const metrics = createMetrics({
      protocols: () => [{ name: 'kafka', protocol: { groups } }],
      quotas,
      auth,
      access: { stats: { denied: 9 } },
      groupLagCacheMs: 60_000,
    });
    let { samples } = parse(await metrics.text());
    assert.equal(value(samples, 'flowmq_consumer_group_lag', { protocol: 'kafka', group: 'g1' }), 7);
    assert.equal(value(samples, 'flowmq_consumer_group_members', { group: 'g1' }), 2);
    ({ samples } = parse(await metrics.text()));
    assert.equal(listed, 1, 'the second scrape reuses the listing');
    assert.equal(value(samples, 'flowmq_consumer_group_lag', { group: 'g1' }), 7);
    assert.equal(value(samples, 'flowmq_quota_throttled_total', { namespace: 'default' }), 4);
    assert.equal(value(samples, 'flowmq_quota_throttled_seconds_total', { namespace: 'default' }), 1.5);
    assert.equal(value(samples, 'flowmq_quota_refused_connections_total', { namespace: 'default' }), 2);
    assert.equal(value(samples, 'flowmq_quota_refused_writes_total', { namespace: 'default' }), 3);
    assert.equal(value(samples, 'flowmq_namespace_stored_bytes', { namespace: 't1', tier: 'hot' }), 10);
    assert.equal(value(samples, 'flowmq_namespace_stored_bytes', { namespace: 't1', tier: 'objects' }), 200);
    assert.equal(value(samples, 'flowmq_auth_attempts_total', { result: 'bad' }), 2);
    assert.equal(value(samples, 'flowmq_auth_attempts_total', { result: 'throttled' }), 3);
    assert.equal(value(samples, 'flowmq_authorization_denials_total'), 9);
  });
});

describe('broker metrics', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'flowmq-metrics-'));
  after(() => rmSync(dataDir, { recursive: true, force: true }));

  it('move after an MQTT publish: routing, stream capture, the WAL commit histogram, listener connections; runtime metrics present', async () => {
    const flags = {
      'data-dir': dataDir,
      host: '127.0.0.1',
      'mqtt-port': '0',
      'mqtt-ws-port': '0',
      'kafka-port': '0',
      'amqp-port': '0',
      'nats-port': '0',
      'http-port': '0',
    };
    const broker = await startBroker(loadConfig({ flags, env: {} }), pino({ level: 'silent' }));
    let client: mqtt.MqttClient | null = null;
    try {
      await broker.engine.createStream({ name: 'metered', partitions: 1, bindings: ['meter/#'] });
      const before = parse(await broker.metrics.text()).samples;
      assert.equal(value(before, 'flowmq_ready'), 1);
      assert.equal(value(before, 'flowmq_listener_connections', { listener: 'mqtt' }), 0);
      const published0 = value(before, 'flowmq_routed_messages_total', { event: 'published' }) ?? 0;
      const captured0 = value(before, 'flowmq_routed_messages_total', { event: 'captured' }) ?? 0;
      const commits0 = value(before, 'flowmq_wal_commit_seconds_count') ?? 0;

      client = await mqtt.connectAsync(`mqtt://127.0.0.1:${broker.ports().mqtt}`, { reconnectPeriod: 0 });
      for (let i = 0; i < 5; i++) await client.publishAsync('meter/x', `m${i}`, { qos: 1 });

      // As a scraper reads it: GET /metrics on the admin port, no login.
      const res = await fetch(`http://127.0.0.1:${broker.ports().http}/metrics`);
      assert.equal(res.status, 200);
      assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
      const { samples, types } = parse(await res.text());
      assert.equal(value(samples, 'flowmq_routed_messages_total', { event: 'published' }), published0 + 5);
      assert.equal(value(samples, 'flowmq_routed_messages_total', { event: 'captured' }), captured0 + 5);
      // QoS 1 to a stream is acknowledged once durable: the WAL committed at least one group.
      assert.ok(value(samples, 'flowmq_wal_commit_seconds_count')! > commits0);
      assert.ok(value(samples, 'flowmq_wal_bytes')! > 0);
      assert.equal(value(samples, 'flowmq_listener_connections', { listener: 'mqtt' }), 1);
      // The MQTT adapter's entry in the client registry: by protocol and namespace.
      assert.equal(value(samples, 'flowmq_connections', { protocol: 'mqtt', namespace: 'default' }), 1);
      assert.equal(value(samples, 'flowmq_messages_in_total', { protocol: 'mqtt', namespace: 'default' }), 5);
      assert.ok(value(samples, 'flowmq_bytes_in_total', { protocol: 'mqtt', namespace: 'default' })! > 0);
      assert.equal(value(samples, 'flowmq_streams'), 1);
      const elu = value(samples, 'flowmq_event_loop_utilization')!;
      assert.ok(elu >= 0 && elu <= 1, String(elu));
      // prom-client's runtime metrics, under the flowmq_ prefix.
      for (const name of [
        'flowmq_process_cpu_user_seconds_total',
        'flowmq_process_resident_memory_bytes',
        'flowmq_nodejs_heap_size_used_bytes',
        'flowmq_nodejs_eventloop_lag_seconds',
      ]) {
        assert.ok(types.has(name), `${name} missing`);
      }
      assert.equal(types.get('flowmq_nodejs_gc_duration_seconds'), 'histogram');

      // Sealing the stream writes a segment object (a put, or an adopted WAL file) and commits it.
      await broker.log.flushAll();
      const sealed = parse(await broker.metrics.text()).samples;
      const writes =
        (value(sealed, 'flowmq_object_store_requests_total', { operation: 'put' }) ?? 0) +
        (value(sealed, 'flowmq_object_store_requests_total', { operation: 'adopt' }) ?? 0);
      assert.ok(writes >= 1, `object writes: ${writes}`);
      assert.ok(value(sealed, 'flowmq_log_sealed_segments_total')! >= 1);
      assert.ok(types.has('flowmq_log_sealed_segments_total'));
    } finally {
      await client?.endAsync();
      await broker.close();
    }
  });
});
