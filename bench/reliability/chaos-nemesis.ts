/**
 * The chaos runner's nemesis (bench/reliability/chaos.ts): a seeded schedule of faults injected into a three-broker
 * cluster, in turn one of each kind, the victim broker and the durations drawn from a small PRNG (mulberry32) of the
 * seed, so that a seed reproduces the schedule (what happens between faults depends on timing, not on the seed).
 *
 * Every broker reaches PostgreSQL, S3 and (without `--netns`) its peers through fault-injecting TCP proxies (test/helpers/fault-proxy.ts):
 * one to PostgreSQL and one to s3rver per broker, and one in front of each broker's cluster port, which that broker
 * advertises as its cluster endpoint (so its peers' connections to it go through it). Each broker keeps its client
 * ports (Kafka, MQTT, AMQP, NATS) and cluster port across restarts, so the clients' broker lists stay valid.
 *
 * Fault kinds:
 * - kill: kill -9 of a broker, restarted on the same id either as soon as the cluster frees the id or after its lease
 *   expired and its work moved;
 * - pause: SIGSTOP of a broker past its lease (lease + 0.5..3 s), then SIGCONT (it finds itself fenced, drops its work
 *   and registers again);
 * - term: a graceful restart (SIGTERM: hands its work over, then a new process on the same id);
 * - s3-stall: every broker's S3 connections stalled for 2..8 s (nothing moves, then everything queued flows on);
 * - s3-cut: every broker's S3 connections reset and new ones refused for 0.5..3 s;
 * - pg-partition: one broker cut off from PostgreSQL (its connections stalled) for lease + 1..4 s: the others take
 *   its work over, its queued writes arrive late, under an old epoch;
 * - peer-partition: one broker unreachable by its peers (the proxy in front of its cluster port stalled) for 2..6 s;
 * - torn-write: a broker killed -9 in the middle of its writes: its PostgreSQL and S3 connections pass on half of
 *   the next chunk each sends, then hold (FaultProxy `tear`) for 0.2..1 s, it is killed, the torn requests end cut
 *   short; and, as a store without atomic PUTs would keep after such a crash, a torn segment object (the first
 *   half of a committed one) is put where the dead broker's next segment of one of its partitions would go (the
 *   partition's flushed offset, its epoch). Restarted like kill. Checked: the next owner deletes the torn object
 *   (it is not in the metastore; chaos-storage.ts), and nothing acknowledged is lost (the read-back);
 * - bit-flip: a bit flipped in a committed segment object of the Kafka stream (in s3rver's file, behind every
 *   broker's back), the partition read there with kcat: the broker must detect it (flowmq_log_corrupt_batches_total
 *   rises) and serve no record of the corrupt batch (kcat gets CORRUPT_MESSAGE), then the object is restored (a
 *   repair from a backup) and the read-back must find everything. The segment is the only copy of its records (the
 *   WAL is trimmed once it is committed), so the flip is undone rather than left: corruption of the only copy is
 *   unrecoverable by design (docs/reliability.md, "Corruption"). The runner's brokers keep no read caches
 *   (`--read-cache-bytes 0 --object-cache-bytes 0`) so that the read reaches the object;
 * - pg-failover (only with a highly available PostgreSQL, `npm run chaos -- --pg-ha`): the PostgreSQL primary
 *   killed -9 (its node's postmaster, backends and pg_autoctl), pg_auto_failover promotes the synchronous standby,
 *   the brokers follow through their multi-host URL; the lost node is then started again as the new standby;
 * - pg-slow, s3-slow: every broker's PostgreSQL (20..150 ms) or S3 (100..1500 ms) connections slowed, each chunk held
 *   that long each way (FaultProxy `delay`), for 3..8 s;
 * - join-leave: a fourth broker (the spare id) starts, the cluster settles with it owning its share of the partitions
 *   and queues, and 3..8 s later it leaves with a SIGTERM (its work handed back): scaling out and in under traffic.
 *
 * With `--netns` (test/helpers/netns.ts, root and nftables) each broker runs in its own network namespace, joined to
 * the runner's by a veth pair and a bridge: clients and peers reach it at its own address, PostgreSQL and S3 through
 * its proxies on the bridge's address. No proxy stands in front of the cluster ports then (peer-partition is out);
 * the network's own kinds are:
 * - net-isolate: the broker's link down for lease + 1..4 s: clients, peers, PostgreSQL and S3 all cut off, its sockets
 *   open and silent (it finds itself fenced when the link is back);
 * - net-peers: packets between the broker and its peers dropped (both ways, silently) for 2..6 s;
 * - net-pg: packets between the broker and PostgreSQL dropped for lease + 1..4 s: TCP retransmits what it sent late;
 * - net-s3: packets between the broker and S3 dropped for 2..8 s;
 * - net-loss: 10..40% of every packet the broker sends or receives lost for 4..10 s.
 */
