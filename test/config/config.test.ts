import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { clusterTlsMode, loadConfig, parseDuration, parseSize, redactUrl } from '../../src/config/index.js';
import { ANY_ADDRESS } from '../../src/util/address.js';

describe('config', () => {
  it('has working defaults', () => {
    const c = loadConfig();
    assert.equal(c.dataDir, './data');
    assert.equal(c.mqttPort, 1883);
    assert.equal(c.kafkaPort, 9092);
    assert.equal(c.httpPort, 8080);
    assert.deepEqual(c.protocols, ['mqtt', 'kafka', 'amqp', 'nats']);
    assert.equal(c.natsPort, 4222);
    assert.equal(c.natsWsPort, null, 'no NATS WebSocket listener unless asked');
  });
  it('layers defaults < file < environment < flags', () => {
    const dir = mkdtempSync(join(tmpdir(), 'flowmq-cfg-'));
    const file = join(dir, 'flowmq.yaml');
    writeFileSync(file, 'mqtt-port: 1000\nkafka-port: 2000\nhttp-port: 3000\nsegment-ms: 30s\n');
    const c = loadConfig({
      file,
      env: { FLOWMQ_KAFKA_PORT: '2001', FLOWMQ_HTTP_PORT: '3001' },
      flags: { 'http-port': '3002', protocols: 'kafka' },
    });
    assert.equal(c.mqttPort, 1000);
    assert.equal(c.kafkaPort, 2001);
    assert.equal(c.httpPort, 3002);
    assert.equal(c.segmentMs, 30_000);
    assert.deepEqual(c.protocols, ['kafka']);
  });
  it('names the key and the problem in one line', () => {
    assert.throws(() => loadConfig({ flags: { 'mqtt-port': 'abc' } }), /^ConfigError: invalid --mqtt-port: expected an integer \(got "abc"\)$/);
    assert.throws(() => loadConfig({ flags: { 'mqtt-port': '70000' } }), /--mqtt-port: expected a port number/);
    assert.throws(() => loadConfig({ env: { FLOWMQ_WAL_FSYNC: 'maybe' } }), /FLOWMQ_WAL_FSYNC: expected true or false/);
    assert.throws(() => loadConfig({ flags: { protocols: 'mqtt,smtp' } }), /unknown protocol "smtp"/);
    assert.deepEqual(loadConfig({ flags: { protocols: 'nats' } }).protocols, ['nats']);
    assert.deepEqual(loadConfig({ flags: { protocols: 'amqp' } }).protocols, ['amqp']);
    assert.throws(() => loadConfig({ flags: { 'amqp-frame-max': '1024' } }), /amqp-frame-max must be 4096 bytes or more/);
    assert.throws(() => loadConfig({ flags: { 'amqp-heartbeat': '1500ms' } }), /amqp-heartbeat must be whole seconds/);
    const dir = mkdtempSync(join(tmpdir(), 'flowmq-cfg-'));
    const file = join(dir, 'bad.yaml');
    writeFileSync(file, 'mqtt-prot: 1\n');
    assert.throws(() => loadConfig({ file }), /unknown key "mqtt-prot"/);
    assert.throws(() => loadConfig({ file: join(dir, 'missing.yaml') }), /config file .*missing.yaml/);
  });
  it("takes the NATS options, refusing a half-configured TLS listener and nats-server's impossible limits", () => {
    const c = loadConfig({ flags: { 'nats-ws-port': '0', 'nats-max-payload': '2MiB', 'nats-ping-interval': '30s' }, env: { FLOWMQ_NATS_TOKEN: 's3cret' } });
    assert.equal(c.natsWsPort, 0);
    assert.equal(c.natsMaxPayload, 2 * 1024 * 1024);
    assert.equal(c.natsPingInterval, 30_000);
    assert.equal(c.natsToken, 's3cret');
    assert.equal(c.natsTlsRequired, false);
    assert.equal(c.natsMaxPendingMsgs, 0);
    assert.equal(loadConfig({ flags: { 'nats-max-pending-msgs': '5000' } }).natsMaxPendingMsgs, 5000);
    assert.throws(() => loadConfig({ flags: { 'nats-tls-cert': '/c.pem' } }), /NATS over TLS needs both nats-tls-cert and nats-tls-key/);
    assert.throws(() => loadConfig({ flags: { 'nats-tls-required': 'true' } }), /nats-tls-required needs nats-tls-cert and nats-tls-key/);
    assert.throws(() => loadConfig({ flags: { 'nats-tls-handshake-first': 'true' } }), /nats-tls-handshake-first needs nats-tls-cert/);
    assert.throws(() => loadConfig({ flags: { 'nats-ws-tls': 'true' } }), /nats-ws-tls needs nats-tls-cert/);
    assert.throws(() => loadConfig({ flags: { 'nats-max-payload': '65MiB', 'nats-max-pending': '1GiB' } }), /nats-max-payload must be at most 64MiB/);
    assert.throws(() => loadConfig({ flags: { 'nats-max-payload': '8MiB', 'nats-max-pending': '4MiB' } }), /nats-max-payload must not exceed nats-max-pending/);
    assert.throws(() => loadConfig({ flags: { 'nats-max-control-line': '100' } }), /nats-max-control-line must be at least 256/);
    assert.throws(() => loadConfig({ flags: { 'nats-max-pings-out': '0' } }), /nats-max-pings-out must be at least 1/);
    assert.throws(() => loadConfig({ flags: { 'nats-max-connections': '0' } }), /nats-max-connections must be at least 1/);
    // A token given badly is not echoed back into a log line.
    assert.throws(() => loadConfig({ flags: { 'nats-token': '' } }), /--nats-token: expected a non-empty string \(got "\*\*\*"\)/);
  });
  it('parses durations and sizes', () => {
    assert.equal(parseDuration('7d'), 7 * 86_400_000);
    assert.equal(parseDuration('500ms'), 500);
    assert.equal(parseDuration('1.5h'), 5_400_000);
    assert.equal(parseDuration('soon'), null);
    assert.equal(parseSize('16MiB'), 16 * 1024 * 1024);
    assert.equal(parseSize('1kb'), 1000);
    assert.equal(parseSize('4096'), 4096);
    assert.equal(parseSize('lots'), null);
  });
  it('takes 0 or a size for the read cache, default left to the log', () => {
    assert.equal(loadConfig().readCacheBytes, null);
    assert.equal(loadConfig({ flags: { 'read-cache-bytes': '0' } }).readCacheBytes, 0);
    assert.equal(loadConfig({ env: { FLOWMQ_READ_CACHE_BYTES: '8MiB' } }).readCacheBytes, 8 * 1024 * 1024);
    assert.throws(() => loadConfig({ flags: { 'read-cache-bytes': '-1' } }), /--read-cache-bytes: expected 0 or a size/);
    assert.throws(() => loadConfig({ flags: { 'segment-bytes': '0' } }), /--segment-bytes: expected a size/);
  });
});

