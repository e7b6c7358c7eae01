/**
 * The chaos runner's nemesis (bench/reliability/chaos.ts): a seeded schedule of faults injected into a three-broker
 * cluster, in turn one of each kind, the victim broker and the durations drawn from a small PRNG (mulberry32) of the
 * seed, so that a seed reproduces the schedule (what happens between faults depends on timing, not on the seed).
 *
 * Every broker reaches PostgreSQL, S3 and its peers through fault-injecting TCP proxies (test/helpers/fault-proxy.ts):
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
 * - peer-partition: one broker unreachable by its peers (the proxy in front of its cluster port stalled) for 2..6 s.
 */
import { FaultProxy } from '../../test/helpers/fault-proxy.js';
import { sleep } from '../../test/e2e/harness.js';
import type { TestCluster } from '../../test/helpers/cluster.js';
import { prng } from '../../test/helpers/prng.js';

export const FAULT_KINDS = ['kill', 'pause', 'term', 's3-stall', 's3-cut', 'pg-partition', 'peer-partition'] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

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
export function faultSchedule(seed: number, leaseMs: number, brokers: number[], gapMs: [number, number] = [2000, 6000]): () => FaultSpec {
  const rnd = prng(seed);
  const between = (lo: number, hi: number) => Math.round(lo + rnd() * (hi - lo));
  let i = 0;
  return () => {
    const kind = FAULT_KINDS[i++ % FAULT_KINDS.length]!;
    const victim = brokers[Math.floor(rnd() * brokers.length)]!;
    const spec: FaultSpec = { kind, broker: victim, durationMs: 0, quick: false, gapMs: between(gapMs[0], gapMs[1]) };
    if (kind === 'kill') spec.quick = rnd() < 0.5;
    else if (kind === 'pause') spec.durationMs = leaseMs + between(500, 3000);
    else if (kind === 's3-stall') spec.durationMs = between(2000, 8000);
    else if (kind === 's3-cut') spec.durationMs = between(500, 3000);
    else if (kind === 'pg-partition') spec.durationMs = leaseMs + between(1000, 4000);
    else if (kind === 'peer-partition') spec.durationMs = between(2000, 6000);
    if (kind === 's3-stall' || kind === 's3-cut') spec.broker = null;
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
  }
}

/** Ports a broker keeps across restarts. */
export interface BrokerPorts {
  kafka: number;
  mqtt: number;
  amqp: number;
  nats: number;
  cluster: number;
}

/** The cluster with its proxies, and what the nemesis does to it. */
export class ChaosCluster {
  readonly pgProxy = new Map<number, FaultProxy>();
  readonly s3Proxy = new Map<number, FaultProxy>();
  readonly peerProxy = new Map<number, FaultProxy>();
  /** Called with a broker's id before a new process replaces it (to keep the old one's log). */
  beforeRestart: (id: number) => void = () => undefined;

  constructor(
    readonly c: TestCluster,
    readonly ports: Map<number, BrokerPorts>,
    private readonly log: (line: string) => void,
  ) {}

  /** Proxies for broker `id` (before it starts the first time). */
  async addProxies(id: number): Promise<void> {
    const p = this.ports.get(id)!;
    this.pgProxy.set(id, await FaultProxy.start({ port: this.c.pg.port }));
    this.s3Proxy.set(id, await FaultProxy.start({ port: this.c.s3.port }));
    this.peerProxy.set(id, await FaultProxy.start({ port: p.cluster }));
  }

  /** Where broker `id` reaches PostgreSQL and S3 (its proxies). */
  backends(id: number): { dbUrl: string; s3Endpoint: string } | undefined {
    const pg = this.pgProxy.get(id);
    const s3 = this.s3Proxy.get(id);
    if (!pg || !s3) return undefined;
    const u = new URL(this.c.dbUrl);
    u.port = String(pg.port);
    return { dbUrl: u.toString(), s3Endpoint: `http://127.0.0.1:${s3.port}` };
  }

  /** The fixed ports and advertised cluster endpoint of broker `id`. */
  brokerArgs(id: number): string[] {
    const p = this.ports.get(id)!;
    const peer = this.peerProxy.get(id)!;
    return [
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
      `cluster=127.0.0.1:${peer.port}`,
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
        await this.c.startBroker({ id, args: this.brokerArgs(id), proxy: false, startTimeoutMs: 60_000 });
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
      case 'pg-partition':
      case 'peer-partition': {
        const p = (f.kind === 'pg-partition' ? this.pgProxy : this.peerProxy).get(id)!;
        p.set('stall');
        await sleep(f.durationMs);
        p.set('pass');
        return '';
      }
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
    for (const m of [this.pgProxy, this.s3Proxy, this.peerProxy]) for (const p of m.values()) p.set('pass');
    await this.c.close();
    for (const m of [this.pgProxy, this.s3Proxy, this.peerProxy]) for (const p of m.values()) await p.close();
  }
}