import { readFileSync } from 'node:fs';
import { FaultProxy } from '../../test/helpers/fault-proxy.js';
import { CHAOS_KAFKA_TOPIC } from './chaos-loads.js';
import { committedSegments, corruptBatches, firstBatch, flipByte, kcatRead, objectExists, objectFile, partitionRow, putObject } from './chaos-storage.js';
import { writeFileSync } from 'node:fs';
import { sleep } from '../../test/e2e/harness.js';
import type { TestCluster } from '../../test/helpers/cluster.js';
import type { NetLab } from '../../test/helpers/netns.js';
import { prng } from '../../test/helpers/prng.js';

export const FAULT_KINDS = [
  'kill',
  'pause',
  'term',
  's3-stall',
  's3-cut',
  's3-slow',
  'pg-partition',
  'pg-slow',
  'peer-partition',
  'torn-write',
  'bit-flip',
  'pg-failover',
  'net-isolate',
  'net-peers',
  'net-pg',
  'net-s3',
  'net-loss',
  'join-leave',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];
/** The kinds that need each broker in its own network namespace (`--netns`). */
export const NETNS_KINDS: readonly FaultKind[] = ['net-isolate', 'net-peers', 'net-pg', 'net-s3', 'net-loss'];
/** The kinds `npm run chaos` cycles through by default: every one but pg-failover, which needs `--pg-ha`, and the network namespaces' kinds. */
export const DEFAULT_FAULT_KINDS: FaultKind[] = FAULT_KINDS.filter((k) => k !== 'pg-failover' && !NETNS_KINDS.includes(k));

/**
 * The kinds of a run: with `netns`, the network namespaces' kinds too, and not peer-partition (its proxy in front of
 * each broker's cluster port is replaced by the real link between namespaces); with `pgHa`, pg-failover too.
 */
export function defaultFaultKinds(o: { netns?: boolean; pgHa?: boolean }): FaultKind[] {
  return FAULT_KINDS.filter((k) => {
    if (k === 'pg-failover') return o.pgHa === true;
    if (NETNS_KINDS.includes(k)) return o.netns === true;
    if (k === 'peer-partition') return o.netns !== true;
    return true;
  });
}

export interface FaultSpec {
  kind: FaultKind;
  /** The victim broker (every broker for the S3 faults). */
  broker: number | null;
  /** How long the fault lasts (pause, stall, cut, partition), ms. */
  durationMs: number;
  /** kill: restart as soon as the id is free (true) or after the lease expired (false). */
  quick: boolean;
  /** Quiet time after the cluster recovered, before the next fault, ms. */
  gapMs: number;
  /** torn-write, bit-flip: which partition or segment, a draw in [0, 1). */
  pick: number;
  /** pg-slow, s3-slow: how long each chunk is held, ms. */
  delayMs?: number;
  /** net-loss: the share of packets dropped, %. */
  lossPercent?: number;
}

/** A fault as it happened. */
export interface FaultEvent extends FaultSpec {
  index: number;
  /** When it was injected, ms since the run started. */
  at: number;
  /** From injection until the cluster had settled again, ms (-1: did not settle in time). */
  recoveredMs: number;
  note: string;
}

