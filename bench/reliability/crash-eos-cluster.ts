/**
 * `npm run crash-test -- --scenario eos-cluster`: the exactly-once consume-transform-produce pipeline of
 * `--scenario eos`, on a three-broker cluster (test/helpers/cluster.ts: PostgreSQL metastore and WAL, s3rver objects,
 * three `bin/flowmq start --cluster` processes), with librdkafka's transactional producer (Debian's
 * python3-confluent-kafka, bench/reliability/eos-pipeline.py: send_offsets_to_transaction, read_committed input).
 *
 * The input topic is filled first; while the pipeline copies it, each round kills -9 one broker chosen by its role,
 * in turn the transaction coordinator of the pipeline's transactional.id, a broker leading input partitions and one
 * leading output partitions (not the coordinator when another broker leads some; the victim's other roles are
 * reported: with three brokers they overlap), a random 0.1–1.6 s after the first commit following the previous
 * restart. The broker is restarted on the same broker id and Kafka port (a new process): every other round as soon
 * as the cluster frees its id (a live lease holds it), otherwise after its lease expired and its work moved. Every
 * third round (killPipelineEvery) the pipeline process is killed -9 too, holding a transaction open with its
 * records written, and a new one started at once: its init_transactions aborts that transaction at the partitions'
 * leaders of the moment. When the group's committed offsets reach the end of every input partition, kcat
 * (librdkafka) reads the output with `isolation.level=read_committed`: every input record must be there exactly
 * once, nothing else, and the committed offsets must equal the input's ends.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, existsSync, mkdtempSync, rmSync, writeFileSync, type WriteStream } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import kafkajs from 'kafkajs';
import { eachLine, kcatConsume, ROOT, sleep } from '../../test/e2e/harness.js';
import { startCluster } from '../../test/helpers/cluster.js';
import { prng } from '../../test/helpers/prng.js';

const { Kafka, logLevel } = kafkajs;
const IN = 'eos-in';
const OUT = 'eos-out';
const GROUP = 'eos-pipe';
const TXID = 'eos-pipe-tx';
const PARTITIONS = 6;
const PIPELINE = join(ROOT, 'bench/reliability/eos-pipeline.py');
// Debian's interpreter, where python3-confluent-kafka is installed (.ci/run installs it).
const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';

export type Role = 'coordinator' | 'input-leader' | 'output-leader';
const ROLES: readonly Role[] = ['coordinator', 'input-leader', 'output-leader'];

export interface EosClusterOptions {
  records: number;
  kills: number;
  seed?: number;
  /** The victims' roles, in turn (default: coordinator, input-leader, output-leader). */
  roles?: readonly Role[];
  /** Every Nth kill also kills -9 the pipeline process (default 3; 1: every kill). */
  killPipelineEvery?: number;
  /** Keep the cluster's broker logs in this directory (FLOWMQ_CLUSTER_LOGS) and the pipeline's log. */
  keep?: boolean;
  log?: (line: string) => void;
}

export interface EosKill {
  role: Role;
  broker: number;
  /** Every role the victim had when it was killed: 'coordinator', 'group', 'in/<p>', 'out/<p>'. */
  held: string[];
  /** Restarted before its lease expired (true) or after the cluster moved its work (false). */
  quick: boolean;
  /** The pipeline process was killed -9 at the same moment (and a new one started). */
  pipeline: boolean;
  afterTxns: number;
  /** From the kill to the pipeline's next commit, ms. */
  pauseMs: number;
}

export interface EosClusterSummary {
  ok: boolean;
  records: number;
  kills: EosKill[];
  /** kill -9 of the pipeline process itself. */
  pipelineKills: number;
  /** Times a pipeline process started over (errors seen by librdkafka), and retried commits. */
  restarts: number;
  retriedCommits: number;
  committedTxns: number;
  found: number;
  lost: number;
  duplicates: number;
  /** Records in the output that are no input's copy. */
  extra: number;
  /** Output records read_uncommitted sees beyond read_committed's: copies of aborted transactions. */
  abortedCopies: number;
  /** The group's committed offset per input partition, and the partition's end. */
  offsets: Array<{ partition: number; committed: string; end: string }>;
  offsetsOk: boolean;
  errors: Record<string, number>;
  seconds: number;
  logDir: string | null;
}

/** What the pipeline processes reported, over all of them. */
interface PipelineStats {
  committedTxns: number;
  /** When the last commit was reported (ms). */
  lastCommitAt: number;
  restarts: number;
  retriedCommits: number;
  errors: Record<string, number>;
}

/** One pipeline process (a new one after a kill -9 of the previous). */
class Pipeline {
  readonly proc: ChildProcess;
  private readonly exited: Promise<number | null>;
  /** Resolves when the process holds an open transaction whose records are written (after hold()). */
  private holding: () => void = () => undefined;

