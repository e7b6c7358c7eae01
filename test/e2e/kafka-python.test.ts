/**
 * kafka-python (Debian's python3-kafka 2.0, a pure-Python client written apart from librdkafka and KafkaJS, which
 * negotiates older protocol versions than they do) against a real `flowmq start` process: its admin client, its
 * producer with every codec, a consumer group that commits and resumes, offsets by time, and a group of three
 * members that rebalances when one leaves; SASL PLAIN and SCRAM against a users file. The client side is
 * test/e2e/kafka-python-client.py.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FlowmqProcess, ROOT, eachLine, eventually, run } from './harness.js';

const CLIENT = join(ROOT, 'test/e2e/kafka-python-client.py');
// Debian's interpreter, where python3-kafka is installed (a python3 earlier in PATH may be another one).
const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';

type Step = { step: string; [k: string]: unknown };

function steps(stdout: string): Map<string, Step> {
  const m = new Map<string, Step>();
  for (const line of stdout.split('\n')) {
    if (!line.startsWith('{')) continue;
    const s = JSON.parse(line) as Step;
    m.set(s.step, s);
  }
  return m;
}

/** A consumer group member in a process of its own; `lines` grows as it prints. */
class Member {
  readonly lines: Step[] = [];
  readonly proc: ChildProcess;
  private stderr = '';
  constructor(bootstrap: string, topic: string, group: string) {
    this.proc = spawn(PYTHON, [CLIENT, 'member', bootstrap, topic, group], { stdio: ['pipe', 'pipe', 'pipe'] });
    eachLine(this.proc.stdout!, (line) => {
      if (line.startsWith('{')) this.lines.push(JSON.parse(line) as Step);
    });
    this.proc.stderr!.on('data', (d: Buffer) => (this.stderr += d.toString()));
  }
  get assigned(): number[] | null {
    const a = this.lines.filter((l) => l.step === 'assigned').pop();
    return a ? (a.partitions as number[]) : null;
  }
  get values(): string[] {
    return this.lines.filter((l) => l.step === 'read').flatMap((l) => (l.records as Array<[number, number, string]>).map((r) => r[2]));
  }
  get left(): boolean {
    return this.lines.some((l) => l.step === 'left');
  }
  get exited(): boolean {
    return this.proc.exitCode !== null || this.proc.signalCode !== null;
  }
  leave(): void {
    this.proc.stdin!.end('leave\n');
  }
  describe(): string {
    return `${JSON.stringify(this.lines.filter((l) => l.step !== 'read'))} ${this.stderr.slice(-2000)}`;
  }
}

/** Whether the members' assignments are disjoint and together cover partitions 0..n-1. */
function covers(members: Member[], n: number): boolean {
  const all = members.map((m) => m.assigned);
  if (all.some((a) => a === null || a.length === 0)) return false;
  const flat = all.flat() as number[];
  return flat.length === n && new Set(flat).size === n && flat.every((p) => p >= 0 && p < n);
}