/** The faults of a seed, in order: the same seed gives the same list. */
export function faultSchedule(
  seed: number,
  leaseMs: number,
  brokers: number[],
  gapMs: [number, number] = [2000, 6000],
  kinds: readonly FaultKind[] = DEFAULT_FAULT_KINDS,
): () => FaultSpec {
  const rnd = prng(seed);
  const between = (lo: number, hi: number) => Math.round(lo + rnd() * (hi - lo));
  let i = 0;
  return () => {
    const kind = kinds[i++ % kinds.length]!;
    const victim = brokers[Math.floor(rnd() * brokers.length)]!;
    const spec: FaultSpec = { kind, broker: victim, durationMs: 0, quick: false, gapMs: between(gapMs[0], gapMs[1]), pick: 0 };
    if (kind === 'kill') spec.quick = rnd() < 0.5;
    else if (kind === 'torn-write') {
      spec.quick = rnd() < 0.5;
      spec.durationMs = between(200, 1000);
      spec.pick = rnd();
    } else if (kind === 'bit-flip') spec.pick = rnd();
    else if (kind === 'pause') spec.durationMs = leaseMs + between(500, 3000);
    else if (kind === 's3-stall') spec.durationMs = between(2000, 8000);
    else if (kind === 's3-cut') spec.durationMs = between(500, 3000);
    else if (kind === 'pg-partition') spec.durationMs = leaseMs + between(1000, 4000);
    else if (kind === 'peer-partition' || kind === 'net-peers') spec.durationMs = between(2000, 6000);
    else if (kind === 'pg-slow') {
      spec.durationMs = between(3000, 8000);
      spec.delayMs = between(20, 150);
    } else if (kind === 's3-slow') {
      spec.durationMs = between(3000, 8000);
      spec.delayMs = between(100, 1500);
    } else if (kind === 'net-isolate' || kind === 'net-pg') spec.durationMs = leaseMs + between(1000, 4000);
    else if (kind === 'net-s3') spec.durationMs = between(2000, 8000);
    else if (kind === 'join-leave') spec.durationMs = between(3000, 8000);
    else if (kind === 'net-loss') {
      spec.durationMs = between(4000, 10_000);
      spec.lossPercent = between(10, 40);
    }
    // Faults of every broker at once, or of a broker of their own (join-leave's spare): no victim.
    if (['s3-stall', 's3-cut', 's3-slow', 'pg-slow', 'bit-flip', 'pg-failover', 'join-leave'].includes(kind)) spec.broker = null;
    return spec;
  };
}

export function describeFault(f: FaultSpec): string {
  const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
  switch (f.kind) {
    case 'kill':
      return `kill -9 broker ${f.broker}, restart ${f.quick ? 'as soon as its id is free' : 'after its lease expired'}`;
    case 'pause':
      return `SIGSTOP broker ${f.broker} for ${s(f.durationMs)}, then SIGCONT`;
    case 'term':
      return `graceful restart (SIGTERM) of broker ${f.broker}`;
    case 's3-stall':
      return `S3 stalled for every broker for ${s(f.durationMs)}`;
    case 's3-cut':
      return `S3 connections cut and refused for ${s(f.durationMs)}`;
    case 'pg-partition':
      return `broker ${f.broker} cut off from PostgreSQL for ${s(f.durationMs)}`;
    case 'peer-partition':
      return `broker ${f.broker} unreachable by its peers for ${s(f.durationMs)}`;
    case 'torn-write':
      return `broker ${f.broker}'s PostgreSQL and S3 writes torn for ${s(f.durationMs)}, kill -9, a torn segment object left, restart ${f.quick ? 'as soon as its id is free' : 'after its lease expired'}`;
    case 'bit-flip':
      return 'a bit flipped in a committed segment object, read there, restored';
    case 'pg-failover':
      return 'PostgreSQL primary killed -9, the standby promoted';
    case 'pg-slow':
      return `PostgreSQL ${f.delayMs} ms slower each way for every broker for ${s(f.durationMs)}`;
    case 's3-slow':
      return `S3 ${f.delayMs} ms slower each way for every broker for ${s(f.durationMs)}`;
    case 'net-isolate':
      return `broker ${f.broker}'s link down for ${s(f.durationMs)} (clients, peers, PostgreSQL and S3 cut off)`;
    case 'net-peers':
      return `packets between broker ${f.broker} and its peers dropped for ${s(f.durationMs)}`;
    case 'net-pg':
      return `packets between broker ${f.broker} and PostgreSQL dropped for ${s(f.durationMs)}`;
    case 'net-s3':
      return `packets between broker ${f.broker} and S3 dropped for ${s(f.durationMs)}`;
    case 'net-loss':
      return `${f.lossPercent}% of broker ${f.broker}'s packets lost for ${s(f.durationMs)}`;
    case 'join-leave':
      return `a fourth broker joins, takes its share of the work, and leaves (SIGTERM) ${s(f.durationMs)} later`;
  }
}