describe('config: MQTT options', () => {
  it('defaults: TLS off until cert and key are set, WebSocket on at 8083, limits', () => {
    const c = loadConfig();
    assert.equal(c.mqttsPort, 8883);
    assert.equal(c.mqttTlsCert, null);
    assert.equal(c.mqttTlsKey, null);
    assert.equal(c.mqttWs, true);
    assert.equal(c.mqttWsPort, 8083);
    assert.equal(c.mqttMaxConnections, 1_000_000);
    assert.equal(c.mqttMaxInflight, 100);
    assert.equal(c.mqttMaxQueuedMessages, 1000);
    assert.equal(c.mqttQueueQos0, false);
    assert.equal(c.mqttMaxTopicLevels, 128);
    assert.equal(c.mqttSessionExpiryMax, 7 * 86_400_000);
    assert.equal(c.mqttMaxKeepalive, 0);
    assert.equal(c.mqttSysInterval, 10_000);
  });
  it('flags, environment and file set them, with clear errors', () => {
    const c = loadConfig({
      flags: { 'mqtts-port': '0', 'mqtt-tls-cert': '/c.pem', 'mqtt-tls-key': '/k.pem', 'mqtt-ws': 'false', 'mqtt-session-expiry-max': '2h' },
      env: { FLOWMQ_MQTT_MAX_INFLIGHT: '20', FLOWMQ_MQTT_MAX_QUEUED_MESSAGES: '5', FLOWMQ_MQTT_SYS_INTERVAL: '1s' },
    });
    assert.equal(c.mqttsPort, 0);
    assert.equal(c.mqttTlsCert, '/c.pem');
    assert.equal(c.mqttTlsKey, '/k.pem');
    assert.equal(c.mqttWs, false);
    assert.equal(c.mqttSessionExpiryMax, 7_200_000);
    assert.equal(c.mqttMaxInflight, 20);
    assert.equal(c.mqttMaxQueuedMessages, 5);
    assert.equal(c.mqttSysInterval, 1000);
    assert.throws(() => loadConfig({ flags: { 'mqtt-ws-port': '99999' } }), /--mqtt-ws-port: expected a port number/);
    assert.throws(() => loadConfig({ flags: { 'mqtt-max-topic-levels': '-1' } }), /--mqtt-max-topic-levels: expected a non-negative integer/);
    const dir = mkdtempSync(join(tmpdir(), 'flowmq-config-mqtt-'));
    const file = join(dir, 'c.yaml');
    writeFileSync(file, 'mqtt-max-connections: 10\nmqtt-queue-qos0: true\n');
    const f = loadConfig({ file });
    assert.equal(f.mqttMaxConnections, 10);
    assert.equal(f.mqttQueueQos0, true);
  });
});

