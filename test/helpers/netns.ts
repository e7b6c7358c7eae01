/**
 * A small network for fault tests (the chaos runner's `--netns`, bench/reliability/chaos.ts): one Linux network
 * namespace per broker, each joined by a veth pair to a bridge in this process's namespace, so that every byte a
 * broker sends to its peers, to PostgreSQL and S3 (proxies listening on the bridge's address) and to its clients
 * (which run here and reach it at its namespace's address) crosses a real link that the test can cut.
 *
 * - `isolate(id)`: the broker's link down (a cable pulled): nothing in or out, its sockets stay open and silent;
 * - `block(id, from)`: packets between the broker and the given peers (other brokers, or ports of this namespace,
 *   where PostgreSQL and S3 are reached) dropped at both ends' input, so that neither side gets anything of the other
 *   and neither is told (no reset, no ICMP): a partition as TCP sees one, only the retransmission timers run;
 * - `lose(id, percent)`: that share of the packets the broker receives, and of those it sends, dropped at random
 *   (nftables `numgen random`), so TCP retransmits: a lossy link;
 * - `heal(id)`: every one of them undone.
 * The rules are nftables tables of this lab's own (one per namespace, one here), removed by heal and close; the
 * kernel has no `tc netem`, so delay is left to the fault-injecting proxy (fault-proxy.ts). Needs root (or
 * CAP_NET_ADMIN), iproute2 and nftables (`.ci/run` installs it). A plain module (no node:test), so bench/ can use it.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';

const BROKER_IFACE = 'eth0';

export interface NetLabOptions {
  /** Broker ids: a namespace each. */
  ids: number[];
}

