/**
 * Who is connected, over every protocol: the admin API lists and kicks clients from here, and /metrics counts
 * them. An adapter registers each connection once it is accepted and updates the entry as it learns more (the
 * user after login, the MQTT client id); the entry leaves the registry when the connection closes.
 *
 * Counters on an entry are plain numbers the adapter bumps on its own path (no callback per message); bytes come
 * from the socket's own counters when a socket is given.
 */
export interface ClientRegistration {
  protocol: string;
  /** Listener name ("mqtt", "mqtts", "kafka", "amqp", "nats-ws", ...). */
  listener: string;
  remoteAddress?: string;
  remotePort?: number;
  /** Bytes in and out of the connection (a net.Socket's bytesRead/bytesWritten), when there is one. */
  socket?: { readonly bytesRead: number; readonly bytesWritten: number };
  /** Closes the connection the protocol's way (MQTT v5 DISCONNECT 0x98, AMQP connection.close 320, ...). */
  kick(reason: string): void;
}

/** Shared by every entry until its first namespace change (then it gets its own). */
const NOTHING_CARRIED: ProtocolTotals = Object.freeze({ messagesIn: 0, messagesOut: 0, bytesIn: 0, bytesOut: 0 });

export class ClientEntry {
  user: string | null = null;
  private ns = 'default';
  /** What was counted under an earlier namespace (see the namespace setter). */
  private carried: ProtocolTotals = NOTHING_CARRIED;
  /** The protocol's own client name (MQTT client id, Kafka client.id, AMQP connection_name, NATS name). */
  clientId: string | null = null;
  messagesIn = 0;
  messagesOut = 0;
  readonly connectedAt = Date.now();

  constructor(
    readonly id: string,
    readonly reg: ClientRegistration,
    private readonly registry: ClientRegistry,
  ) {}

  get bytesIn(): number {
    return this.reg.socket?.bytesRead ?? 0;
  }
  get bytesOut(): number {
    return this.reg.socket?.bytesWritten ?? 0;
  }

  /** The namespace the connection counts under ("default" until login says otherwise). */
  get namespace(): string {
    return this.ns;
  }

  /**
   * Moves the connection to another namespace (set after login). What it counted so far (its CONNECT's bytes,
   * say) stays with the old namespace's totals: /metrics counters never go down.
   */
  set namespace(next: string) {
    if (next === this.ns) return;
    const now = this.counted();
    this.registry.carry(this.reg.protocol, this.ns, now);
    this.carried = {
      messagesIn: this.carried.messagesIn + now.messagesIn,
      messagesOut: this.carried.messagesOut + now.messagesOut,
      bytesIn: this.carried.bytesIn + now.bytesIn,
      bytesOut: this.carried.bytesOut + now.bytesOut,
    };
    this.ns = next;
  }

  /** What the connection counted under its current namespace. */
  counted(): ProtocolTotals {
    return {
      messagesIn: this.messagesIn - this.carried.messagesIn,
      messagesOut: this.messagesOut - this.carried.messagesOut,
      bytesIn: this.bytesIn - this.carried.bytesIn,
      bytesOut: this.bytesOut - this.carried.bytesOut,
    };
  }

  /** Removes the entry (the connection closed); its counters go to the registry's totals. */
  close(): void {
    this.registry.remove(this);
  }

  view(): Record<string, unknown> {
    return {
      id: this.id,
      protocol: this.reg.protocol,
      listener: this.reg.listener,
      remoteAddress: this.reg.remoteAddress ?? null,
      remotePort: this.reg.remotePort ?? null,
      user: this.user,
      namespace: this.namespace,
      clientId: this.clientId,
      connectedAt: new Date(this.connectedAt).toISOString(),
      messagesIn: this.messagesIn,
      messagesOut: this.messagesOut,
      bytesIn: this.bytesIn,
      bytesOut: this.bytesOut,
    };
  }
}

export interface ProtocolTotals {
  messagesIn: number;
  messagesOut: number;
  bytesIn: number;
  bytesOut: number;
}

export class ClientRegistry {
  private readonly entries = new Map<string, ClientEntry>();
  private next = 1;
  /** Counters of closed connections, by protocol and namespace ("mqtt\u0000default"). */
  private readonly closedTotals = new Map<string, ProtocolTotals>();

  register(reg: ClientRegistration): ClientEntry {
    const e = new ClientEntry(`${reg.protocol}-${this.next++}`, reg, this);
    this.entries.set(e.id, e);
    return e;
  }

  remove(e: ClientEntry): void {
    if (!this.entries.delete(e.id)) return;
    this.carry(e.reg.protocol, e.namespace, e.counted());
  }

  /** Adds counts to the totals kept for connections no longer counted under (protocol, namespace). */
  carry(protocol: string, namespace: string, c: ProtocolTotals): void {
    const key = `${protocol}\u0000${namespace}`;
    const t = this.closedTotals.get(key) ?? { messagesIn: 0, messagesOut: 0, bytesIn: 0, bytesOut: 0 };
    t.messagesIn += c.messagesIn;
    t.messagesOut += c.messagesOut;
    t.bytesIn += c.bytesIn;
    t.bytesOut += c.bytesOut;
    this.closedTotals.set(key, t);
  }

  get(id: string): ClientEntry | undefined {
    return this.entries.get(id);
  }

  list(): ClientEntry[] {
    return [...this.entries.values()];
  }

  get size(): number {
    return this.entries.size;
  }

  /** Kicks one client; false when there is no such client. */
  kick(id: string, reason = 'kicked by an administrator'): boolean {
    const e = this.entries.get(id);
    if (!e) return false;
    e.reg.kick(reason);
    return true;
  }

  /** Totals by protocol and namespace, open connections included (for /metrics: counters never go down). */
  totals(): Array<{ protocol: string; namespace: string; connections: number } & ProtocolTotals> {
    const out = new Map<string, { protocol: string; namespace: string; connections: number } & ProtocolTotals>();
    const get = (protocol: string, namespace: string) => {
      const k = `${protocol}\u0000${namespace}`;
      let t = out.get(k);
      if (!t) out.set(k, (t = { protocol, namespace, connections: 0, messagesIn: 0, messagesOut: 0, bytesIn: 0, bytesOut: 0 }));
      return t;
    };
    for (const [k, c] of this.closedTotals) {
      const [protocol, namespace] = k.split('\u0000');
      const t = get(protocol, namespace);
      t.messagesIn += c.messagesIn;
      t.messagesOut += c.messagesOut;
      t.bytesIn += c.bytesIn;
      t.bytesOut += c.bytesOut;
    }
    for (const e of this.entries.values()) {
      const t = get(e.reg.protocol, e.namespace);
      const c = e.counted();
      t.connections++;
      t.messagesIn += c.messagesIn;
      t.messagesOut += c.messagesOut;
      t.bytesIn += c.bytesIn;
      t.bytesOut += c.bytesOut;
    }
    return [...out.values()];
  }
}