describe('config: users, SASL and Kafka TLS options', () => {
  it('leaves allow-anonymous and kafka-sasl to the broker unless set (users may live in the metastore)', () => {
    const none = loadConfig();
    assert.deepEqual([none.usersFile, none.allowAnonymous, none.kafkaSasl, none.anonymousProtocols, none.defaultPolicy], [null, null, null, null, 'auto']);
    assert.deepEqual(none.kafkaSaslMechanisms, ['PLAIN', 'SCRAM-SHA-256', 'SCRAM-SHA-512']);
    assert.deepEqual([none.kafkaTlsPort, none.kafkaTlsCert, none.kafkaGroupInitialRebalanceDelay], [9093, null, 3000]);
    const users = loadConfig({ flags: { 'users-file': '/u.yaml' } });
    assert.deepEqual([users.allowAnonymous, users.kafkaSasl], [null, null]);
    const open = loadConfig({ flags: { 'users-file': '/u.yaml', 'allow-anonymous': 'true', 'anonymous-protocols': 'mqtt,NATS', 'default-policy': 'deny' } });
    assert.deepEqual([open.allowAnonymous, open.kafkaSasl, open.anonymousProtocols, open.defaultPolicy], [true, null, ['mqtt', 'nats'], 'deny']);
    const c = loadConfig({
      flags: { 'kafka-sasl-mechanisms': 'scram-sha-512,PLAIN', 'kafka-group-initial-rebalance-delay': '0', 'kafka-group-min-session-timeout': '1s' },
    });
    assert.deepEqual(c.kafkaSaslMechanisms, ['SCRAM-SHA-512', 'PLAIN']);
    assert.deepEqual([c.kafkaGroupInitialRebalanceDelay, c.kafkaGroupMinSessionTimeout], [0, 1000]);
  });
  it('refuses combinations that cannot work', () => {
    assert.throws(() => loadConfig({ flags: { 'default-policy': 'maybe' } }), /expected auto, allow or deny/);
    assert.throws(() => loadConfig({ flags: { 'anonymous-protocols': 'mqtt,stomp' } }), /unknown protocol "stomp"/);
    assert.throws(() => loadConfig({ flags: { 'kafka-sasl-mechanisms': 'PLAIN,GSSAPI' } }), /unknown SASL mechanism "GSSAPI"/);
    assert.throws(() => loadConfig({ flags: { 'kafka-tls-cert': '/c.pem' } }), /needs both kafka-tls-cert and kafka-tls-key/);
    assert.throws(() => loadConfig({ flags: { 'kafka-group-min-session-timeout': '1h', 'kafka-group-max-session-timeout': '1m' } }), /must not exceed/);
  });
});