function run(cmd: string, args: string[], input?: string): string {
  return execFileSync(cmd, args, { input, encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'], timeout: 10_000 });
}

/** A /24 of 10.0.0.0/8 that no interface here uses (the third octet from the pid, then the next free one). */
function freeSubnet(): string {
  const used = new Set([...run('ip', ['-o', '-4', 'addr', 'show']).matchAll(/inet (10\.\d+\.\d+)\.\d+\//g)].map((m) => m[1]));
  for (let i = 0; i < 250 * 50; i++) {
    const n = (process.pid + i) % (250 * 50);
    const net = `10.${200 + Math.floor(n / 250)}.${n % 250}`;
    if (!used.has(net)) return net;
  }
  throw new Error('no free 10.x.y.0/24 for the test network');
}

export class NetLab {
  private readonly blocked = new Set<number>();
  private readonly forwarders: ChildProcess[] = [];
  private hostRules = new Map<number, string>();
  private closed = false;

  private constructor(
    /** The prefix of every name this lab makes (namespaces, links, tables): unique per process. */
    private readonly tag: string,
    private readonly net: string,
    readonly ids: number[],
  ) {}

  /** Whether this process may make namespaces and nftables rules (root, iproute2, nft): the reason when not. */
  static unavailable(): string | null {
    try {
      run('ip', ['netns', 'list']);
    } catch (err) {
      return `ip netns: ${(err as Error).message.split('\n')[0]}`;
    }
    try {
      run('nft', ['--version']);
    } catch {
      return 'nft (Debian package nftables) is not installed';
    }
    if (process.getuid?.() !== 0) return 'network namespaces need root';
    return null;
  }

  static create(opts: NetLabOptions): NetLab {
    const why = NetLab.unavailable();
    if (why) throw new Error(`cannot make the test network: ${why}`);
    const lab = new NetLab(`fq${process.pid % 100000}`, freeSubnet(), opts.ids);
    try {
      lab.setUp();
    } catch (err) {
      lab.close();
      throw err;
    }
    return lab;
  }

  private get bridge(): string {
    return `${this.tag}br`;
  }

  private ns(id: number): string {
    return `${this.tag}b${id}`;
  }

  private hostEnd(id: number): string {
    return `${this.tag}v${id}`;
  }

  /** The address of this namespace on the bridge: where PostgreSQL's and S3's proxies listen for the brokers. */
  get hostAddress(): string {
    return `${this.net}.1`;
  }

  /** Broker `id`'s address (it binds its listeners there; clients and peers reach it there). */
  address(id: number): string {
    const i = this.ids.indexOf(id);
    if (i < 0) throw new Error(`no broker ${id} in the test network`);
    return `${this.net}.${10 + i}`;
  }

  /** The command prefix that runs a program in broker `id`'s namespace (`ip netns exec` execs it: same pid). */
  wrap(id: number): string[] {
    return ['ip', 'netns', 'exec', this.ns(id)];
  }

  private setUp(): void {
    run('ip', ['link', 'add', this.bridge, 'type', 'bridge']);
    run('ip', ['addr', 'add', `${this.hostAddress}/24`, 'dev', this.bridge]);
    run('ip', ['link', 'set', this.bridge, 'up']);
    for (const id of this.ids) {
      const ns = this.ns(id);
      run('ip', ['netns', 'add', ns]);
      run('ip', ['link', 'add', this.hostEnd(id), 'type', 'veth', 'peer', 'name', BROKER_IFACE, 'netns', ns]);
      run('ip', ['link', 'set', this.hostEnd(id), 'master', this.bridge, 'up']);
      run('ip', ['-n', ns, 'addr', 'add', `${this.address(id)}/24`, 'dev', BROKER_IFACE]);
      run('ip', ['-n', ns, 'link', 'set', BROKER_IFACE, 'up']);
      run('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);
    }
  }

  /**
   * Forwards `port` of broker `id`'s address to the same port on its namespace's loopback, from inside the namespace:
   * a broker's admin API, which answers loopback callers before any user exists, is then reached from here as from
   * the broker's own machine. A small Node.js process in the namespace, outliving the broker's restarts.
   */
  forward(id: number, port: number): void {
    const script =
      "const net=require('node:net');const [a,p]=process.argv.slice(1);" +
      "net.createServer((c)=>{const u=net.connect(Number(p),'127.0.0.1');const end=()=>{c.destroy();u.destroy()};" +
      "c.on('error',end);u.on('error',end);c.on('close',end);u.on('close',end);c.pipe(u);u.pipe(c)}).listen(Number(p),a)";
    const child = spawn('ip', ['netns', 'exec', this.ns(id), process.execPath, '-e', script, this.address(id), String(port)], { stdio: 'ignore' });
    child.unref();
    this.forwarders.push(child);
  }

  /** Broker `id`'s link down (`false`: up again). */
  isolate(id: number, down = true): void {
    run('ip', ['link', 'set', this.hostEnd(id), down ? 'down' : 'up']);
  }

  /**
   * Drops every packet between broker `id` and `from`: other brokers (ids), or ports of this namespace (the proxies to
   * PostgreSQL or S3), at both ends' input. Replaces what an earlier block of `id` set.
   */
  block(id: number, from: { brokers?: number[]; hostPorts?: number[] }): void {
    this.rules(id, from, 'drop');
  }

  /** Drops `percent`% of the packets broker `id` exchanges with anyone, at random. */
  lose(id: number, percent: number): void {
    this.rules(id, { brokers: this.ids.filter((x) => x !== id), hostPorts: [], everything: true }, `numgen random mod 100 < ${Math.round(percent)} drop`);
  }

  private rules(id: number, from: { brokers?: number[]; hostPorts?: number[]; everything?: boolean }, verdict: string): void {
    this.heal(id);
    const me = this.address(id);
    const peers = (from.brokers ?? []).map((b) => this.address(b));
    const ports = from.hostPorts ?? [];
    const mine: string[] = [];
    if (from.everything) mine.push(`iifname "${BROKER_IFACE}" ${verdict}`);
    else {
      if (peers.length > 0) mine.push(`ip saddr { ${peers.join(', ')} } ${verdict}`);
      if (ports.length > 0) mine.push(`ip saddr ${this.hostAddress} tcp sport { ${ports.join(', ')} } ${verdict}`);
    }
    this.table(this.ns(id), mine);
    for (const b of from.brokers ?? []) this.table(this.ns(b), [`ip saddr ${me} ${verdict}`], id);
    const here = from.everything ? [`ip saddr ${me} ${verdict}`] : ports.length > 0 ? [`ip saddr ${me} tcp dport { ${ports.join(', ')} } ${verdict}`] : [];
    if (here.length > 0) this.table(null, here, id);
    this.blocked.add(id);
  }

  /**
   * An input-hook table of rules in broker namespace `ns` (null: this one). A peer's or this namespace's table is
   * named after the victim, so that healing one victim leaves another's rules.
   */
  private table(ns: string | null, rules: string[], victim?: number): void {
    if (rules.length === 0) return;
    const name = victim === undefined ? 'fmqchaos' : `fmqchaos_${this.tag}_${victim}`;
    const text = `table inet ${name} {\n  chain input {\n    type filter hook input priority 0; policy accept;\n${rules.map((r) => `    ${r}\n`).join('')}  }\n}\n`;
    if (ns === null) {
      run('nft', ['-f', '-'], text);
      this.hostRules.set(victim!, name);
    } else run('ip', ['netns', 'exec', ns, 'nft', '-f', '-'], text);
  }

  /** Undoes block and lose of broker `id` (its link is isolate's). */
  heal(id: number): void {
    if (!this.blocked.delete(id)) return;
    const drop = (ns: string | null, name: string) => {
      try {
        if (ns === null) run('nft', ['delete', 'table', 'inet', name]);
        else run('ip', ['netns', 'exec', ns, 'nft', 'delete', 'table', 'inet', name]);
      } catch {
        // not made (nothing to block there)
      }
    };
    drop(this.ns(id), 'fmqchaos');
    for (const b of this.ids) if (b !== id) drop(this.ns(b), `fmqchaos_${this.tag}_${id}`);
    const host = this.hostRules.get(id);
    if (host) drop(null, host);
    this.hostRules.delete(id);
  }

  /** Removes every namespace, link and table of this lab (the brokers in it must be gone first). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const id of [...this.blocked]) this.heal(id);
    for (const f of this.forwarders) f.kill('SIGKILL');
    for (const id of this.ids) {
      try {
        run('ip', ['netns', 'delete', this.ns(id)]);
      } catch {
        // never made
      }
    }
    try {
      run('ip', ['link', 'delete', this.bridge]);
    } catch {
      // never made
    }
  }
}