  constructor(bootstrap: string, logFile: WriteStream, stats: PipelineStats) {
    this.proc = spawn(PYTHON, [PIPELINE, bootstrap, IN, OUT, GROUP, TXID], { stdio: ['pipe', 'pipe', 'pipe'] });
    this.exited = new Promise((r) => this.proc.on('exit', (code) => r(code)));
    this.proc.stderr!.pipe(logFile, { end: false });
    eachLine(this.proc.stdout!, (line) => {
      if (!line.startsWith('{')) return;
      const e = JSON.parse(line) as { ev: string; error?: string };
      if (e.ev === 'commit') {
        stats.committedTxns++;
        stats.lastCommitAt = Date.now();
      } else if (e.ev === 'holding') this.holding();
      else if (e.ev === 'idle') logFile.write(`${line}\n`);
      else if (e.ev === 'restart' || e.ev === 'retry-commit') {
        if (e.ev === 'restart') stats.restarts++;
        else stats.retriedCommits++;
        stats.errors[e.error ?? '?'] = (stats.errors[e.error ?? '?'] ?? 0) + 1;
        logFile.write(`${line}\n`);
      }
    });
  }

  /** Asks it to write its next transaction's records and keep that transaction open; false if it did not in 30 s. */
  async hold(): Promise<boolean> {
    const held = new Promise<void>((r) => (this.holding = r));
    this.proc.stdin!.write('hold\n');
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<false>((r) => (timer = setTimeout(() => r(false), 30_000)));
    try {
      return await Promise.race([held.then(() => true), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** kill -9 of the pipeline itself: its open transaction is left for the next incarnation's init_transactions. */
  async kill(): Promise<void> {
    this.proc.kill('SIGKILL');
    await this.exited;
  }

  /** Asks it to stop after its current transaction; resolves with its exit code. */
  async stop(): Promise<number | null> {
    this.proc.stdin!.end('stop\n');
    // Its last transaction may wait for a broker that is starting; past 90 s it is stuck: killed.
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), 90_000);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }
}

export async function runEosClusterCrash(opts: EosClusterOptions): Promise<EosClusterSummary> {
  const log = opts.log ?? (() => undefined);
  const rnd = prng(opts.seed ?? 1);
  const started = Date.now();
  const logDir = opts.keep ? mkdtempSync(join(tmpdir(), 'flowmq-eos-cluster-')) : null;
  if (logDir) process.env.FLOWMQ_CLUSTER_LOGS = logDir;
  const scratch = mkdtempSync(join(tmpdir(), 'flowmq-eos-cluster-run-'));
  const logFile = createWriteStream(join(logDir ?? scratch, 'pipeline.log'));
  const c = await startCluster({ brokers: 3, haproxy: false, args: ['--kafka-group-initial-rebalance-delay', '0'] });
  let pipeline: Pipeline | null = null;
  try {
    // Each broker keeps its Kafka port across restarts: the clients' bootstrap list stays valid.
    const kafkaPort = new Map(c.brokers.map((b) => [b.id, b.proc.ports.kafka]));
    const bootstrap = c.brokers.map((b) => b.kafka).join(',');
    await c.broker(1).proc.api('POST', '/api/v1/streams', { name: IN, partitions: PARTITIONS });
    await c.broker(1).proc.api('POST', '/api/v1/streams', { name: OUT, partitions: PARTITIONS });
    await c.waitCatalog({ streams: [IN, OUT] });
    await c.waitSettled({ min: { partition: 2 * PARTITIONS } });
    const kafka = new Kafka({
      clientId: 'eos-cluster',
      brokers: bootstrap.split(','),
      logLevel: logLevel.NOTHING,
      retry: { retries: 40, initialRetryTime: 100, maxRetryTime: 1000 },
    });
    const filler = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await filler.connect();
    for (let i = 0; i < opts.records; i += 500) {
      const ns = Array.from({ length: Math.min(500, opts.records - i) }, (_, j) => i + j);
      await filler.send({ topic: IN, acks: -1, messages: ns.map((n) => ({ key: `k${n % 17}`, value: String(n) })) });
    }
    await filler.disconnect();
    log(`eos-cluster: ${opts.records} records in ${IN} (${PARTITIONS} partitions), pipeline starting`);

    const p: PipelineStats = { committedTxns: 0, lastCommitAt: 0, restarts: 0, retriedCommits: 0, errors: {} };
    pipeline = new Pipeline(bootstrap, logFile, p);
    let pipelineKills = 0;

    /** Which broker holds each role now (owner rows of the live cluster). */
    const rolesNow = async (): Promise<Map<number, string[]>> => {
      const held = new Map<number, string[]>();
      const add = (b: number | null | undefined, r: string) => {
        if (b === null || b === undefined) return;
        held.set(b, [...(held.get(b) ?? []), r]);
      };
      const { owners } = await c.owners();
      for (const o of owners) {
        if (!o.alive) continue;
        if (o.kind === 'txn' && o.name === TXID) add(o.owner, 'coordinator');
        if (o.kind === 'group' && o.name === GROUP) add(o.owner, 'group');
        if (o.kind === 'partition' && o.name.startsWith(`${IN}/`)) add(o.owner, `in/${o.name.slice(IN.length + 1)}`);
        if (o.kind === 'partition' && o.name.startsWith(`${OUT}/`)) add(o.owner, `out/${o.name.slice(OUT.length + 1)}`);
      }
      return held;
    };

    const kills: EosKill[] = [];
    for (let k = 0; k < opts.kills; k++) {
      const before = p.committedTxns;
      const wait = Date.now() + 60_000;
      while (p.committedTxns === before && Date.now() < wait) await sleep(20);
      if (p.committedTxns === before) log(`eos-cluster: no commit in 60 s before kill ${k + 1}`);
      await sleep(100 + Math.floor(rnd() * 1500));
      const roles = opts.roles ?? ROLES;
      const role = roles[k % roles.length]!;
      const held = await rolesNow();
      const prefix = role === 'coordinator' ? 'coordinator' : role === 'input-leader' ? 'in/' : 'out/';
      // A partition leader that does not coordinate the transactional id when there is one: the roles apart.
      const leading = [...held].filter(([, rs]) => rs.some((r) => r.startsWith(prefix)));
      const apart = leading.filter(([, rs]) => role === 'coordinator' || !rs.includes('coordinator'));
      const candidates = (apart.length > 0 ? apart : leading).map(([b]) => b);
      const victim = candidates.length > 0 ? candidates[Math.floor(rnd() * candidates.length)]! : c.running[Math.floor(rnd() * c.running.length)]!.id;
      const quick = k % 2 === 1;
      const killClient = (k + 1) % (opts.killPipelineEvery ?? 3) === 0;
      // The pipeline is killed with a transaction open and its records in the output's partitions: the next
      // incarnation aborts it, at partition leaders that may have changed since (the victim led some).
      if (killClient && !(await pipeline.hold())) log(`eos-cluster: the pipeline did not hold a transaction open before kill ${k + 1}`);
      await Promise.all([c.kill(victim), killClient ? pipeline.kill() : undefined]);
      const killedAt = Date.now();
      // A new pipeline process at once: its init_transactions meets the cluster while it moves the victim's work.
      if (killClient) {
        pipelineKills++;
        pipeline = new Pipeline(bootstrap, logFile, p);
      }
      // The cluster keeps the logs of the brokers it runs now: a killed incarnation's go to the log directory here.
      if (logDir) writeFileSync(join(logDir, `broker-${victim}-${c.broker(victim).pid}.log`), `${c.logs(victim)}\n${c.broker(victim).proc.errorOutput}`);
      const kill: EosKill = { role, broker: victim, held: held.get(victim) ?? [], quick, pipeline: killClient, afterTxns: p.committedTxns, pauseMs: -1 };
      void (async () => {
        while (p.lastCommitAt < killedAt && pipeline.proc.exitCode === null) await sleep(20);
        if (p.lastCommitAt >= killedAt) kill.pauseMs = p.lastCommitAt - killedAt;
      })();
      kills.push(kill);
      log(
        `eos-cluster: kill ${k + 1}/${opts.kills}: broker ${victim} (${role}; held ${kill.held.join(' ')})${killClient ? ' and the pipeline' : ''} after ${kill.afterTxns} transactions${quick ? ', restarted at once' : ''}`,
      );
      if (!quick) await c.waitBrokerDead(victim, 30_000);
      // A broker id is refused while the cluster still sees its lease alive: "at once" is as soon as it is accepted.
      for (let tries = 0; ; tries++) {
        try {
          await c.startBroker({ id: victim, args: ['--kafka-port', String(kafkaPort.get(victim))] });
          break;
        } catch (err) {
          if (!/is held by a live broker/.test((err as Error).message) || tries > 100) throw err;
          await sleep(100);
        }
      }
      await c.waitBrokerAlive(victim, 30_000);
      await c.waitSettled({ timeoutMs: 60_000 }).catch((err: Error) => log(`eos-cluster: ${err.message}`));
    }

    // Done when the group's committed offsets reach the end of every input partition.
    const admin = kafka.admin();
    await admin.connect();
    let offsets: EosClusterSummary['offsets'] = [];
    const deadline = Date.now() + 180_000;
    for (;;) {
      try {
        const ends = await admin.fetchTopicOffsets(IN);
        const [got] = await admin.fetchOffsets({ groupId: GROUP, topics: [IN] });
        offsets = ends.map((e) => ({
          partition: e.partition,
          end: e.high,
          committed: got!.partitions.find((x) => x.partition === e.partition)?.offset ?? '?',
        }));
        if (offsets.every((o) => o.committed === o.end)) break;
      } catch {
        // a broker starting: ask again
      }
      if (Date.now() > deadline) break;
      await sleep(500);
    }
    const code = await pipeline.stop();
    if (code !== 0) log(`eos-cluster: the pipeline exited with ${code}`);
    // The offsets again, after the pipeline's last transaction.
    const ends = await admin.fetchTopicOffsets(IN);
    const [got] = await admin.fetchOffsets({ groupId: GROUP, topics: [IN] });
    offsets = ends
      .map((e) => ({ partition: e.partition, end: e.high, committed: got!.partitions.find((x) => x.partition === e.partition)?.offset ?? '?' }))
      .sort((a, b) => a.partition - b.partition);
    await admin.disconnect();
    const offsetsOk = offsets.every((o) => o.committed === o.end) && offsets.reduce((s, o) => s + Number(o.end), 0) === opts.records;

    const committed = await kcatConsume(bootstrap, OUT, ['-X', 'isolation.level=read_committed']);
    const uncommitted = await kcatConsume(bootstrap, OUT, ['-X', 'isolation.level=read_uncommitted']);
    const counts = new Map<string, number>();
    for (const m of committed) counts.set(String(m.payload), (counts.get(String(m.payload)) ?? 0) + 1);
    let found = 0;
    let lost = 0;
    let duplicates = 0;
    for (let n = 0; n < opts.records; n++) {
      const seen = counts.get(`out-${n}`) ?? 0;
      if (seen > 0) found++;
      else lost++;
      if (seen > 1) duplicates += seen - 1;
    }
    const extra = committed.length - found - duplicates;
    if (lost > 0 || duplicates > 0) {
      // Where the missing copies are: in the log but hidden from read_committed (an abort's range), or not written.
      const hidden = new Map(uncommitted.map((m) => [String(m.payload), m]));
      const sample = [...Array(opts.records).keys()].filter((n) => (counts.get(`out-${n}`) ?? 0) !== 1).slice(0, 10);
      for (const n of sample) {
        const m = hidden.get(`out-${n}`);
        log(
          `eos-cluster: out-${n} seen ${counts.get(`out-${n}`) ?? 0} times; read_uncommitted: ${m ? `partition ${m.partition} offset ${m.offset}` : 'absent'}`,
        );
      }
    }
    return {
      ok: lost === 0 && duplicates === 0 && extra === 0 && offsetsOk,
      records: opts.records,
      kills,
      pipelineKills,
      restarts: p.restarts,
      retriedCommits: p.retriedCommits,
      committedTxns: p.committedTxns,
      found,
      lost,
      duplicates,
      extra,
      abortedCopies: uncommitted.length - committed.length,
      offsets,
      offsetsOk,
      errors: p.errors,
      seconds: (Date.now() - started) / 1000,
      logDir,
    };
  } finally {
    if (pipeline?.proc.exitCode === null) pipeline.proc.kill('SIGKILL');
    await c.close();
    logFile.end();
    rmSync(scratch, { recursive: true, force: true });
  }
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

export function formatEosClusterSummary(s: EosClusterSummary): string {
  const byRole = ROLES.map((r) => `${s.kills.filter((k) => k.role === r).length} ${r}`).join(', ');
  const pauses = s.kills.map((k) => k.pauseMs).filter((ms) => ms >= 0);
  const errors = Object.entries(s.errors)
    .map(([e, n]) => `${e} ×${n}`)
    .join(', ');
  return (
    `eos pipeline on a 3-broker cluster (librdkafka): ${s.records} input records, ${s.kills.length} kill -9 (${byRole}), ` +
    `${s.pipelineKills} of them also of the pipeline, ${s.restarts} pipeline restarts, ${s.retriedCommits} retried commits, ${s.committedTxns} committed transactions, ${s.seconds.toFixed(1)} s\n` +
    (pauses.length > 0
      ? `  commits paused after a kill: median ${(median(pauses) / 1000).toFixed(1)} s, max ${(Math.max(...pauses) / 1000).toFixed(1)} s\n`
      : '') +
    (errors ? `  errors seen by the pipeline: ${errors}\n` : '') +
    `  group offsets: ${s.offsets.map((o) => `p${o.partition} ${o.committed}/${o.end}`).join(', ')} -> ${s.offsetsOk ? 'at the end' : 'WRONG'}\n` +
    `  read_committed output: found ${s.found}, lost ${s.lost}, duplicates ${s.duplicates}, extra ${s.extra} ` +
    `(read_uncommitted also sees ${s.abortedCopies} aborted copies) -> ${s.ok ? 'OK' : 'FAIL'}`
  );
}