describe('config: admin API bind address and allowed hosts', () => {
  it('binds the admin API to loopback by default, apart from --host', () => {
    const d = loadConfig();
    // Every address of both families (`::`, dual-stack) where the host has IPv6, else every IPv4 one.
    assert.deepEqual([d.host, d.httpHost, d.httpAllowedHosts], [ANY_ADDRESS, '127.0.0.1', []]);
    const v6 = Object.values(networkInterfaces()).some((l) => (l ?? []).some((a) => a.family === 'IPv6'));
    assert.equal(ANY_ADDRESS, v6 ? '::' : '0.0.0.0');
    const c = loadConfig({
      flags: { host: '127.0.0.1', 'http-host': '0.0.0.0' },
      env: { FLOWMQ_HTTP_ALLOWED_HOSTS: 'FlowMQ.internal, 10.0.0.5:8080,[::1],, flowmq.internal' },
    });
    assert.deepEqual([c.host, c.httpHost], ['127.0.0.1', '0.0.0.0']);
    assert.deepEqual(c.httpAllowedHosts, ['flowmq.internal', '10.0.0.5:8080', '[::1]']);
  });
  it('refuses an allowed-hosts entry that is not a host name', () => {
    assert.throws(
      () => loadConfig({ flags: { 'http-allowed-hosts': 'ok.example,http://evil/' } }),
      /invalid --http-allowed-hosts: "http:\/\/evil\/" is not a host name/,
    );
    assert.throws(() => loadConfig({ flags: { 'http-allowed-hosts': 'a@b' } }), /is not a host name/);
  });
});

describe('config: Kafka connection limits', () => {
  it('defaults as Kafka (512 KiB before SASL, 10 min idle), and flags set them', () => {
    const d = loadConfig();
    assert.deepEqual(
      [d.kafkaSaslMaxReceiveSize, d.kafkaFrameReserve, d.kafkaConnectionsMaxIdle, d.kafkaAuthTimeout, d.kafkaRequestReceiveTimeout],
      [512 * 1024, 64 * 1024 * 1024, 600_000, 10_000, 30_000],
    );
    const c = loadConfig({
      flags: {
        'kafka-sasl-max-receive-size': '64KiB',
        'kafka-frame-reserve': '0',
        'kafka-connections-max-idle': '1m',
        'kafka-auth-timeout': '2s',
        'kafka-request-receive-timeout': '5s',
      },
    });
    assert.deepEqual(
      [c.kafkaSaslMaxReceiveSize, c.kafkaFrameReserve, c.kafkaConnectionsMaxIdle, c.kafkaAuthTimeout, c.kafkaRequestReceiveTimeout],
      [65536, 0, 60_000, 2000, 5000],
    );
    assert.throws(() => loadConfig({ flags: { 'kafka-auth-timeout': '0' } }), /--kafka-auth-timeout: expected a duration/);
  });
});

