import assert from 'node:assert/strict';
import { chmodSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { runAmqpLoad, type AmqpLoadOptions } from '../../bench/amqp.js';
import { startFlowmq, type Broker } from '../../bench/brokers.js';
import { startRabbitmq, waitAmqp } from '../../bench/rabbitmq.js';
import { sleep } from '../../bench/util.js';

async function amqpFigures(b: Broker): Promise<Record<string, number>> {
  const res = await fetch(`http://127.0.0.1:${b.httpPort}/api/v1/broker`);
  return ((await res.json()) as { amqp: Record<string, number> }).amqp;
}

const base = (port: number, pid: number): AmqpLoadOptions => ({
  port,
  queue: 'bench-test',
  durableQueue: true,
  persistent: true,
  confirms: true,
  window: 32,
  publishers: 1,
  consumers: 1,
  prefetch: 50,
  autoAck: false,
  ahead: 500,
  payloadBytes: 1024,
  warmupS: 0.3,
  seconds: 1,
  brokerPid: pid,
});

describe('bench: runAmqpLoad against FlowMQ', () => {
  it('persistent with confirms: counts what the broker counts, every confirmed message delivered once, the backlog within `ahead`', async () => {
    const b = await startFlowmq(['--protocols', 'mqtt,kafka,amqp']);
    try {
      await waitAmqp(b.amqpPort, 20_000, () => true);
      const r = await runAmqpLoad(base(b.amqpPort, b.pid));
      assert.deepEqual(r.errors, []);
      assert.equal(r.nacked, 0);
      assert.ok(r.confirmed > 0 && r.confirmed === r.published, `${r.confirmed} of ${r.published} confirmed`);
      assert.equal(r.undelivered, 0, 'the drained queue delivered every publish');
      assert.equal(r.consumed, r.published);
      assert.equal(r.redelivered, 0);
      assert.ok(r.backlogAtEnd <= 500, `backlog ${r.backlogAtEnd} within ahead`);
      assert.ok(r.confirm !== null && r.confirm.count > 0 && r.confirm.p50 <= r.confirm.p99);
      assert.ok(r.endToEnd.count > 0);
      assert.ok(r.publishPerSec > 0 && r.consumePerSec > 0);
      assert.ok(r.cpu.broker !== null && r.cpu.broker > 0, 'the broker process was found and used CPU');
      const f = await amqpFigures(b);
      assert.equal(f.published, r.published, 'the broker took exactly the publishes the generator counted');
      assert.equal(f.confirmsAcked, r.confirmed);
      assert.equal(f.delivered, r.consumed);
    } finally {
      await b.stop();
    }
  });

  it('transient without confirms and with no-ack consumers', async () => {
    const b = await startFlowmq(['--protocols', 'mqtt,kafka,amqp']);
    try {
      await waitAmqp(b.amqpPort, 20_000, () => true);
      const r = await runAmqpLoad({ ...base(b.amqpPort, b.pid), durableQueue: false, persistent: false, confirms: false, autoAck: true });
      assert.deepEqual(r.errors, []);
      assert.equal(r.confirm, null);
      assert.equal(r.confirmed, 0);
      assert.ok(r.published > 0);
      assert.equal(r.undelivered, 0);
      assert.ok(r.backlogAtEnd <= 500, `backlog ${r.backlogAtEnd} within ahead`);
      const f = await amqpFigures(b);
      assert.equal(f.published, r.published);
      assert.equal(f.delivered, r.consumed);
    } finally {
      await b.stop();
    }
  });
});

describe('bench: startRabbitmq when the node does not come up', () => {
  // A stand-in for rabbitmq-server (CI has no RabbitMQ): the failure paths must leave nothing behind.
  const fake = (body: string) => {
    const dir = mkdtempSync(join(tmpdir(), 'fake-rabbitmq-'));
    const script = join(dir, 'rabbitmq-server');
    writeFileSync(script, `#!/bin/sh\n${body}\n`);
    chmodSync(script, 0o755);
    return dir;
  };
  const ourTempDirs = () => readdirSync(tmpdir()).filter((d) => d.startsWith('rabbitmq-bench-'));

  it('a server that exits: rejects with its output, its temporary directory removed', async () => {
    const bin = fake('echo "boot failed: $RABBITMQ_NODENAME on $RABBITMQ_NODE_PORT"; exit 3');
    const before = ourTempDirs();
    try {
      await assert.rejects(startRabbitmq(bin, 20_000), /rabbitmq did not start: the process exited[\s\S]*boot failed: flowmq-bench-\d+-\d+@localhost on \d+/);
      assert.deepEqual(ourTempDirs(), before);
    } finally {
      rmSync(bin, { recursive: true, force: true });
    }
  });

  it('a server that never accepts AMQP: after the timeout its whole process group is killed', async () => {
    const pidFile = join(tmpdir(), `fake-rabbitmq-child-${process.pid}`);
    // A child of the script, as beam.smp is: it must go with the group.
    const bin = fake(`sleep 300 &\necho $! > ${pidFile}\nwait`);
    const before = ourTempDirs();
    try {
      await assert.rejects(startRabbitmq(bin, 1500), /rabbitmq did not start: no AMQP connection/);
      const child = Number(readFileSync(pidFile, 'utf8'));
      let gone = false;
      for (let i = 0; i < 100 && !gone; i++) {
        gone = !existsSync(`/proc/${child}`) || /^\S+ \S+ Z/.test(readFileSync(`/proc/${child}/stat`, 'utf8'));
        if (!gone) await sleep(50);
      }
      assert.ok(gone, `the server's child ${child} is gone`);
      assert.deepEqual(ourTempDirs(), before);
    } finally {
      rmSync(bin, { recursive: true, force: true });
      rmSync(pidFile, { force: true });
    }
  });
});