describe('kafka-python against a real broker', () => {
  let broker: FlowmqProcess;
  before(async () => {
    broker = await FlowmqProcess.start({ args: ['--kafka-group-initial-rebalance-delay', '1000'] });
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
  });

  it('administers topics, produces with every codec, consumes in a group that commits and resumes, finds offsets by time', async () => {
    const r = await run(PYTHON, [CLIENT, 'roundtrip', broker.kafka, 'kp.orders', 'kp-readers'], { timeoutMs: 90_000 });
    assert.equal(r.code, 0, r.stderr);
    const s = steps(r.stdout);
    assert.ok((s.get('topics')!.topics as string[]).includes('kp.orders'));
    assert.equal(s.get('configs')!.error, 0);
    assert.ok('retention.ms' in (s.get('configs')!.configs as Record<string, string>));

    type Produced = { codec: string; i: number; partition: number; offset: number; timestamp: number };
    const produced = s.get('produced')!.records as Produced[];
    assert.equal(produced.length, 100);
    for (let p = 0; p < 3; p++) {
      const offsets = produced
        .filter((x) => x.partition === p)
        .map((x) => x.offset)
        .sort((a, b) => a - b);
      assert.deepEqual(
        offsets,
        Array.from({ length: offsets.length }, (_, i) => i),
        `partition ${p}: offsets from 0, no gaps`,
      );
    }
    // Records of one key stay in one partition.
    for (let k = 0; k < 7; k++) assert.equal(new Set(produced.filter((x) => x.i % 7 === k).map((x) => x.partition)).size, 1);

    type Consumed = { partition: number; offset: number; key: string; value: { codec: string; i: number }; headers: string[][]; timestamp: number };
    const consumed = s.get('consumed')!;
    const records = consumed.records as Consumed[];
    assert.equal(records.length, 100);
    const at = new Map(produced.map((x) => [`${x.partition}/${x.offset}`, x]));
    for (const c of records) {
      const p = at.get(`${c.partition}/${c.offset}`);
      assert.ok(p, `consumed ${c.partition}/${c.offset} was produced`);
      assert.deepEqual([c.value.codec, c.value.i, c.key, c.headers, c.timestamp], [p.codec, p.i, `k${p.i % 7}`, [['codec', p.codec]], p.timestamp]);
    }
    assert.equal(new Set(records.map((c) => `${c.partition}/${c.offset}`)).size, 100, 'each record once');
    assert.deepEqual(consumed.committed, consumed.end, 'committed at the end of every partition');
    assert.deepEqual(consumed.beginning, [0, 0, 0]);
    assert.equal(
      (consumed.end as number[]).reduce((a, b) => a + b, 0),
      100,
    );

    const byTime = s.get('by-time')!;
    assert.equal(byTime.offset, byTime.expected);
    assert.equal(s.get('resumed')!.records, 0, 'the group resumes at its committed offsets');
    const groups = s.get('groups')!;
    assert.ok((groups.groups as string[]).includes('kp-readers'));
    assert.equal(groups.state, 'Empty');
    assert.deepEqual(
      groups.offsets,
      (consumed.end as number[]).map((o, p) => [p, o]),
    );
    assert.equal(s.get('partitions')!.count, 5);
    const deleted = s.get('deleted')!;
    assert.ok(!(deleted.topics as string[]).includes('kp.orders'));
    assert.ok(!(deleted.groups as string[]).includes('kp-readers'));
  });

  it('balances a group of three members and rebalances when one leaves, every record read', async () => {
    await broker.api('POST', '/api/v1/streams', { name: 'kp.members', partitions: 6 });
    const produce = async (from: number, to: number) => {
      const r = await run(PYTHON, [CLIENT, 'produce', broker.kafka, 'kp.members', String(from), String(to)], { timeoutMs: 30_000 });
      assert.equal(r.code, 0, r.stderr);
    };
    await produce(0, 60);
    const members = [0, 1, 2].map(() => new Member(broker.kafka, 'kp.members', 'kp-trio'));
    const seen = () => new Set(members.flatMap((m) => m.values));
    try {
      await eventually(() => covers(members, 6), 40_000, `three members sharing 6 partitions: ${members.map((m) => m.describe()).join(' | ')}`);
      await eventually(() => seen().size === 60, 20_000, 'all 60 records read');

      members[0].leave();
      await eventually(() => members[0].left && members[0].exited, 20_000, 'the first member left');
      const rest = members.slice(1);
      await eventually(() => covers(rest, 6), 40_000, `two members sharing 6 partitions: ${rest.map((m) => m.describe()).join(' | ')}`);
      assert.ok(
        rest.every((m) => m.assigned!.length === 3),
        'three partitions each',
      );
      await produce(60, 72);
      await eventually(() => new Set(rest.flatMap((m) => m.values)).size >= 12 && seen().size === 72, 20_000, 'the records produced after the rebalance read');
    } finally {
      for (const m of members) if (!m.exited) m.leave();
      await eventually(() => members.every((m) => m.exited), 20_000, 'members exited').catch(() => members.forEach((m) => m.proc.kill('SIGKILL')));
    }
  });
});

describe('kafka-python with SASL against a real broker', () => {
  let dir = '';
  let broker: FlowmqProcess;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'flowmq-kp-sasl-'));
    writeFileSync(join(dir, 'users.yaml'), '- username: carol\n  password: "s3cret:pass"\n');
    broker = await FlowmqProcess.start({ args: ['--users-file', join(dir, 'users.yaml')] });
  });
  after(async () => {
    await broker?.stop();
    broker?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  const sasl = async (mechanism: string, password: string): Promise<Step> => {
    const r = await run(PYTHON, [CLIENT, 'sasl', broker.kafka, mechanism, 'carol', password, 'kp.secure'], { timeoutMs: 60_000 });
    assert.equal(r.code, 0, r.stderr);
    return steps(r.stdout).get('sasl')!;
  };

  it('authenticates with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, and refuses a wrong password', async () => {
    for (const mechanism of ['PLAIN', 'SCRAM-SHA-256', 'SCRAM-SHA-512']) {
      const s = await sasl(mechanism, 's3cret:pass');
      assert.deepEqual([s.ok, s.value], [true, mechanism], String(s.error));
      assert.ok(
        broker.logs.some((l) => l.msg === 'SASL authentication succeeded' && l.principal === 'carol' && l.mechanism === mechanism),
        mechanism,
      );
    }
    const wrong = await sasl('SCRAM-SHA-512', 'guess');
    assert.equal(wrong.ok, false);
    // kafka-python reports a bootstrap that cannot authenticate as NoBrokersAvailable; the broker's log says why.
    assert.match(String(wrong.error), /NoBrokersAvailable/);
    assert.ok(
      broker.logs.some(
        (l) =>
          l.msg.startsWith('SASL authentication failed') &&
          l.mechanism === 'SCRAM-SHA-512' &&
          l.username === 'carol' &&
          l.reason === 'invalid username or password',
      ),
      'the broker logged the refusal and its reason',
    );
  });
});