describe('config: storage backends', () => {
  it('defaults to embedded storage that needs no service', () => {
    const c = loadConfig();
    assert.deepEqual(c.metastore, { kind: 'sqlite' });
    assert.equal(c.wal, 'file');
    assert.deepEqual(c.objectStore, { kind: 'fs' });
  });
  it('takes PostgreSQL and S3 from flags, environment or a file', () => {
    const c = loadConfig({
      flags: { metastore: 'postgres://flowmq:pw@db.internal:5433/flowmq', wal: 'postgres' },
      env: { FLOWMQ_OBJECT_STORE: 's3://my-bucket/cluster-a/segments/', FLOWMQ_S3_ENDPOINT: 'http://127.0.0.1:9000' },
    });
    assert.deepEqual(c.metastore, { kind: 'postgres', url: 'postgres://flowmq:pw@db.internal:5433/flowmq' });
    assert.equal(c.wal, 'postgres');
    assert.deepEqual(c.objectStore, { kind: 's3', bucket: 'my-bucket', prefix: 'cluster-a/segments' });
    // An endpoint means MinIO, s3rver, Ceph...: path-style unless told otherwise.
    assert.equal(c.s3PathStyle, true);
    assert.equal(loadConfig({ flags: { 'object-store': 's3://b-1' } }).s3PathStyle, false);
    assert.deepEqual(loadConfig({ flags: { 'object-store': 's3://b-1' } }).objectStore, { kind: 's3', bucket: 'b-1', prefix: '' });
    const dir = mkdtempSync(join(tmpdir(), 'flowmq-cfg-'));
    const file = join(dir, 'flowmq.yaml');
    writeFileSync(file, 'metastore: postgresql://localhost/flowmq\nobject-store: s3://bucket-x/p\ns3-path-style: false\ns3-endpoint: https://s3.example.com\n');
    const f = loadConfig({ file });
    assert.deepEqual(f.metastore, { kind: 'postgres', url: 'postgresql://localhost/flowmq' });
    assert.equal(f.s3PathStyle, false);
  });
  it('refuses malformed values in one line, without echoing a password', () => {
    assert.throws(
      () => loadConfig({ flags: { metastore: 'mysql://u:hunter2@h/db' } }),
      (e: Error) => {
        assert.match(e.message, /^invalid --metastore: expected sqlite or a postgres:\/\/ URL/);
        assert.doesNotMatch(e.message, /hunter2/);
        return true;
      },
    );
    assert.throws(() => loadConfig({ flags: { metastore: 'postgres:' } }), /invalid --metastore/);
    assert.throws(() => loadConfig({ flags: { wal: 'redis' } }), /invalid --wal: expected file, postgres or object/);
    assert.throws(() => loadConfig({ flags: { 'object-store': 'gs://bucket' } }), /invalid --object-store: expected fs or s3:\/\/bucket\/prefix/);
    assert.throws(() => loadConfig({ flags: { 'object-store': 's3://Bad_Bucket/x' } }), /not a valid S3 bucket name/);
    assert.throws(() => loadConfig({ flags: { 'object-store': 's3://bucket/../x' } }), /must not hold \. or \.\. levels/);
    assert.throws(() => loadConfig({ flags: { 's3-endpoint': 'ftp://x' } }), /expected an http:\/\/ or https:\/\/ URL/);
    assert.throws(() => loadConfig({ flags: { wal: 'postgres' } }), /wal postgres .* needs --metastore postgres/);
    assert.throws(() => loadConfig({ flags: { 's3-access-key-id': 'AKIA' } }), /need both s3-access-key-id and s3-secret-access-key/);
    assert.throws(
      () => loadConfig({ flags: { 's3-secret-access-key': '' } }),
      (e: Error) => !e.message.includes('secret-value'),
    );
  });
  it('masks the password of a URL for logs', () => {
    assert.equal(redactUrl('postgres://flowmq:s3cret@db:5432/flowmq'), 'postgres://flowmq:***@db:5432/flowmq');
    assert.equal(redactUrl('postgres://db/flowmq'), 'postgres://db/flowmq');
  });
});