/** Ports a broker keeps across restarts. */
export interface BrokerPorts {
  /** The admin API's (fixed with --netns: forwarded from the broker's address to its namespace's loopback). */
  http: number;
  kafka: number;
  mqtt: number;
  amqp: number;
  nats: number;
  cluster: number;
}

/** The cluster with its proxies, and what the nemesis does to it. */
export class ChaosCluster {
  /** Per broker, one proxy per PostgreSQL server (two data nodes with `--pg-ha`). */
  readonly pgProxy = new Map<number, FaultProxy[]>();
  readonly s3Proxy = new Map<number, FaultProxy>();
  readonly peerProxy = new Map<number, FaultProxy>();
  /** Called with a broker's id before a new process replaces it (to keep the old one's log). */
  beforeRestart: (id: number) => void = () => undefined;
  /** What a fault's own check found wrong (torn object not collected, corruption not detected or served): fails the run. */
  readonly checkFailures: string[] = [];
  /** A check to run once the cluster has settled after the fault (inject sets it, afterRecovery runs it). */
  private pendingCheck: (() => Promise<string>) | null = null;

  constructor(
    readonly c: TestCluster,
    readonly ports: Map<number, BrokerPorts>,
    private readonly log: (line: string) => void,
    /** Each broker in its own network namespace (`--netns`), or null: every broker on loopback. */
    readonly net: NetLab | null = null,
    /** The id join-leave starts and stops (it has ports, proxies and a namespace, and runs only in that fault). */
    readonly spare: number | null = null,
  ) {}

  /** The brokers that run throughout (every one but the spare). */
  private get members(): number[] {
    return [...this.ports.keys()].filter((id) => id !== this.spare);
  }

  /** Where clients reach broker `id`. */
  host(id: number): string {
    return this.net ? this.net.address(id) : '127.0.0.1';
  }

  /**
   * Proxies for broker `id` (before it starts the first time); with a network, they listen on the bridge's address,
   * and the brokers reach each other directly, across their links.
   */
  async addProxies(id: number): Promise<void> {
    const p = this.ports.get(id)!;
    const pgPorts = this.c.ha ? this.c.ha.ports : [this.c.pg.port];
    const at = this.net?.hostAddress ?? '127.0.0.1';
    this.pgProxy.set(id, await Promise.all(pgPorts.map((port) => FaultProxy.start({ port }, at))));
    this.s3Proxy.set(id, await FaultProxy.start({ port: this.c.s3.port }, at));
    if (!this.net) this.peerProxy.set(id, await FaultProxy.start({ port: p.cluster }));
    else this.net.forward(id, p.http);
  }

  /** Where broker `id` reaches PostgreSQL and S3 (its proxies). */
  backends(id: number): { dbUrl: string; s3Endpoint: string } | undefined {
    const pg = this.pgProxy.get(id);
    const s3 = this.s3Proxy.get(id);
    if (!pg || !s3) return undefined;
    // The database's URL with every server's proxy in place of the server (a multi-host URL with `--pg-ha`).
    const m = /^(postgres(?:ql)?:\/\/[^@/]*@)([^/]*)(.*)$/.exec(this.c.dbUrl)!;
    return { dbUrl: `${m[1]}${pg.map((p) => p.address).join(',')}${m[3]}`, s3Endpoint: `http://${s3.address}` };
  }

