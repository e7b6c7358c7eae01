/**
 * A FlowMQ cluster for end-to-end tests and benchmarks, every piece a separate process on loopback: a real
 * PostgreSQL (metastore and WAL; `max_connections=300`: every broker opens several pools), s3rver (objects), N
 * `bin/flowmq start --cluster` brokers (own broker id, data directory and ports, the OS picks every port, a short
 * membership lease so that failover tests take seconds), and HAProxy in front for MQTT, AMQP and NATS.
 *
 *   const c = await startCluster({ brokers: 3 });
 *   await c.waitSettled();                  // every partition/queue owned by its placement broker
 *   await c.kill(c.brokers[0].id);          // kill -9
 *   await c.waitBrokerDead(1);              // its lease expired, as /api/v1/cluster says
 *   await c.close();
 *
 * The cluster's view comes from the admin API (`GET /api/v1/cluster` of a live broker), as an operator sees it.
 * A plain module (no node:test imports), so bench/ can use it too.
 */
import { readFileSync, rmSync, writeFileSync, mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { FlowmqProcess, FLOWMQ_BIN, run, sleep, type RunResult } from '../e2e/harness.js';
import { startPostgres, type PostgresServer } from './postgres.js';
import { startS3, type S3TestServer } from './s3.js';
import { startHAProxy, type HAProxy, type ProxyBackend } from './haproxy.js';
import { makeBrokerCa, type BrokerCa } from './broker-certs.js';
import { startHaPostgres, type HaPostgres } from './pg-auto-failover.js';

import type { ClusterBrokerView, ClusterOwnerView, ClusterStatusView } from '../../src/control/api/routes-cluster.js';
import type { ResourceKind } from '../../src/cluster/index.js';
export type { ResourceKind };

export type { ClusterBrokerView, ClusterOwnerView };

/** GET /api/v1/cluster as a cluster broker answers it (broker set). */
export interface ClusterStatus extends ClusterStatusView {
  broker: number;
}

export interface StartClusterOptions {
  /** How many brokers to start (ids 1..N). Default 3. */
  brokers?: number;
  /** --cluster-lease. Default 2000 ms (the broker's default is 5 s; tests want failover in seconds). */
  leaseMs?: number;
  /** HAProxy in front (MQTT, AMQP, NATS). Default true. */
  haproxy?: boolean;
  /** Options every broker gets (beyond the cluster's). */
  args?: string[];
  env?: NodeJS.ProcessEnv;
  /** Keep fsync on in PostgreSQL (benchmarks of real commits). Default false. */
  durable?: boolean;
  /**
   * The channel's TLS (--cluster-tls): 'psk' (the brokers' default without certificates, what every cluster test
   * runs unless told otherwise), 'cert' (mutual TLS: a CA made for this cluster signs a certificate per broker), or
   * 'off' (plaintext). Default: FLOWMQ_TEST_CHANNEL_TLS, else 'psk' (the whole suite in cert mode:
   * FLOWMQ_TEST_CHANNEL_TLS=cert).
   */
  channelTls?: 'off' | 'psk' | 'cert';
  /**
   * A highly available PostgreSQL instead of one server: Debian's pg_auto_failover (test/helpers/pg-auto-failover.ts,
   * a monitor and two data nodes, the standby synchronous), the brokers given its multi-host URL. Default false.
   */
  pgHa?: boolean;
}

export interface ClusterBroker {
  readonly id: number;
  readonly proc: FlowmqProcess;
  /** The broker's OS process id (the launcher execs Node: signals reach the broker). */
  readonly pid: number;
  /** 'running', 'paused' (SIGSTOP), 'dead' (killed or stopped). */
  state: 'running' | 'paused' | 'dead';
  readonly http: string;
  readonly kafka: string;
  readonly mqttUrl: string;
  readonly amqpUrl: string;
  readonly natsServer: string;
}

export const TEST_CLUSTER_SECRET = 'flowmq-test-cluster-secret-0123456789';

/** The shared-backend options of every broker of a cluster: PostgreSQL metastore and WAL, S3 objects. */
export function sharedBackendArgs(pg: { dbUrl: string }, s3: S3TestServer, prefix: string): string[] {
  return [
    '--metastore',
    pg.dbUrl,
    '--wal',
    'postgres',
    '--object-store',
    `s3://${s3.bucket}/${prefix}`,
    '--s3-endpoint',
    s3.endpoint,
    '--s3-region',
    s3.region,
    '--s3-access-key-id',
    s3.accessKeyId,
    '--s3-secret-access-key',
    s3.secretAccessKey,
  ];
}

/** Clock ticks per second of /proc/<pid>/stat's times (sysconf(_SC_CLK_TCK); 100 on Linux everywhere in practice). */
const CLK_TCK = 100;

/** CPU time (user + system) a process has used so far, in ms, from /proc/<pid>/stat. */
export function processCpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command name (field 2) is in parentheses and may hold spaces: fields are counted after its ')'.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // rest[0] is field 3 (state); utime is field 14, stime field 15.
  const utime = Number(rest[11]);
  const stime = Number(rest[12]);
  return ((utime + stime) * 1000) / CLK_TCK;
}

