/**
 * MQTT 3.1.1 load generator on raw sockets with pre-encoded frames, so the client is not the bottleneck and
 * both brokers see exactly the same bytes.
 *
 * Every PUBLISH payload starts with the publisher's index and a per-publisher sequence number (u32 each); the
 * frames are stamped by copying a pre-encoded template and patching the sequence number (and, for QoS 1, the
 * packet id) in place. Subscribers parse only the fixed header, topic length, packet id and those 8 bytes.
 *
 * Flow control, identical for both brokers:
 * - QoS 1 publishers keep at most `window` PUBLISHes unacknowledged and send more as PUBACKs come back.
 * - Every publisher is also kept at most `ahead` messages ahead of its subscribers (end-to-end): for normal
 *   subscriptions "received" is the highest sequence number every subscriber has seen (so a dropped QoS 0
 *   message never stalls the publisher), for a shared group it is the number of deliveries to the group. This
 *   keeps both brokers inside their (equal) per-client queue limits, so the figure is the rate at which a
 *   broker moves messages through, not how much it buffers or drops under an unbounded overload.
 * - QoS 1 subscribers PUBACK every delivery, one write per received chunk.
 */
import { connect, type Socket } from 'node:net';
import { HOST, mapLimit, nowS, settle, sleep } from './util.js';

// ------------------------------------------------------------------ frames

/** MQTT's variable-length Remaining Length (section 2.2.3). */
export function remainingLength(n: number): Buffer {
  const out: number[] = [];
  do {
    let b = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) b |= 0x80;
    out.push(b);
  } while (n > 0);
  return Buffer.from(out);
}

/** A length-prefixed UTF-8 string (section 1.5.3). */
export function mqttString(s: string): Buffer {
  const b = Buffer.from(s);
  const l = Buffer.alloc(2);
  l.writeUInt16BE(b.length);
  return Buffer.concat([l, b]);
}

export function packet(first: number, body: Buffer): Buffer {
  return Buffer.concat([Buffer.from([first]), remainingLength(body.length), body]);
}

/** CONNECT, protocol level 4, clean session. */
export function connectFrame(clientId: string, keepAliveS = 60): Buffer {
  return packet(0x10, Buffer.concat([mqttString('MQTT'), Buffer.from([4, 0x02, keepAliveS >> 8, keepAliveS & 0xff]), mqttString(clientId)]));
}

export function subscribeFrame(filter: string, qos: number, id = 1): Buffer {
  const pid = Buffer.alloc(2);
  pid.writeUInt16BE(id);
  return packet(0x82, Buffer.concat([pid, mqttString(filter), Buffer.from([qos])]));
}

const DISCONNECT = Buffer.from([0xe0, 0x00]);

interface PublishTemplate {
  frame: Buffer;
  /** Offset of the packet id (QoS 1), or -1. */
  idAt: number;
  /** Offset of the payload (publisher index u32, then sequence number u32). */
  payloadAt: number;
}

/** A PUBLISH frame to `topic` with a `payloadBytes` payload carrying `publisher` at its start. */
export function publishTemplate(topic: string, publisher: number, payloadBytes: number, qos: 0 | 1): PublishTemplate {
  const payload = Buffer.alloc(Math.max(8, payloadBytes), 0x61);
  payload.writeUInt32BE(publisher, 0);
  payload.writeUInt32BE(0, 4);
  const t = mqttString(topic);
  const body = Buffer.concat([t, qos ? Buffer.from([0, 1]) : Buffer.alloc(0), payload]);
  const frame = packet(0x30 | (qos << 1), body);
  const headerLen = frame.length - body.length;
  return { frame, idAt: qos ? headerLen + t.length : -1, payloadAt: headerLen + t.length + (qos ? 2 : 0) };
}

// ------------------------------------------------------------------ stream parsing

const READ_BUFFER = Buffer.alloc(256 * 1024);

type PacketHandler = (first: number, buf: Buffer, start: number, end: number) => void;

/**
 * One MQTT connection of the load generator: splits the byte stream into packets and hands each to `handle`
 * (which is swapped as the client goes from handshake to its role); `afterChunk` runs once per received chunk.
 */
export class Client {
  handle: PacketHandler = () => undefined;
  afterChunk: (() => void) | null = null;
  closed = false;
  private tail: Buffer | null = null;

  readonly socket: Socket;