  /** The fixed ports and advertised cluster endpoint of broker `id`. */
  brokerArgs(id: number): string[] {
    const p = this.ports.get(id)!;
    const peer = this.peerProxy.get(id);
    return [
      // The admin API at the broker's address (forwarded to its loopback), whose Host header it must accept.
      ...(this.net ? ['--http-port', String(p.http), '--http-allowed-hosts', this.net.address(id)] : []),
      '--kafka-port',
      String(p.kafka),
      '--mqtt-port',
      String(p.mqtt),
      '--amqp-port',
      String(p.amqp),
      '--nats-port',
      String(p.nats),
      '--cluster-port',
      String(p.cluster),
      '--advertised-listeners',
      peer ? `cluster=${peer.address}` : `cluster=${this.host(id)}:${p.cluster}`,
      // Segments sealed every 15 s at the latest (the default is 60 s): more seals under the faults, and committed
      // segments for torn-write and bit-flip early in a run.
      '--segment-ms',
      '15s',
      // No read caches: a read of a sealed batch reaches its segment object (bit-flip's check needs that).
      '--read-cache-bytes',
      '0',
      '--object-cache-bytes',
      '0',
      // The persistent subscriber is offline for seconds after a fault that takes its broker (a pause: the lease and
      // up to 3 s more) while ~300 messages a second are published for it: the default bound of its offline queue
      // (1,000, oldest dropped first, as Mosquitto's max_queued_messages) would drop some; keep its queue whole.
      '--mqtt-max-queued-messages',
      '1000000',
    ];
  }