describe('config: cluster mode', () => {
  const shared = {
    cluster: 'true',
    metastore: 'postgres://flowmq@db:5432/flowmq',
    wal: 'postgres',
    'object-store': 's3://bucket/flowmq',
    'cluster-secret': 'a-long-shared-secret',
  };

  it('is off by default; on, it takes the shared backends, a secret, advertised addresses and a lease', () => {
    const d = loadConfig({});
    assert.equal(d.cluster, false);
    assert.equal(d.clusterLease, 5000);
    assert.deepEqual(d.advertisedListeners, {});
    const c = loadConfig({
      flags: { ...shared, 'cluster-lease': '3s', 'advertised-listeners': 'kafka=kafka-1.example:9093,cluster=[::1]:9451', 'broker-id': '2' },
    });
    assert.equal(c.cluster, true);
    assert.equal(c.clusterLease, 3000);
    assert.equal(c.brokerId, 2);
    assert.deepEqual(c.advertisedListeners, { kafka: { host: 'kafka-1.example', port: 9093 }, cluster: { host: '::1', port: 9451 } });
    const env = loadConfig({
      env: {
        FLOWMQ_CLUSTER: '1',
        FLOWMQ_METASTORE: shared.metastore,
        FLOWMQ_WAL: 'postgres',
        FLOWMQ_OBJECT_STORE: 's3://bucket/p',
        FLOWMQ_CLUSTER_SECRET: shared['cluster-secret'],
      },
    });
    assert.equal(env.cluster, true);
  });

  it('refuses --cluster on embedded backends or without a secret, naming every missing piece, and never echoes the secret', () => {
    assert.throws(
      () => loadConfig({ flags: { cluster: 'true' } }),
      (e: Error) => {
        assert.match(
          e.message,
          /^--cluster needs shared backends every broker reaches: --metastore postgres:\/\/\.\.\. \(not the embedded SQLite file\); --wal postgres/,
        );
        assert.match(e.message, /s3:\/\/bucket\/prefix --object-store/);
        assert.match(e.message, /--cluster-secret/);
        return true;
      },
    );
    assert.throws(() => loadConfig({ flags: { ...shared, wal: 'file' } }), /--cluster needs shared backends every broker reaches: --wal postgres/);
    assert.throws(
      () => loadConfig({ flags: { ...shared, 'cluster-secret': 'short-secret' } }),
      (e: Error) => {
        assert.match(e.message, /cluster-secret must be at least 16 characters/);
        assert.doesNotMatch(e.message, /short-secret/);
        return true;
      },
    );
    assert.throws(
      () => loadConfig({ flags: { ...shared, 'advertised-listeners': 'kafka=nohost' } }),
      /invalid --advertised-listeners: "kafka=nohost" is not name=host:port/,
    );
  });

  it('channel TLS: auto is psk without certificates and cert with them; inconsistent settings are refused', () => {
    const d = loadConfig({ flags: shared });
    assert.equal(d.clusterTls, 'auto');
    assert.equal(clusterTlsMode(d), 'psk');
    const files = { 'cluster-tls-cert': '/etc/flowmq/b1.pem', 'cluster-tls-key': '/etc/flowmq/b1-key.pem', 'cluster-tls-ca': '/etc/flowmq/ca.pem' };
    const c = loadConfig({ flags: { ...shared, ...files } });
    assert.equal(clusterTlsMode(c), 'cert');
    assert.equal(c.clusterTlsCa, '/etc/flowmq/ca.pem');
    assert.equal(clusterTlsMode(loadConfig({ flags: { ...shared, 'cluster-tls': 'off' } })), 'off');
    assert.equal(clusterTlsMode(loadConfig({ env: { FLOWMQ_CLUSTER_TLS: 'psk' } })), 'psk');
    assert.throws(() => loadConfig({ flags: { 'cluster-tls': 'yes' } }), /invalid --cluster-tls: expected auto, off, psk or cert/);
    assert.throws(
      () => loadConfig({ flags: { ...shared, 'cluster-tls': 'cert' } }),
      /cluster-tls cert needs cluster-tls-cert, cluster-tls-key and cluster-tls-ca/,
    );
    assert.throws(() => loadConfig({ flags: { ...shared, 'cluster-tls-cert': files['cluster-tls-cert'] } }), /needs both cluster-tls-cert and cluster-tls-key/);
    assert.throws(
      () => loadConfig({ flags: { ...shared, 'cluster-tls-cert': files['cluster-tls-cert'], 'cluster-tls-key': files['cluster-tls-key'] } }),
      /cluster-tls-cert needs cluster-tls-ca/,
    );
    assert.throws(() => loadConfig({ flags: { ...shared, ...files, 'cluster-tls': 'psk' } }), /cluster-tls psk does not use cluster-tls-cert/);
  });

  it('takes --wal-shard repeated, as a comma or space list (multi-host URLs kept whole), or a YAML list', () => {
    const pgArgs = { metastore: 'postgres://m/flowmq', wal: 'postgres' };
    assert.deepEqual(loadConfig({ flags: pgArgs }).walShards, []);
    const repeated = loadConfig({ flags: { ...pgArgs, 'wal-shard': ['postgres://u:pw@a:5432/w', 'postgres://b/w'] } });
    assert.deepEqual(repeated.walShards, ['postgres://u:pw@a:5432/w', 'postgres://b/w']);
    const env = loadConfig({ flags: pgArgs, env: { FLOWMQ_WAL_SHARD: 'postgres://h1:5432,h2:5432/w?target_session_attrs=read-write,postgres://b/w' } });
    assert.deepEqual(env.walShards, ['postgres://h1:5432,h2:5432/w?target_session_attrs=read-write', 'postgres://b/w']);
    assert.deepEqual(loadConfig({ flags: pgArgs, env: { FLOWMQ_WAL_SHARD: 'postgres://a/w postgres://b/w' } }).walShards, ['postgres://a/w', 'postgres://b/w']);
    const dir = mkdtempSync(join(tmpdir(), 'flowmq-cfg-'));
    const file = join(dir, 'flowmq.yaml');
    writeFileSync(file, 'wal-shard:\n  - postgres://a/w\n  - postgres://b/w\n');
    assert.deepEqual(loadConfig({ flags: pgArgs, file }).walShards, ['postgres://a/w', 'postgres://b/w']);
    rmSync(dir, { recursive: true, force: true });
    assert.throws(() => loadConfig({ flags: { 'wal-shard': ['postgres://a/w'] } }), /wal-shard needs --wal postgres/);
    assert.throws(
      () => loadConfig({ flags: { ...pgArgs, 'wal-shard': ['mysql://u:hunter2@h/db'] } }),
      (e: Error) => /^invalid --wal-shard: expected a postgres:\/\/ URL/.test(e.message) && !e.message.includes('hunter2'),
    );
  });

  it('takes --wal object (diskless) on a PostgreSQL metastore, in a cluster too, with its window and size', () => {
    const object = loadConfig({ flags: { metastore: 'postgres://u@h/db', wal: 'object', 'wal-object-window': '250ms', 'wal-object-max-bytes': '16MiB' } });
    assert.deepEqual([object.wal, object.walObjectWindow, object.walObjectMaxBytes], ['object', 250, 16 * 1024 * 1024]);
    assert.deepEqual([loadConfig({}).walObjectWindow, loadConfig({}).walObjectMaxBytes], [100, 8 * 1024 * 1024]);
    assert.throws(() => loadConfig({ flags: { wal: 'object' } }), /wal object indexes its objects in the metastore's database: it needs --metastore postgres/);
    assert.throws(
      () => loadConfig({ flags: { metastore: 'postgres://u@h/db', wal: 'object', 'wal-object-max-bytes': '100' } }),
      /wal-object-max-bytes must be at least 1KiB/,
    );
    const cluster = {
      metastore: 'postgres://u@h/db',
      'object-store': 's3://flowmq-bucket/p',
      cluster: 'true',
      'cluster-secret': 'a-secret-of-16-chars',
    };
    assert.equal(loadConfig({ flags: { ...cluster, wal: 'object' } }).wal, 'object');
    assert.throws(() => loadConfig({ flags: { ...cluster, wal: 'file' } }), /--wal postgres or object/);
  });
});
