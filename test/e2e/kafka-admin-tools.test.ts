/**
 * Kafka admin tools against a real `flowmq start`: the KafkaJS admin client (describeConfigs of topics and of the
 * broker, alterConfigs of both, deleteTopicRecords, fetchOffsets, describeGroups) and kafka-python's
 * KafkaAdminClient (describe_configs, alter_configs, list_consumer_group_offsets, describe_consumer_groups,
 * describe_cluster; test/e2e/kafka-python-admin.py). Broker configs changed at run time act (Produce's
 * message.max.bytes), are shared with the admin API (/api/v1/broker/configs) and survive a restart.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import kafkajs from 'kafkajs';
import { FlowmqProcess, ROOT, run } from './harness.js';

const { Kafka, logLevel, ConfigResourceTypes } = kafkajs;
const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
const SCRIPT = join(ROOT, 'test/e2e/kafka-python-admin.py');

type Step = { step: string; [k: string]: unknown };

describe('kafka admin tools (KafkaJS, kafka-python) against a real broker', () => {
  let broker: FlowmqProcess;
  const kafka = () => new Kafka({ brokers: [broker.kafka], clientId: 'admin-tools', logLevel: logLevel.NOTHING, retry: { retries: 2 } });

  before(async () => {
    broker = await FlowmqProcess.start({ args: ['--kafka-group-initial-rebalance-delay', '0'] });
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
  });

  it("kafka-python: describes and alters topic and broker configs, lists a group's offsets, describes the cluster", async () => {
    const r = await run(PYTHON, [SCRIPT, 'admin', broker.kafka, 'kp.admin', 'kp-admin-group'], { timeoutMs: 60_000 });
    const steps = new Map<string, Step>();
    for (const line of r.stdout.split('\n')) if (line.startsWith('{')) steps.set((JSON.parse(line) as Step).step, JSON.parse(line) as Step);
    assert.ok(steps.has('done'), `${r.stdout}\n${r.stderr}`);
    assert.equal(steps.get('consumed')!.count, 10);

    // [value, read_only, source, is_sensitive, synonyms] per config.
    type Entry = [string | null, boolean, number, boolean, Array<[string, string | null, number]>];
    const tc = steps.get('topic-configs')! as Step & { error: number; count: number; configs: Record<string, Entry> };
    assert.equal(tc.error, 0);
    assert.ok(tc.count >= 35, `${tc.count} topic configs`);
    assert.deepEqual(tc.configs['retention.ms'].slice(0, 4), ['7200000', false, 1, false], 'set at creation: DYNAMIC_TOPIC_CONFIG');
    assert.deepEqual(tc.configs['cleanup.policy'].slice(0, 3), ['delete', false, 4], "the broker's log.cleanup.policy (FlowMQ: delete)");
    assert.deepEqual(tc.configs['segment.bytes'][4][0], ['log.segment.bytes', String(16 * 1024 * 1024), 4], "FlowMQ's --segment-bytes as the broker synonym");
    const bc = steps.get('broker-configs')! as Step & { error: number; count: number; configs: Record<string, Entry> };
    assert.equal(bc.error, 0);
    assert.ok(bc.count > 250, `${bc.count} broker configs`);
    assert.deepEqual(bc.configs['broker.id'].slice(0, 3), ['0', true, 4]);
    assert.deepEqual(bc.configs['num.io.threads'].slice(0, 3), ['8', true, 5]);
    assert.deepEqual(bc.configs['log.retention.ms'].slice(0, 2), [null, false]);
    assert.deepEqual(bc.configs['ssl.keystore.password'].slice(0, 4), [null, true, 5, true]);

    assert.deepEqual(steps.get('alter-topic')!.errors, [[0, null]]);
    const bad = steps.get('alter-topic-bad')!.errors as Array<[number, string]>;
    assert.equal(bad[0][0], 40, 'INVALID_CONFIG');
    assert.match(bad[0][1], /retention\.ms/);
    const after = steps.get('topic-configs-after')!.configs as Record<string, Entry>;
    assert.deepEqual([after['retention.ms'][0], after['retention.ms'][2], after['min.insync.replicas'][0]], ['3600000', 1, '2']);
    assert.deepEqual(steps.get('alter-broker')!.errors, [[0, null]]);
    const stat = steps.get('alter-broker-static')!.errors as Array<[number, string]>;
    assert.equal(stat[0][0], 42, 'INVALID_REQUEST: not alterable at run time');
    assert.match(stat[0][1], /num\.io\.threads/);
    assert.deepEqual((steps.get('broker-configs-after')!.configs as Record<string, Entry>)['log.retention.bytes'].slice(0, 3), ['1073741824', false, 2]);

    assert.deepEqual(steps.get('group-offsets')!.offsets, [
      ['kp.admin', 0, 5],
      ['kp.admin', 1, 5],
    ]);
    const g = steps.get('describe-group')!;
    assert.deepEqual([g.group, g.state, g.members], ['kp-admin-group', 'Empty', 0]);
    const cl = steps.get('cluster')!;
    assert.deepEqual([cl.cluster_id, cl.brokers], ['flowmq', [[0, '127.0.0.1', broker.ports.kafka]]]);
  });

  it('KafkaJS: topic and broker configs, deleteTopicRecords, offsets; broker configs act and survive a restart', async () => {
    let admin = kafka().admin();
    await admin.connect();
    try {
      assert.equal(
        await admin.createTopics({ topics: [{ topic: 'kj.admin', numPartitions: 2, configEntries: [{ name: 'max.message.bytes', value: '100000' }] }] }),
        true,
      );
      const d = await admin.describeConfigs({ resources: [{ type: ConfigResourceTypes.TOPIC, name: 'kj.admin' }], includeSynonyms: true });
      const topic = new Map(d.resources[0].configEntries.map((c) => [c.configName, c]));
      assert.equal(topic.get('max.message.bytes')?.configValue, '100000');
      assert.equal(topic.get('max.message.bytes')?.configSource, 1);
      assert.equal(topic.get('retention.ms')?.configValue, '-1');

      // The broker: every config; then this broker's changes at run time (KafkaJS names a broker, never "").
      const b = await admin.describeConfigs({ resources: [{ type: ConfigResourceTypes.BROKER, name: '0' }], includeSynonyms: false });
      assert.ok(b.resources[0].configEntries.length > 250);
      await admin.alterConfigs({
        validateOnly: false,
        resources: [
          {
            type: ConfigResourceTypes.BROKER,
            name: '0',
            configEntries: [
              { name: 'log.retention.ms', value: '86400000' },
              { name: 'message.max.bytes', value: '2000' },
            ],
          },
        ],
      });
      const set = await admin.describeConfigs({
        resources: [{ type: ConfigResourceTypes.BROKER, name: '0', configNames: ['log.retention.ms', 'message.max.bytes'] }],
        includeSynonyms: false,
      });
      assert.deepEqual(set.resources[0].configEntries.map((c) => [c.configName, c.configValue, c.configSource]).sort(), [
        ['log.retention.ms', '86400000', 2],
        ['message.max.bytes', '2000', 2],
      ]);
      await assert.rejects(
        admin.alterConfigs({
          validateOnly: false,
          resources: [{ type: ConfigResourceTypes.BROKER, name: '0', configEntries: [{ name: 'auto.create.topics.enable', value: 'false' }] }],
        }),
        (err: Error & { type?: string }) => err.type === 'INVALID_REQUEST',
      );

      // message.max.bytes applies to topics without max.message.bytes: a 5 kB batch is refused there, not on kj.admin.
      const p = kafka().producer({ allowAutoTopicCreation: true });
      await p.connect();
      try {
        await assert.rejects(
          p.send({ topic: 'kj.plain', messages: [{ value: 'x'.repeat(5000) }] }),
          (err: Error & { type?: string }) => err.type === 'MESSAGE_TOO_LARGE' || /too large/i.test(err.message),
        );
        await p.send({ topic: 'kj.admin', messages: Array.from({ length: 6 }, (_, i) => ({ value: `${i}`.repeat(5000), partition: 0 })) });
      } finally {
        await p.disconnect();
      }

      // deleteTopicRecords and the offsets a UI shows.
      await admin.deleteTopicRecords({ topic: 'kj.admin', partitions: [{ partition: 0, offset: '4' }] });
      const offs = await admin.fetchTopicOffsets('kj.admin');
      assert.deepEqual(
        offs.find((o) => o.partition === 0),
        { partition: 0, offset: '6', high: '6', low: '4' },
      );
      await admin.setOffsets({ groupId: 'kj-group', topic: 'kj.admin', partitions: [{ partition: 0, offset: '5' }] });
      const fo = await admin.fetchOffsets({ groupId: 'kj-group', topics: ['kj.admin'] });
      assert.deepEqual(fo[0].partitions.map((x) => [x.partition, x.offset]).sort(), [
        [0, '5'],
        [1, '-1'],
      ]);
      const dg = await admin.describeGroups(['kj-group']);
      assert.equal(dg.groups[0].state, 'Empty');
    } finally {
      await admin.disconnect();
    }

    // The admin API shows the same settings and changes them the same way.
    const api = await fetch(`${broker.http}/api/v1/broker/configs?broker=0`);
    assert.equal(api.status, 200);
    const body = (await api.json()) as {
      configs: Array<{ name: string; value: string | null; source: string; readOnly: boolean; sensitive: boolean; documentation: string }>;
    };
    assert.deepEqual(
      body.configs.find((c) => c.name === 'log.retention.ms'),
      {
        name: 'log.retention.ms',
        value: '86400000',
        source: 'dynamic-broker',
        readOnly: false,
        sensitive: false,
        documentation: body.configs.find((c) => c.name === 'log.retention.ms')!.documentation,
      },
    );
    const patch = await fetch(`${broker.http}/api/v1/broker/configs`, {
      method: 'PATCH',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ broker: 'default', configs: { 'log.retention.bytes': '5000000' } }),
    });
    assert.equal(patch.status, 200, await patch.clone().text());
    const refused = await fetch(`${broker.http}/api/v1/broker/configs`, {
      method: 'PATCH',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ configs: { 'num.network.threads': '9' } }),
    });
    assert.equal(refused.status, 400);

    // A restart keeps them (the metastore), and they are in force again.
    broker = await broker.restart();
    admin = kafka().admin();
    await admin.connect();
    try {
      const b = await admin.describeConfigs({ resources: [{ type: ConfigResourceTypes.BROKER, name: '0' }], includeSynonyms: false });
      const entries = new Map(b.resources[0].configEntries.map((c) => [c.configName, c]));
      assert.deepEqual([entries.get('log.retention.ms')?.configValue, entries.get('log.retention.ms')?.configSource], ['86400000', 2]);
      assert.deepEqual([entries.get('log.retention.bytes')?.configValue, entries.get('log.retention.bytes')?.configSource], ['5000000', 3]);
      const t = await admin.describeConfigs({ resources: [{ type: ConfigResourceTypes.TOPIC, name: 'kj.plain' }], includeSynonyms: false });
      const rm = t.resources[0].configEntries.find((c) => c.configName === 'retention.ms');
      assert.deepEqual([rm?.configValue, rm?.configSource], ['86400000', 2], "a topic without its own retention: the broker's");
    } finally {
      await admin.disconnect();
    }
    assert.ok(
      broker.logs.some((l) => l.msg === 'stream defaults changed (broker configs)'),
      'applied at start',
    );
  });
});