  private constructor(port: number, onConnect: () => void, onError: (e: Error) => void) {
    // Reads land in one buffer shared by every connection (no allocation per read): `push` consumes each
    // chunk synchronously and copies only a partial packet's tail.
    this.socket = connect({
      port,
      host: HOST,
      noDelay: true,
      onread: {
        buffer: READ_BUFFER,
        callback: (n) => {
          this.push(READ_BUFFER.subarray(0, n));
          return true;
        },
      },
    });
    this.socket.once('connect', onConnect);
    this.socket.once('error', onError);
    this.socket.on('error', () => undefined);
    this.socket.on('close', () => (this.closed = true));
  }

  static open(port: number, timeoutMs = 10_000): Promise<Client> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        c.socket.destroy();
        reject(new Error(`connect to ${HOST}:${port} timed out`));
      }, timeoutMs);
      const c: Client = new Client(
        port,
        () => {
          clearTimeout(timer);
          resolve(c);
        },
        (e) => {
          clearTimeout(timer);
          reject(e);
        },
      );
    });
  }

  private push(chunk: Buffer): void {
    let buf = chunk;
    if (this.tail) {
      buf = Buffer.concat([this.tail, chunk]);
      this.tail = null;
    }
    const n = buf.length;
    let pos = 0;
    while (n - pos >= 2) {
      let len = 0;
      let mul = 1;
      let i = pos + 1;
      let complete = false;
      while (i < n && i < pos + 5) {
        const b = buf[i++];
        len += (b & 0x7f) * mul;
        mul *= 128;
        if ((b & 0x80) === 0) {
          complete = true;
          break;
        }
      }
      if (!complete) {
        if (i >= pos + 5) {
          this.socket.destroy(new Error('malformed remaining length from broker'));
          return;
        }
        break;
      }
      if (n - i < len) break;
      this.handle(buf[pos], buf, i, i + len);
      pos = i + len;
    }
    if (pos < n) this.tail = Buffer.from(buf.subarray(pos));
    this.afterChunk?.();
  }

  /** Sends `frame` and waits for the first packet of `type`; `check` validates it. */
  request(frame: Buffer, type: number, what: string, check: (buf: Buffer, start: number, end: number) => string | null, timeoutMs = 15_000): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => fail(new Error(`timed out waiting for ${what}`)), timeoutMs);
      const onClose = () => fail(new Error(`connection closed while waiting for ${what}`));
      const fail = (e: Error) => {
        clearTimeout(timer);
        this.socket.removeListener('close', onClose);
        this.handle = () => undefined;
        reject(e);
      };
      this.socket.once('close', onClose);
      this.handle = (first, buf, start, end) => {
        if (first >> 4 !== type) return;
        clearTimeout(timer);
        this.socket.removeListener('close', onClose);
        this.handle = () => undefined;
        const problem = check(buf, start, end);
        if (problem) reject(new Error(`${what}: ${problem}`));
        else resolve();
      };
      this.socket.write(frame);
    });
  }

  close(): void {
    if (!this.closed) this.socket.end(DISCONNECT);
    setTimeout(() => this.socket.destroy(), 2000).unref();
  }
}

export async function mqttConnect(port: number, clientId: string, keepAliveS = 60): Promise<Client> {
  const c = await Client.open(port);
  try {
    await c.request(connectFrame(clientId, keepAliveS), 2, `CONNACK for ${clientId}`, (b, s) => (b[s + 1] === 0 ? null : `return code ${b[s + 1]}`));
  } catch (e) {
    c.socket.destroy();
    throw e;
  }
  return c;
}

export function mqttSubscribe(c: Client, filter: string, qos: number): Promise<void> {
  return c.request(subscribeFrame(filter, qos), 9, `SUBACK for ${filter}`, (b, s, e) => (e - s >= 3 && b[s + 2] !== 0x80 ? null : 'subscription refused'));
}

// ------------------------------------------------------------------ load runs

export interface MqttLoadOptions {
  publishers: number;
  pubQos: 0 | 1;
  subscribers: number;
  subQos: 0 | 1;
  /** Subscribers form one shared group `$share/g/bench/#` instead of each subscribing `bench/#`. */
  shared: boolean;
  payloadBytes: number;
  /** QoS 1: unacknowledged PUBLISHes per publisher. */
  window: number;
  /** End-to-end: messages a publisher may be ahead of its subscribers. */
  ahead: number;
  warmupS: number;
  seconds: number;
}