  /**
   * Starts broker `id` on its ports. A kill -9's id stays held until its lease expires, and a start can fail on a
   * loaded machine: retried until `timeoutMs`.
   */
  async startBroker(id: number, timeoutMs = 90_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      try {
        // 60 s to listen: a loaded machine (2 cores, other work) took more than the harness's 20 s.
        await this.c.startBroker({
          id,
          args: this.brokerArgs(id),
          proxy: false,
          startTimeoutMs: 60_000,
          ...(this.net ? { host: this.net.address(id), wrap: this.net.wrap(id) } : {}),
        });
        return;
      } catch (err) {
        const msg = (err as Error).message;
        if (Date.now() > deadline) throw err;
        if (!/is held by a live broker/.test(msg)) this.log(`chaos: broker ${id} did not start (${msg.slice(0, 200)}); again`);
        await sleep(200);
      }
    }
  }

  /** Injects `f` and returns once it is over (the broker back, the proxies passing again). */
  async inject(f: FaultSpec): Promise<string> {
    const id = f.broker ?? 0;
    switch (f.kind) {
      case 'kill': {
        await this.c.kill(id);
        this.beforeRestart(id);
        if (!f.quick) await this.c.waitBrokerDead(id, 30_000);
        await this.startBroker(id);
        return '';
      }
      case 'pause': {
        this.c.pause(id);
        await sleep(f.durationMs);
        this.c.resume(id);
        return '';
      }
      case 'term': {
        const r = await this.c.stop(id);
        this.beforeRestart(id);
        await this.startBroker(id);
        return r.code === 0 ? '' : `exited with ${r.code ?? r.signal}`;
      }
      case 's3-stall':
      case 's3-cut': {
        const mode = f.kind === 's3-stall' ? 'stall' : 'cut';
        for (const p of this.s3Proxy.values()) p.set(mode);
        await sleep(f.durationMs);
        for (const p of this.s3Proxy.values()) p.set('pass');
        return '';
      }
      case 's3-slow':
      case 'pg-slow': {
        const ps = f.kind === 's3-slow' ? [...this.s3Proxy.values()] : [...this.pgProxy.values()].flat();
        for (const p of ps) p.set('delay', f.delayMs);
        await sleep(f.durationMs);
        for (const p of ps) p.set('pass');
        return '';
      }
      case 'net-isolate':
      case 'net-peers':
      case 'net-pg':
      case 'net-s3':
      case 'net-loss':
        return this.netFault(f, id);
      case 'pg-partition':
      case 'peer-partition': {
        const ps = f.kind === 'pg-partition' ? this.pgProxy.get(id)! : [this.peerProxy.get(id)!];
        for (const p of ps) p.set('stall');
        await sleep(f.durationMs);
        for (const p of ps) p.set('pass');
        return '';
      }
      case 'torn-write':
        return this.tornWrite(f, id);
      case 'join-leave':
        return this.joinLeave(f);
      case 'bit-flip':
        return this.bitFlip(f);
      case 'pg-failover':
        return this.pgFailover();
    }
  }

  /** The network namespaces' kinds (see the module comment). */
  private async netFault(f: FaultSpec, id: number): Promise<string> {
    const net = this.net;
    if (!net) throw new Error(`${f.kind} needs each broker in its own network namespace (npm run chaos -- --netns)`);
    const others = this.members.filter((b) => b !== id);
    if (f.kind === 'net-isolate') net.isolate(id);
    else if (f.kind === 'net-peers') net.block(id, { brokers: others });
    else if (f.kind === 'net-pg') net.block(id, { hostPorts: this.pgProxy.get(id)!.map((p) => p.port) });
    else if (f.kind === 'net-s3') net.block(id, { hostPorts: [this.s3Proxy.get(id)!.port] });
    else net.lose(id, f.lossPercent ?? 20);
    try {
      await sleep(f.durationMs);
    } finally {
      if (f.kind === 'net-isolate') net.isolate(id, false);
      else net.heal(id);
    }
    return '';
  }

  /** The check the last fault left for after the cluster settled ('' when none). */
  async afterRecovery(): Promise<string> {
    const check = this.pendingCheck;
    this.pendingCheck = null;
    return check ? check() : '';
  }

  private fail(what: string): string {
    this.checkFailures.push(what);
    return `CHECK FAILED: ${what}`;
  }

  private get bootstrap(): string[] {
    return this.members.map((id) => `${this.host(id)}:${this.ports.get(id)!.kafka}`);
  }

  /** torn-write (see the module comment). */
  private async tornWrite(f: FaultSpec, id: number): Promise<string> {
    // The Kafka stream's partitions the victim owns that have a committed segment (the torn object copies one).
    const owned = (await this.c.owners('partition')).owners
      .filter((o) => o.owner === id && o.alive && o.name.startsWith(`${CHAOS_KAFKA_TOPIC}/`))
      .map((o) => Number(o.name.slice(CHAOS_KAFKA_TOPIC.length + 1)));
    const segs = await committedSegments(this.c, CHAOS_KAFKA_TOPIC);
    const candidates = owned.filter((p) => segs.some((s) => s.partition === p));
    const partition = candidates.length > 0 ? candidates[Math.floor(f.pick * candidates.length)]! : null;
    const before = partition === null ? null : await partitionRow(this.c, CHAOS_KAFKA_TOPIC, partition);
    const proxies = [...this.pgProxy.get(id)!, this.s3Proxy.get(id)!];
    const torn0 = proxies.reduce((n, p) => n + p.tornWrites, 0);
    for (const p of proxies) p.set('tear');
    await sleep(f.durationMs);
    await this.c.kill(id);
    for (const p of proxies) p.set('pass');
    const torn = proxies.reduce((n, p) => n + p.tornWrites, 0) - torn0;
    this.beforeRestart(id);
    let note = `${torn} writes torn`;
    if (partition === null || before === null) note += '; no partition of the victim with a committed segment: no torn object';
    else {
      const last = segs.filter((s) => s.partition === partition).at(-1)!;
      const prefix = last.objectKey.slice(0, last.objectKey.lastIndexOf('/'));
      const key = `${prefix}/${String(before.flushed).padStart(20, '0')}-${before.epoch}.seg`;
      const now = await partitionRow(this.c, CHAOS_KAFKA_TOPIC, partition);
      if (now?.epoch !== before.epoch || now.flushed !== before.flushed || objectExists(this.c, key)) {
        note += `; partition ${partition} moved or sealed before the torn object could be put: none`;
      } else {
        const whole = readFileSync(objectFile(this.c, last.objectKey));
        await putObject(this.c, key, whole.subarray(0, whole.length >> 1));
        const after = await partitionRow(this.c, CHAOS_KAFKA_TOPIC, partition);
        if (after?.epoch !== before.epoch) note += `; partition ${partition} taken over while the torn object was put: not checked`;
        else {
          note += `; torn object ${key.slice(key.indexOf(`/${partition}/`) + 1)} (${whole.length >> 1} of ${whole.length} bytes)`;
          this.pendingCheck = async () => {
            // The next owner opens the partition with a later epoch and sweeps what the metastore does not list.
            const deadline = Date.now() + 20_000;
            while (objectExists(this.c, key) && Date.now() < deadline) await sleep(200);
            return objectExists(this.c, key)
              ? this.fail(`torn object ${key} still there 20 s after the cluster settled`)
              : 'torn object deleted by the next owner';
          };
        }
      }
    }
    if (!f.quick) await this.c.waitBrokerDead(id, 30_000);
    await this.startBroker(id);
    return note;
  }

  /** join-leave (see the module comment). */
  private async joinLeave(f: FaultSpec): Promise<string> {
    const id = this.spare;
    if (id === null) throw new Error('join-leave needs a spare broker id');
    await this.startBroker(id);
    let took = 'its share not settled within 60 s';
    try {
      await this.c.waitBrokerAlive(id, 60_000);
      const rows = await this.c.waitSettled({ kinds: ['partition', 'queue'], timeoutMs: 60_000 });
      took = `took ${rows.filter((r) => r.owner === id).length} of ${rows.length} partitions and queues`;
      await sleep(f.durationMs);
    } catch {
      // noted; it leaves all the same
    }
    const r = await this.c.stop(id);
    this.beforeRestart(id);
    this.c.forget(id);
    return `broker ${id} joined, ${took}, left${r.code === 0 ? '' : ` (exited with ${r.code ?? r.signal})`}`;
  }

  /** pg-failover (see the module comment). */
  private async pgFailover(): Promise<string> {
    const ha = this.c.ha;
    if (!ha) throw new Error('pg-failover needs a highly available PostgreSQL (npm run chaos -- --pg-ha)');
    const was = await ha.killPrimary();
    const f = await ha.waitForFailover(was, 60_000);
    // The lost node comes back as the standby, so that the next pg-failover has one to promote.
    const t0 = Date.now();
    await ha.restartNode(was, 120_000);
    return `node${was + 1} (primary) lost, node${f.index + 1} read-write ${(f.ms / 1000).toFixed(1)} s later; node${was + 1} standby again after ${((Date.now() - t0) / 1000).toFixed(1)} s`;
  }

  /** bit-flip (see the module comment). */
  private async bitFlip(f: FaultSpec): Promise<string> {
    const segs = await committedSegments(this.c, CHAOS_KAFKA_TOPIC);
    if (segs.length === 0) return 'no committed segment yet: nothing flipped';
    const seg = segs[Math.floor(f.pick * segs.length)]!;
    const file = objectFile(this.c, seg.objectKey);
    const original = readFileSync(file);
    const b = firstBatch(original, seg.baseOffset);
    const counted = await corruptBatches(this.c);
    flipByte(file, b.lastByte);
    try {
      const n = b.last - b.first + 1;
      const r = await kcatRead(this.bootstrap, CHAOS_KAFKA_TOPIC, seg.partition, b.first, n, 5000);
      const detected = (await corruptBatches(this.c)) - counted;
      const served = r.records.filter((x) => x.offset >= b.first && x.offset <= b.last);
      const where = `partition ${seg.partition}, segment at ${seg.baseOffset}, batch ${b.first}..${b.last}`;
      if (served.length > 0)
        return this.fail(`${where}: ${served.length} records of the corrupt batch served (e.g. ${served[0]!.offset}: ${served[0]!.payload})`);
      if (detected <= 0) return this.fail(`${where}: flowmq_log_corrupt_batches_total did not rise`);
      const told = /corrupt|crc/i.test(r.stderr) ? ', kcat told CORRUPT_MESSAGE' : '';
      return `${where}: detected (corrupt batches +${detected}${told}), none of its ${n} records served; restored`;
    } finally {
      writeFileSync(file, original);
    }
  }

  /** Until every broker is alive and ownership settled (placement), at most `timeoutMs`; false if it did not. */
  async recover(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    try {
      // A broker whose restart failed is started again.
      for (const b of this.c.brokers) if (b.state === 'dead') await this.startBroker(b.id, Math.max(1000, deadline - Date.now()));
      for (const b of this.c.brokers) await this.c.waitBrokerAlive(b.id, Math.max(1000, deadline - Date.now()));
      await this.c.waitSettled({ kinds: ['partition', 'queue'], timeoutMs: Math.max(1000, deadline - Date.now()) });
      return true;
    } catch (err) {
      this.log(`chaos: not settled: ${(err as Error).message.slice(0, 300)}`);
      return false;
    }
  }

  async close(): Promise<void> {
    const all = [...[...this.pgProxy.values()].flat(), ...this.s3Proxy.values(), ...this.peerProxy.values()];
    for (const p of all) p.set('pass');
    try {
      await this.c.close();
      for (const p of all) await p.close();
    } finally {
      this.net?.close();
    }
  }
}
