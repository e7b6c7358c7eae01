/**
 * A wrong-password flood on raw sockets, and an authenticated Kafka producer to measure beside it.
 *
 * The flood opens `sockets` connections, each from one of `localAddresses` (loopback aliases: 127.0.0.0/8 is all
 * local on Linux, so an attacker with many addresses can be played on one machine), and on each sends one login with
 * a wrong password: an MQTT 3.1.1 CONNECT, or Kafka SaslHandshake v1 + SaslAuthenticate v0 with a PLAIN token.
 * When it is answered (or the connection closes) the socket is replaced by a new one that tries again, as a
 * brute-forcer does, paced to at most `ratePerSec` attempts a second over all sockets (0: as fast as answered).
 * After a 'busy' answer or a bare close a socket waits `busyPauseMs` first, as a client's reconnect backoff would.
 *
 * `SaslProducer` authenticates one Kafka connection with SASL PLAIN by hand and then produces one small batch at a
 * time with acks=all at a fixed rate, recording each produce → ack latency.
 */
import { connect, type Socket } from 'node:net';
import { encodeBatch } from '../src/core/record-batch.js';
import { frame, kstr, KafkaConn, produceError, produceHead } from './kafka.js';
import { HOST, nowS, percentiles, sleep, type Percentiles } from './util.js';
import { mqttString, packet } from './mqtt.js';

export type FloodOutcome = 'refused' | 'busy' | 'closed' | 'accepted' | 'error';

export interface FloodOptions {
  port: number;
  protocol: 'mqtt' | 'kafka';
  sockets: number;
  localAddresses: readonly string[];
  username: string;
  password: string;
  /** Attempts a second over all sockets; 0: each socket tries again as soon as it is answered. */
  ratePerSec: number;
  busyPauseMs?: number;
  /** The flood stops by itself after this many 'refused' answers (checked and found wrong). Default: never. */
  refusedBudget?: number;
}

/** MQTT 3.1.1 CONNECT with clean session, username and password (section 3.1). */
export function mqttConnectPacket(clientId: string, username: string, password: string): Buffer {
  const variable = Buffer.concat([mqttString('MQTT'), Buffer.from([4, 0xc2, 0, 60])]);
  return packet(0x10, Buffer.concat([variable, mqttString(clientId), mqttString(username), mqttString(password)]));
}

/** SaslHandshake v1 (KIP-152): picks the mechanism; the token follows in SaslAuthenticate. */
export function saslHandshakeRequest(corr: number, mechanism: string): Buffer {
  return frame(17, 1, corr, [kstr(mechanism)]);
}

/** SaslAuthenticate v0: the mechanism's token as BYTES. */
export function saslAuthenticateRequest(corr: number, token: Buffer): Buffer {
  const len = Buffer.alloc(4);
  len.writeInt32BE(token.length, 0);
  return frame(36, 0, corr, [len, token]);
}

/** RFC 4616 PLAIN token: empty authzid, NUL, username, NUL, password. */
export function plainToken(username: string, password: string): Buffer {
  return Buffer.from(`\0${username}\0${password}`, 'utf8');
}

/** The error code of a SaslHandshake or SaslAuthenticate response body (after the correlation id). */
function errorCodeOf(body: Buffer): number {
  return body.length >= 2 ? body.readInt16BE(0) : -1;
}

export class AuthFlood {
  readonly stats = { sent: 0, answered: 0, refused: 0, busy: 0, closed: 0, accepted: 0, error: 0 };
  /** Set once the refused budget is used up (the flood then stops by itself). */
  done = false;
  private stopped = false;
  private nextAt = 0;
  private readonly open = new Set<Socket>();
  private workers: Promise<void>[] = [];
  private seq = 0;

  constructor(private readonly o: FloodOptions) {}