export interface MqttLoadResult {
  /** Deliveries counted at the subscribers per second of the measured interval. */
  deliveriesPerSec: number;
  /** PUBLISHes written by the publishers per second of the measured interval. */
  publishesPerSec: number;
  seconds: number;
  /** Whole run (warm-up, measurement and drain): messages published, deliveries expected and received. */
  published: number;
  expected: number;
  delivered: number;
  /** Share of the expected deliveries that never arrived (dropped by the broker). */
  lostPct: number;
  /** Deliveries older than one the same subscriber already had from that publisher (duplicate or reordered). */
  outOfOrder: number;
  /** Deliveries in the measured interval of the least and the most served subscriber. */
  perSubscriberMin: number;
  perSubscriberMax: number;
  /** Connections the broker closed during the run. */
  disconnects: number;
  /** Of the lost deliveries: those after the last one each subscriber got from each publisher (never sent on). */
  tailMissing: number;
  /** QoS 1: PUBLISHes the broker never acknowledged to the publishers. */
  unackedAtEnd: number;
  /** Shared group: messages delivered to no member / to more than one member; members that got any. */
  shared?: { missing: number; duplicated: number; membersServed: number; exactlyOnce: boolean };
}

const BLOCK = 64;

export async function runMqttLoad(port: number, o: MqttLoadOptions): Promise<MqttLoadResult> {
  const tag = `${process.pid}-${Date.now().toString(36)}`;
  const P = o.publishers;
  const S = o.subscribers;
  const filter = o.shared ? '$share/g/bench/#' : 'bench/#';
  const clients: Client[] = [];
  let running = false;
  let disconnects = 0;
  let pubs: { pump(): void; seq: number; acked: number; inflight: number }[] = [];
  const watch = (c: Client) => {
    clients.push(c);
    c.socket.on('close', () => {
      if (running) disconnects++;
    });
    return c;
  };

  try {
    // ---- subscribers
    let delivered = 0;
    let outOfOrder = 0;
    const perSub = new Float64Array(S);
    /** next[s * P + p]: one past the highest sequence number subscriber s has seen from publisher p. */
    const next = new Uint32Array(S * P);
    const groupCount = new Float64Array(P);
    /** Shared group: deliveries per (publisher, sequence number), grown on demand. */
    const seen: Uint8Array[] = Array.from({ length: P }, () => new Uint8Array(o.shared ? 1 << 16 : 0));
    let progressDirty = false;
    await mapLimit(S, 100, async (s) => {
      const c = watch(await mqttConnect(port, `bsub-${tag}-${s}`));
      await mqttSubscribe(c, filter, o.subQos);
      const acks: number[] = [];
      c.handle = (first, buf, start) => {
        if (first >> 4 !== 3) return;
        let p = start + 2 + buf.readUInt16BE(start);
        if (first & 0x06) {
          acks.push(buf.readUInt16BE(p));
          p += 2;
        }
        const pub = buf.readUInt32BE(p);
        const seq = buf.readUInt32BE(p + 4);
        if (pub >= P) return;
        delivered++;
        perSub[s]++;
        const k = s * P + pub;
        if (seq >= next[k]) next[k] = seq + 1;
        else outOfOrder++;
        if (o.shared) {
          groupCount[pub]++;
          let arr = seen[pub];
          if (seq >= arr.length) {
            let size = arr.length;
            while (seq >= size) size *= 2;
            const grown = new Uint8Array(size);
            grown.set(arr);
            seen[pub] = arr = grown;
          }
          if (arr[seq] < 255) arr[seq]++;
        }
      };
      c.afterChunk = () => {
        if (acks.length > 0) {
          const b = Buffer.allocUnsafe(4 * acks.length);
          for (let i = 0; i < acks.length; i++) {
            b[4 * i] = 0x40;
            b[4 * i + 1] = 0x02;
            b.writeUInt16BE(acks[i], 4 * i + 2);
          }
          acks.length = 0;
          c.socket.write(b);
        }
        if (!progressDirty) {
          progressDirty = true;
          setImmediate(recomputeProgress);
        }
      };
      return c;
    });

    // ---- publishers
    let published = 0;
    const progress = new Float64Array(P);
    const recomputeProgress = () => {
      progressDirty = false;
      for (let p = 0; p < P; p++) {
        if (o.shared) progress[p] = groupCount[p];
        else {
          let m = Infinity;
          for (let s = 0; s < S; s++) if (next[s * P + p] < m) m = next[s * P + p];
          progress[p] = m;
        }
      }
      for (const pub of pubs) pub.pump();
    };

    class Publisher {
      seq = 0;
      inflight = 0;
      acked = 0;
      private nextId = 1;
      private readonly used = new Uint8Array(65536);
      private waitingDrain = false;
      constructor(
        readonly index: number,
        readonly client: Client,
        readonly tpl: PublishTemplate,
      ) {
        client.handle = (first, buf, start) => {
          if (first >> 4 !== 4) return;
          const id = buf.readUInt16BE(start);
          if (this.used[id]) {
            this.used[id] = 0;
            this.inflight--;
            this.acked++;
          }
        };
        client.afterChunk = () => this.pump();
      }

      private build(n: number): Buffer {
        const f = this.tpl.frame;
        const F = f.length;
        const out = Buffer.allocUnsafe(n * F);
        for (let k = 0; k < n; k++) {
          const at = k * F;
          f.copy(out, at);
          out.writeUInt32BE(this.seq++, at + this.tpl.payloadAt + 4);
          if (this.tpl.idAt >= 0) {
            let id: number;
            do {
              id = this.nextId;
              this.nextId = id === 65535 ? 1 : id + 1;
            } while (this.used[id]);
            this.used[id] = 1;
            this.inflight++;
            out.writeUInt16BE(id, at + this.tpl.idAt);
          }
        }
        return out;
      }

      pump(): void {
        while (running && !this.waitingDrain && !this.client.closed) {
          let allowed = o.ahead - (this.seq - progress[this.index]);
          if (o.pubQos === 1) allowed = Math.min(allowed, o.window - this.inflight);
          if (allowed <= 0) return;
          const n = Math.min(allowed, BLOCK);
          published += n;
          if (!this.client.socket.write(this.build(n))) {
            this.waitingDrain = true;
            this.client.socket.once('drain', () => {
              this.waitingDrain = false;
              this.pump();
            });
            return;
          }
        }
      }
    }

    pubs = await mapLimit(P, 50, async (i) => {
      const c = watch(await mqttConnect(port, `bpub-${tag}-${i}`));
      return new Publisher(i, c, publishTemplate(`bench/p${i}`, i, o.payloadBytes, o.pubQos));
    });

    // ---- run: warm-up, then the measured interval
    running = true;
    for (const p of pubs) p.pump();
    await sleep(o.warmupS * 1000);
    const d0 = delivered;
    const p0 = published;
    const sub0 = Float64Array.from(perSub);
    const t0 = nowS();
    await sleep(o.seconds * 1000);
    const t1 = nowS();
    const d1 = delivered;
    const p1 = published;
    const sub1 = Float64Array.from(perSub);
    running = false;
    // Drain: whatever is still on its way arrives (or is known lost) before the totals are taken.
    await settle(() => delivered + pubs.reduce((a, p) => a + p.acked, 0), 300, 5000);

    const seconds = t1 - t0;
    const expected = o.shared ? published : published * S;
    let perMin = Infinity;
    let perMax = 0;
    for (let s = 0; s < S; s++) {
      const d = sub1[s] - sub0[s];
      perMin = Math.min(perMin, d);
      perMax = Math.max(perMax, d);
    }
    const result: MqttLoadResult = {
      deliveriesPerSec: (d1 - d0) / seconds,
      publishesPerSec: (p1 - p0) / seconds,
      seconds,
      published,
      expected,
      delivered,
      lostPct: expected > 0 ? (100 * Math.max(0, expected - delivered)) / expected : 0,
      outOfOrder,
      perSubscriberMin: perMin,
      perSubscriberMax: perMax,
      disconnects,
      tailMissing: 0,
      unackedAtEnd: pubs.reduce((a, p) => a + p.inflight, 0),
    };
    if (!o.shared) {
      for (let p = 0; p < P; p++) for (let s = 0; s < S; s++) result.tailMissing += pubs[p].seq - next[s * P + p];
    }
    if (o.shared) {
      let missing = 0;
      let duplicated = 0;
      for (let p = 0; p < P; p++) {
        const arr = seen[p];
        const n = pubs[p].seq;
        for (let q = 0; q < n; q++) {
          const v = q < arr.length ? arr[q] : 0;
          if (v === 0) missing++;
          else if (v > 1) duplicated++;
        }
      }
      let served = 0;
      for (let s = 0; s < S; s++) if (perSub[s] > 0) served++;
      result.shared = { missing, duplicated, membersServed: served, exactlyOnce: missing === 0 && duplicated === 0 };
    }
    return result;
  } finally {
    running = false;
    for (const c of clients) c.close();
    await sleep(200);
  }
}