export class TestCluster {
  readonly brokers: ClusterBroker[] = [];
  haproxy: HAProxy | null = null;
  /**
   * Where a broker reaches the shared backends, when not directly: the chaos runner (bench/reliability/chaos.ts)
   * puts a fault-injecting proxy (test/helpers/fault-proxy.ts) between each broker and PostgreSQL and S3. Set before
   * the broker starts (`startCluster({ brokers: 0 })`, then startBroker).
   */
  backendsFor: ((id: number) => { dbUrl?: string; s3Endpoint?: string } | undefined) | null = null;
  private readonly dirs: string[] = [];
  /** --cluster-tls cert: the cluster's CA (made on first use). */
  private ca: BrokerCa | null = null;
  private closed = false;
  private readonly onExit = (): void => {
    for (const b of this.brokers) {
      try {
        if (b.state !== 'dead') process.kill(b.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  };

  private constructor(
    /** With `pgHa`: `port` is the first data node's; restarts are the HA helper's (`ha`). */
    readonly pg: PostgresServer,
    /** The highly available PostgreSQL (`pgHa`), or null. */
    readonly ha: HaPostgres | null,
    readonly s3: S3TestServer,
    readonly dbUrl: string,
    readonly prefix: string,
    readonly opts: Required<Pick<StartClusterOptions, 'leaseMs'>> & StartClusterOptions,
  ) {
    process.on('exit', this.onExit);
  }

  static async start(opts: StartClusterOptions = {}): Promise<TestCluster> {
    const ha = opts.pgHa ? await startHaPostgres() : null;
    const [pg, s3] = await Promise.all([ha ? haServer(ha) : startPostgres({ maxConnections: 300, durable: opts.durable }), startS3()]);
    let c: TestCluster;
    try {
      const dbUrl = await pg.createDatabase(`cluster_${process.pid}_${randomBytes(3).toString('hex')}`);
      c = new TestCluster(pg, ha, s3, dbUrl, `cluster-${process.pid}`, { ...opts, leaseMs: opts.leaseMs ?? 2000 });
    } catch (err) {
      await Promise.all([pg.stop(), s3.close()]);
      throw err;
    }
    try {
      const n = opts.brokers ?? 3;
      // The first broker alone (it creates the schema), then the others together.
      if (n > 0) await c.startBroker({ id: 1, proxy: false });
      await Promise.all(Array.from({ length: n - 1 }, (_, i) => c.startBroker({ id: i + 2, proxy: false })));
      if (opts.haproxy ?? true) c.haproxy = await startHAProxy(c.proxyBackends());
      if (n > 0) await c.waitFor((s) => s.brokers.filter((b) => b.alive).length === n, 20_000, `${n} live brokers`);
    } catch (err) {
      await c.close();
      throw err;
    }
    return c;
  }

  /**
   * A single-host URL of the cluster's database for node-postgres (which takes one host): with `pgHa`, the current
   * primary's.
   */
  async directDbUrl(): Promise<string> {
    if (!this.ha) return this.dbUrl;
    const db = decodeURIComponent(new URL(this.dbUrl.replace(/@[^/]*\//, '@h/')).pathname.slice(1));
    return this.ha.nodeUrl(Math.max(0, await this.ha.primary()), db);
  }

  /** The options a broker of this cluster starts with (beyond data directory and ports). */
  brokerArgs(id: number, extra: string[] = []): string[] {
    return [
      '--cluster',
      '--broker-id',
      String(id),
      '--cluster-port',
      '0',
      '--cluster-secret',
      TEST_CLUSTER_SECRET,
      '--cluster-lease',
      `${this.opts.leaseMs}ms`,
      ...this.backendArgs(id),
      ...this.tlsArgs(id),
      ...(this.opts.args ?? []),
      ...extra,
    ];
  }

  /** The channel TLS options of broker `id` (a certificate of the cluster's CA in cert mode). */
  private tlsArgs(id: number): string[] {
    const env = process.env.FLOWMQ_TEST_CHANNEL_TLS;
    if (env !== undefined && env !== 'off' && env !== 'psk' && env !== 'cert') throw new Error(`FLOWMQ_TEST_CHANNEL_TLS=${env}: expected off, psk or cert`);
    const mode = this.opts.channelTls ?? env ?? 'psk';
    if (mode !== 'cert') return ['--cluster-tls', mode];
    if (!this.ca) {
      this.ca = makeBrokerCa();
      this.dirs.push(this.ca.dir);
    }
    const c = this.ca.issue(`broker-${id}`);
    return ['--cluster-tls', 'cert', '--cluster-tls-cert', c.certPath, '--cluster-tls-key', c.keyPath, '--cluster-tls-ca', this.ca.caPath];
  }

  private backendArgs(id: number): string[] {
    const o = this.backendsFor?.(id) ?? {};
    return sharedBackendArgs({ dbUrl: o.dbUrl ?? this.dbUrl }, o.s3Endpoint ? { ...this.s3, endpoint: o.s3Endpoint } : this.s3, this.prefix);
  }

  /**
   * Starts a broker (default: the next unused id) and adds it to HAProxy. Resolves once its listeners are up (it
   * has registered then; use waitSettled for its share of the work).
   */
  async startBroker(
    o: {
      id?: number;
      args?: string[];
      env?: NodeJS.ProcessEnv;
      proxy?: boolean;
      startTimeoutMs?: number;
      /** The address it binds and is reached at, and the command it runs under (a test network namespace's). */
      host?: string;
      wrap?: string[];
    } = {},
  ): Promise<ClusterBroker> {
    const id = o.id ?? Math.max(0, ...this.brokers.map((b) => b.id)) + 1;
    const dataDir = mkdtempSync(join(tmpdir(), `flowmq-cluster-b${id}-`));
    this.dirs.push(dataDir);
    const proc = await FlowmqProcess.start({
      dataDir,
      args: this.brokerArgs(id, o.args),
      env: { ...this.opts.env, ...o.env },
      // Three brokers start at once (and a test file may run beside the cluster: scripts/test.mjs `apart`); how
      // fast a start is is not what these tests judge.
      startTimeoutMs: o.startTimeoutMs ?? 60_000,
      host: o.host,
      wrap: o.wrap,
    });
    const b: ClusterBroker = {
      id,
      proc,
      pid: proc.proc.pid!,
      state: 'running',
      get http() {
        return proc.http;
      },
      get kafka() {
        return proc.kafka;
      },
      get mqttUrl() {
        return proc.mqttUrl;
      },
      get amqpUrl() {
        return `amqp://${proc.host}:${proc.ports.amqp}`;
      },
      get natsServer() {
        return proc.natsServer;
      },
    };
    proc.proc.once('exit', () => {
      b.state = 'dead';
    });
    // A broker restarted with the id of a dead one replaces it in the list.
    const i = this.brokers.findIndex((x) => x.id === id);
    if (i >= 0) this.brokers.splice(i, 1, b);
    else this.brokers.push(b);
    if (o.proxy !== false && this.haproxy) await this.haproxy.reload(this.proxyBackends());
    return b;
  }

  broker(id: number): ClusterBroker {
    const b = this.brokers.find((x) => x.id === id);
    if (!b) throw new Error(`no broker ${id} in this cluster`);
    return b;
  }

  /** Brokers not killed or stopped (paused ones included). */
  get running(): ClusterBroker[] {
    return this.brokers.filter((b) => b.state === 'running');
  }

  /** kill -9: no handover, no goodbye; its work moves once its lease expires. */
  async kill(id: number): Promise<void> {
    const b = this.broker(id);
    if (b.state === 'paused') process.kill(b.pid, 'SIGCONT');
    await b.proc.stop('SIGKILL');
    b.state = 'dead';
  }

  /** SIGSTOP: the process is frozen (its lease runs out while it believes itself alive). */
  pause(id: number): void {
    const b = this.broker(id);
    process.kill(b.pid, 'SIGSTOP');
    b.state = 'paused';
  }

  /** SIGCONT after pause(). */
  resume(id: number): void {
    const b = this.broker(id);
    process.kill(b.pid, 'SIGCONT');
    b.state = 'running';
  }

  /** SIGTERM: a graceful shutdown (hands its leases over at once); resolves once it exited. */
  async stop(id: number): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    const b = this.broker(id);
    if (b.state === 'paused') this.resume(id);
    const r = await b.proc.stop('SIGTERM');
    b.state = 'dead';
    return r;
  }

  /** A broker that left for good (stopped or killed): no longer one of `brokers`, so nothing waits for it. */
  forget(id: number): void {
    const i = this.brokers.findIndex((b) => b.id === id);
    if (i < 0) return;
    if (this.brokers[i]!.state !== 'dead') throw new Error(`broker ${id} still runs: stop or kill it first`);
    this.brokers.splice(i, 1);
  }

  /** CPU time (user + system, ms) the broker's process has used so far. */
  cpuMs(id: number): number {
    return processCpuMs(this.broker(id).pid);
  }

  /** Kafka bootstrap list of the running brokers. */
  get bootstrap(): string[] {
    return this.running.map((b) => b.kafka);
  }

  /** GET on a running broker's admin API (the first running one unless `via`). */
  async api<T = unknown>(path: string, via?: number): Promise<T> {
    const b = via !== undefined ? this.broker(via) : this.running[0];
    if (!b) throw new Error('no running broker to ask');
    return b.proc.api<T>('GET', path);
  }

  /**
   * Until no running broker knows a live filter of another: the subscribers of an earlier scenario on this cluster
   * are gone everywhere, and interest counts start from zero again (GET /api/v1/broker `live.peers`).
   */
  async waitNoLiveInterest(timeoutMs = 20_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const known: string[] = [];
      for (const b of this.running) {
        const { live } = await this.api<{ live: { peers: Record<string, number> } }>('/api/v1/broker', b.id);
        for (const [peer, n] of Object.entries(live.peers)) if (n > 0) known.push(`broker ${b.id} knows ${n} of broker ${peer}`);
      }
      if (known.length === 0) return;
      if (Date.now() > deadline) throw new Error(`timed out waiting for the live interest of earlier clients to go: ${known.join(', ')}`);
      await sleep(100);
    }
  }

  /** GET /api/v1/cluster (one page of owners: `limit`, `kind`, `broker`, `cursor`). */
  status(o: { via?: number; kind?: ResourceKind; broker?: number; limit?: number; cursor?: string } = {}): Promise<ClusterStatus> {
    const q = new URLSearchParams();
    if (o.kind) q.set('kind', o.kind);
    if (o.broker !== undefined) q.set('broker', String(o.broker));
    q.set('limit', String(o.limit ?? 1000));
    if (o.cursor) q.set('cursor', o.cursor);
    return this.api<ClusterStatus>(`/api/v1/cluster?${q}`, o.via);
  }

  /** Every owner row (all pages), of one kind or all. */
  async owners(kind?: ResourceKind, via?: number): Promise<{ status: ClusterStatus; owners: ClusterOwnerView[] }> {
    let s = await this.status({ via, kind });
    const first = s;
    const all = [...s.owners.items];
    while (s.owners.next !== null) {
      s = await this.status({ via, kind, cursor: s.owners.next });
      all.push(...s.owners.items);
    }
    return { status: first, owners: all };
  }

  /** The live owner of a resource now, or null. */
  async ownerOf(kind: ResourceKind, name: string, via?: number): Promise<number | null> {
    const { owners } = await this.owners(kind, via);
    const row = owners.find((o) => o.name === name);
    return row && row.alive ? row.owner : null;
  }

  /** Polls GET /api/v1/cluster until `pred` holds (errors of a broker going down are retried). */
  async waitFor(pred: (s: ClusterStatus) => boolean, timeoutMs = 20_000, what = 'cluster condition'): Promise<ClusterStatus> {
    const deadline = Date.now() + timeoutMs;
    let last: ClusterStatus | null = null;
    let lastErr: unknown = null;
    for (;;) {
      try {
        last = await this.status();
        if (pred(last)) return last;
      } catch (err) {
        lastErr = err;
      }
      if (Date.now() > deadline) {
        throw new Error(
          `timed out waiting for ${what}; last view: ${JSON.stringify(last?.brokers ?? null)}${lastErr ? `; last error: ${(lastErr as Error).message}` : ''}`,
        );
      }
      await sleep(100);
    }
  }

  /** Until the cluster sees the broker as dead (its lease expired, or it deregistered). */
  waitBrokerDead(id: number, timeoutMs = 20_000): Promise<ClusterStatus> {
    return this.waitFor((s) => !s.brokers.some((b) => b.id === id && b.alive), timeoutMs, `broker ${id} dead`);
  }

  waitBrokerAlive(id: number, timeoutMs = 20_000): Promise<ClusterStatus> {
    return this.waitFor((s) => s.brokers.some((b) => b.id === id && b.alive && !b.leaving), timeoutMs, `broker ${id} alive`);
  }

  /**
   * Until ownership settles: the live brokers are exactly the running ones (a killed or paused broker's lease has
   * expired, a new one registered), and every owner row of `kinds` (default partitions and queues: the placed kinds)
   * is held by a live broker, the one placement picks. `min`: at least that many rows of a kind (resources created
   * but not yet claimed have no row). Every running broker is asked, so all of them agree.
   */
  async waitSettled(o: { kinds?: ResourceKind[]; min?: Partial<Record<ResourceKind, number>>; timeoutMs?: number } = {}): Promise<ClusterOwnerView[]> {
    const kinds = o.kinds ?? ['partition', 'queue'];
    const deadline = Date.now() + (o.timeoutMs ?? 30_000);
    let why = '';
    for (;;) {
      why = '';
      let rows: ClusterOwnerView[] = [];
      try {
        const expected = this.running.map((b) => b.id).sort((a, b) => a - b);
        for (const b of this.running) {
          const { status, owners } = await this.owners(undefined, b.id);
          const alive = status.brokers
            .filter((x) => x.alive && !x.leaving)
            .map((x) => x.id)
            .sort((a, b) => a - b);
          if (alive.join(',') !== expected.join(',')) {
            why = `broker ${b.id} sees live brokers [${alive}], expected [${expected}]`;
            break;
          }
          rows = owners.filter((r) => kinds.includes(r.kind));
          const bad = rows.find((r) => !r.alive || r.owner === null || r.owner !== r.placement);
          if (bad) {
            why = `${bad.kind} ${bad.name}: owner ${bad.owner} (alive ${bad.alive}), placement ${bad.placement}`;
            break;
          }
          for (const [k, n] of Object.entries(o.min ?? {})) {
            const have = rows.filter((r) => r.kind === k).length;
            if (have < (n ?? 0)) why = `${have} ${k} rows, expected at least ${n}`;
          }
          if (why) break;
        }
      } catch (err) {
        why = (err as Error).message;
      }
      if (why === '') return rows;
      if (Date.now() > deadline) throw new Error(`ownership did not settle: ${why}`);
      await sleep(150);
    }
  }

  /** Every item of a paged admin API list (`{items, next}`) of one broker. */
  async list<T = Record<string, unknown>>(path: string, via?: number): Promise<T[]> {
    const out: T[] = [];
    let cursor: string | null = null;
    do {
      const sep = path.includes('?') ? '&' : '?';
      const page: { items: T[]; next: string | null } = await this.api(`${path}${sep}limit=1000${cursor ? `&cursor=${cursor}` : ''}`, via);
      out.push(...page.items);
      cursor = page.next;
    } while (cursor !== null);
    return out;
  }

  /**
   * Until every running broker knows the definitions (streams, queues, bindings of a queue to a key): they travel
   * between brokers by NOTIFY, so a broker routes a publish into a stream or queue declared on another only once
   * it heard of it.
   */
  async waitCatalog(o: { streams?: string[]; queues?: string[]; bindings?: Array<{ queue: string; key: string }> }, timeoutMs = 15_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let why = '';
    for (;;) {
      why = '';
      try {
        for (const b of this.running) {
          if (o.streams) {
            const have = new Set((await this.list<{ name: string }>('/api/v1/streams', b.id)).map((x) => x.name));
            const missing = o.streams.filter((n) => !have.has(n));
            if (missing.length > 0) why = `broker ${b.id} does not know the streams ${missing.join(', ')}`;
          }
          if (!why && o.queues) {
            const have = new Set((await this.list<{ name: string }>('/api/v1/queues', b.id)).map((x) => x.name));
            const missing = o.queues.filter((n) => !have.has(n));
            if (missing.length > 0) why = `broker ${b.id} does not know the queues ${missing.join(', ')}`;
          }
          if (!why && o.bindings) {
            const have = await this.list<{ destination: string; key: string }>('/api/v1/bindings', b.id);
            const missing = o.bindings.filter((w) => !have.some((x) => x.destination === w.queue && x.key === w.key));
            if (missing.length > 0) why = `broker ${b.id} does not know the bindings ${JSON.stringify(missing)}`;
          }
          if (why) break;
        }
      } catch (err) {
        why = (err as Error).message;
      }
      if (why === '') return;
      if (Date.now() > deadline) throw new Error(`definitions did not reach every broker: ${why}`);
      await sleep(100);
    }
  }

  /** Runs the `flowmq` CLI against a running broker. */
  cli(args: string[], via?: number): Promise<RunResult> {
    const b = via !== undefined ? this.broker(via) : this.running[0];
    return b.proc.cli(args);
  }

  /** Every broker's log lines as text (for a failed test's message, or FLOWMQ_CLUSTER_LOGS). */
  logs(id: number): string {
    return this.broker(id)
      .proc.logs.map((l) => JSON.stringify(l))
      .join('\n');
  }

  private proxyBackends(): ProxyBackend[] {
    return this.brokers
      .filter((b) => b.state !== 'dead')
      .map((b) => ({ name: `broker${b.id}`, ports: { mqtt: b.proc.ports.mqtt, amqp: b.proc.ports.amqp, nats: b.proc.ports.nats } }));
  }

  /**
   * Kills every broker (kill -9: the cluster goes away as a whole, nothing to hand over), HAProxy, PostgreSQL and
   * s3rver, and removes the data. With FLOWMQ_CLUSTER_LOGS=<dir>, each broker's log is written there first.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const keep = process.env.FLOWMQ_CLUSTER_LOGS;
    if (keep) {
      mkdirSync(keep, { recursive: true });
      for (const b of this.brokers) writeFileSync(join(keep, `broker-${b.id}-${b.pid}.log`), `${this.logs(b.id)}\n${b.proc.errorOutput}`);
    }
    await Promise.all(
      this.brokers.map(async (b) => {
        if (b.state === 'dead') return;
        if (b.state === 'paused') process.kill(b.pid, 'SIGCONT');
        await b.proc.stop('SIGKILL');
        b.state = 'dead';
      }),
    );
    process.off('exit', this.onExit);
    await this.haproxy?.stop();
    await Promise.all([this.pg.stop(), this.s3.close()]);
    for (const d of this.dirs) rmSync(d, { recursive: true, force: true, maxRetries: 5 });
  }
}

/** The HA PostgreSQL as the PostgresServer a cluster holds: its first node's port, no restarts of its own. */
function haServer(ha: HaPostgres): PostgresServer {
  const no = (): Promise<void> => Promise.reject(new Error('a highly available PostgreSQL is restarted through its nodes (TestCluster.ha)'));
  return {
    port: ha.ports[0]!,
    url: (db) => ha.url(db),
    createDatabase: (name) => ha.createDatabase(name),
    restart: no,
    stopServer: no,
    startServer: no,
    stop: () => ha.stop(),
  };
}

export function startCluster(opts: StartClusterOptions = {}): Promise<TestCluster> {
  return TestCluster.start(opts);
}

/** `bin/flowmq start` with `args` that is expected to refuse to start: its exit code and output. */
export function startRefused(args: string[], timeoutMs = 20_000): Promise<RunResult> {
  const dataDir = mkdtempSync(join(tmpdir(), 'flowmq-refused-'));
  return run(
    FLOWMQ_BIN,
    [
      'start',
      '--data-dir',
      dataDir,
      '--host',
      '127.0.0.1',
      '--mqtt-port',
      '0',
      '--kafka-port',
      '0',
      '--amqp-port',
      '0',
      '--nats-port',
      '0',
      '--http-port',
      '0',
      ...args,
    ],
    {
      timeoutMs,
      env: { FLOWMQ_NODE: process.execPath },
    },
  ).finally(() => rmSync(dataDir, { recursive: true, force: true }));
}