  start(): void {
    this.nextAt = performance.now();
    this.workers = Array.from({ length: this.o.sockets }, (_, i) => this.worker(this.o.localAddresses[i % this.o.localAddresses.length]));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const s of this.open) s.destroy();
    await Promise.all(this.workers);
  }

  private async worker(localAddress: string): Promise<void> {
    while (!this.stopped) {
      if (this.o.ratePerSec > 0) {
        const at = this.nextAt;
        this.nextAt = Math.max(this.nextAt, performance.now()) + 1000 / this.o.ratePerSec;
        const wait = at - performance.now();
        if (wait > 0) await sleep(wait);
        if (this.stopped) return;
      }
      const outcome = await this.attempt(localAddress);
      if (this.stopped) return;
      this.stats.answered++;
      this.stats[outcome]++;
      if (this.o.refusedBudget !== undefined && this.stats.refused >= this.o.refusedBudget) {
        this.done = true;
        this.stopped = true;
        for (const s of this.open) s.destroy();
        return;
      }
      if (outcome !== 'refused') await sleep(this.o.busyPauseMs ?? 200);
    }
  }

  private attempt(localAddress: string): Promise<FloodOutcome> {
    return new Promise((resolve) => {
      const s = connect({ host: HOST, port: this.o.port, localAddress, noDelay: true });
      this.open.add(s);
      let settled = false;
      const finish = (r: FloodOutcome) => {
        if (settled) return;
        settled = true;
        this.open.delete(s);
        s.destroy();
        resolve(r);
      };
      let buf = Buffer.alloc(0);
      s.on('error', () => finish(this.stats.sent > 0 ? 'closed' : 'error'));
      s.on('close', () => finish('closed'));
      s.on('connect', () => {
        this.stats.sent++;
        if (this.o.protocol === 'mqtt') {
          s.write(mqttConnectPacket(`flood-${this.seq++}`, this.o.username, this.o.password));
        } else {
          s.write(saslHandshakeRequest(1, 'PLAIN'));
        }
      });
      s.on('data', (d: Buffer) => {
        buf = Buffer.concat([buf, d]);
        if (this.o.protocol === 'mqtt') {
          if (buf.length < 4) return;
          if (buf[0] !== 0x20) return finish('error');
          const rc = buf[3];
          // 3.1.1 return codes: 0 accepted, 3 server unavailable, 4 bad username or password, 5 not authorized.
          return finish(rc === 0 ? 'accepted' : rc === 3 ? 'busy' : 'refused');
        }
        while (buf.length >= 4 && buf.length >= 4 + buf.readInt32BE(0)) {
          const size = buf.readInt32BE(0);
          const corr = buf.readInt32BE(4);
          const body = buf.subarray(8, 4 + size);
          buf = buf.subarray(4 + size);
          if (corr === 1) {
            if (errorCodeOf(body) !== 0) return finish('error');
            s.write(saslAuthenticateRequest(2, plainToken(this.o.username, this.o.password)));
          } else {
            const code = errorCodeOf(body);
            // 58 SASL_AUTHENTICATION_FAILED; FlowMQ closes without an answer when busy ('closed').
            return finish(code === 0 ? 'accepted' : code === 58 ? 'refused' : 'error');
          }
        }
      });
    });
  }
}

/** One Kafka connection authenticated with SASL PLAIN, producing one small batch at a time with acks=all. */
export class SaslProducer {
  private constructor(private readonly conn: KafkaConn) {}

  static async open(port: number, username: string, password: string): Promise<SaslProducer> {
    const socket = await new Promise<Socket>((resolve, reject) => {
      const s = connect({ host: HOST, port, noDelay: true });
      s.once('connect', () => resolve(s));
      s.once('error', reject);
    });
    const conn = new KafkaConn(socket);
    const call = (build: (corr: number) => Buffer) =>
      new Promise<Buffer>((resolve) => {
        const corr = conn.nextCorrelationId();
        conn.send(corr, [build(corr)], (body) => resolve(body));
      });
    if (errorCodeOf(await call((c) => saslHandshakeRequest(c, 'PLAIN'))) !== 0) throw new Error('SaslHandshake PLAIN refused');
    const auth = await call((c) => saslAuthenticateRequest(c, plainToken(username, password)));
    if (errorCodeOf(auth) !== 0) throw new Error(`SaslAuthenticate refused (error ${errorCodeOf(auth)})`);
    return new SaslProducer(conn);
  }

  /** Produces `count` batches at `ratePerSec` (one at a time: the next waits for its slot and the previous ack). */
  async run(topic: string, ratePerSec: number, count: number): Promise<{ ack: Percentiles; errors: number; lateStarts: number }> {
    const batch = encodeBatch([{ key: null, value: Buffer.alloc(100, 0x61), headers: [], timestamp: Date.now() }]);
    const lat: number[] = [];
    let errors = 0;
    let lateStarts = 0;
    const t0 = nowS();
    for (let i = 0; i < count; i++) {
      const due = t0 + i / ratePerSec;
      const wait = (due - nowS()) * 1000;
      if (wait > 0) await sleep(wait);
      else if (wait < -1000 / ratePerSec) lateStarts++;
      // Measured from the scheduled instant: a produce that could not start on time because the previous one was
      // still waiting for its ack counts that wait too (open-loop, no coordinated omission).
      const start = Math.min(due, nowS());
      const body = await new Promise<Buffer>((resolve) => {
        const corr = this.conn.nextCorrelationId();
        this.conn.send(corr, [produceHead(topic, 0, batch.length, corr), batch], (b) => resolve(b));
      });
      if (this.conn.error) throw this.conn.error;
      if (produceError(body) !== 0) errors++;
      lat.push((nowS() - start) * 1000);
    }
    return { ack: percentiles(lat), errors, lateStarts };
  }

  close(): void {
    this.conn.close();
  }
}
