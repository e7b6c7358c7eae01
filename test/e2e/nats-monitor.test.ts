/**
 * The NATS monitoring port (--nats-monitor-port): nats-server's /varz, /connz, /subsz, /jsz, /healthz read with
 * plain fetch while nats.js clients (subscriptions, a queue group, publishes with and without headers, a JetStream
 * stream and consumer) use the broker; the counters must be the traffic the clients made. Then the same clients
 * against Debian's nats-server 2.9.10 with `-m`, side by side: every key FlowMQ answers must be one nats-server
 * answers, with the same JSON type, and the keys FlowMQ leaves out are exactly the ones docs/nats.md lists.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AckPolicy, connect, headers as natsHeaders, type NatsConnection, type Subscription } from 'nats';
import { loadConfig } from '../../src/config/index.js';
import { eventually, FlowmqProcess, freePort } from './harness.js';

type J = Record<string, unknown>;
const PASSWORD = 'never-shown-pw-5f1c';

async function get(base: string, path: string): Promise<{ status: number; text: string; json: J }> {
  const res = await fetch(`${base}${path}`);
  const text = await res.text();
  let json: J = {};
  try {
    json = JSON.parse(text) as J;
  } catch {
    // an error text
  }
  return { status: res.status, text, json };
}

/** A subscription that stays open (leaving a for-await loop would unsubscribe) and resolves `got` after n messages. */
function counting(nc: NatsConnection, subject: string, n: number, queue?: string): { sub: Subscription; got: Promise<void> } {
  let seen = 0;
  let done: () => void = () => undefined;
  const got = new Promise<void>((r) => (done = r));
  const sub = nc.subscribe(subject, {
    ...(queue === undefined ? {} : { queue }),
    callback: () => {
      if (++seen === n) done();
    },
  });
  return { sub, got };
}

/**
 * The clients of both runs: alpha (user alice) subscribes to `mon.a.*` and to `mon.q` in queue group g; beta publishes
 * three 10-byte messages and one with a header block to mon.a.x; gamma publishes seven 5-byte messages to mon.q.
 */
async function scenario(port: number): Promise<{ alpha: NatsConnection; beta: NatsConnection; gamma: NatsConnection; close: () => Promise<void> }> {
  const alpha = await connect({ port, name: 'alpha', user: 'alice', pass: PASSWORD });
  const beta = await connect({ port, name: 'beta' });
  const gamma = await connect({ port, name: 'gamma' });
  const { got: gotA } = counting(alpha, 'mon.a.*', 4);
  const { got: gotQ } = counting(alpha, 'mon.q', 7, 'g');
  await alpha.flush();
  for (let i = 0; i < 3; i++) beta.publish('mon.a.x', Buffer.from('0123456789'));
  const h = natsHeaders();
  h.set('X-Test', '1');
  beta.publish('mon.a.x', Buffer.from('0123456789'), { headers: h });
  for (let i = 0; i < 7; i++) gamma.publish('mon.q', Buffer.from('abcde'));
  await Promise.all([beta.flush(), gamma.flush()]);
  await Promise.all([gotA, gotQ]);
  return {
    alpha,
    beta,
    gamma,
    close: async () => {
      await Promise.allSettled([alpha.close(), beta.close(), gamma.close()]);
    },
  };
}

/** Makes a stream MON with two messages and a durable consumer C1 (the JetStream part of both runs). */
async function jetstreamScenario(port: number): Promise<void> {
  const nc = await connect({ port, name: 'js-admin' });
  try {
    const jsm = await nc.jetstreamManager();
    await jsm.streams.add({ name: 'MON', subjects: ['monjs.>'] });
    const js = nc.jetstream();
    await js.publish('monjs.1', Buffer.from('x'));
    await js.publish('monjs.2', Buffer.from('yy'));
    await jsm.consumers.add('MON', { durable_name: 'C1', ack_policy: AckPolicy.Explicit });
  } finally {
    await nc.close();
  }
}

function kind(v: unknown): string {
  return v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v;
}

/** The union of two JSON values of one shape: objects merged key by key (recursively), arrays concatenated. */
function merge(a: unknown, b: unknown): unknown {
  if (kind(a) === 'object' && kind(b) === 'object') {
    const out: J = { ...(a as J) };
    for (const [k, v] of Object.entries(b as J)) out[k] = k in out ? merge(out[k], v) : v;
    return out;
  }
  if (Array.isArray(a) && Array.isArray(b)) return [...(a as unknown[]), ...(b as unknown[])];
  return a;
}

/**
 * Compares FlowMQ's JSON with nats-server's: returns keys FlowMQ has that nats-server has not or with another type
 * (`extra`), and keys nats-server has that FlowMQ left out (`missing`), as dotted paths (`[]` for array elements,
 * compared against the union of nats-server's elements).
 */
function compareShapes(ours: unknown, theirs: unknown, path: string, out: { extra: string[]; missing: string[] }): void {
  if (kind(ours) !== kind(theirs)) {
    out.extra.push(`${path}: ${kind(ours)} where nats-server has ${kind(theirs)}`);
    return;
  }
  // A map whose keys are the paths asked so far: its entries differ by what each server was asked.
  if (path === '.http_req_stats') return;
  if (Array.isArray(ours) && Array.isArray(theirs)) {
    if (ours.length === 0 || theirs.length === 0) return;
    // Elements differ (one connection has subscriptions, another none): compare the union of each side's elements.
    compareShapes(ours.reduce(merge), theirs.reduce(merge), `${path}[]`, out);
    return;
  }
  if (kind(ours) === 'object') {
    const o = ours as J;
    const t = theirs as J;
    for (const k of Object.keys(o)) {
      if (!(k in t)) out.extra.push(`${path}.${k}`);
      else compareShapes(o[k], t[k], `${path}.${k}`, out);
    }
    for (const k of Object.keys(t)) if (!(k in o)) out.missing.push(`${path}.${k}`);
  }
}

describe('NATS monitoring port', () => {
  it('is off unless --nats-monitor-port is given', () => {
    const c = loadConfig({ flags: {}, env: {} });
    assert.equal(c.natsMonitorPort, null);
    assert.deepEqual(c.natsMonitorAllow, []);
  });

  describe('FlowMQ with nats.js clients', () => {
    let broker: FlowmqProcess;
    let base: string;
    let run: Awaited<ReturnType<typeof scenario>>;
    const texts: string[] = [];
    const read = async (path: string) => {
      const r = await get(base, path);
      texts.push(r.text);
      return r;
    };

    before(async () => {
      broker = await FlowmqProcess.start({ args: ['--nats-monitor-port', '0'] });
      base = `http://127.0.0.1:${broker.ports['nats-monitor']}`;
      // alice is a directory user (the first one: an administrator, so her publishes and subscriptions pass).
      await broker.api('POST', '/api/v1/users', { username: 'alice', password: PASSWORD, groups: ['admins'] });
    });
    after(async () => {
      await run?.close();
      await broker.stop();
    });

    it('/varz counts the messages and bytes the clients sent and received', async () => {
      const v0 = (await read('/varz')).json;
      run = await scenario(broker.natsPort);
      const v = (await read('/varz')).json;
      assert.equal(v.server_id, run.alpha.info!.server_id);
      assert.equal(v.version, '2.9.10');
      assert.equal(v.port, broker.natsPort);
      assert.equal(v.http_port, broker.ports['nats-monitor']);
      assert.equal(v.connections, 3);
      assert.equal(Number(v.total_connections) - Number(v0.total_connections), 3);
      assert.equal(Number(v.in_msgs) - Number(v0.in_msgs), 11);
      assert.equal(Number(v.out_msgs) - Number(v0.out_msgs), 11);
      // Headers count as nats-server counts them: `NATS/1.0\r\nX-Test: 1\r\n\r\n` is 23 bytes.
      const bytes = 4 * 10 + 23 + 7 * 5;
      assert.equal(Number(v.in_bytes) - Number(v0.in_bytes), bytes);
      assert.equal(Number(v.out_bytes) - Number(v0.out_bytes), bytes);
      assert.equal(v.subscriptions, 2);
      assert.equal(v.max_payload, 1024 * 1024);
      assert.equal(typeof v.mem, 'number');
      assert.ok(Number(v.mem) > 0 && Number(v.cores) > 0);
      assert.match(String(v.uptime), /^\d+s$/);
      assert.deepEqual((v.http_req_stats as J)['/varz'], 2);
    });

    it('/connz lists the connections with their own counters, sorted, paged and with subscriptions', async () => {
      const c = (await read('/connz')).json;
      assert.equal(c.total, 3);
      assert.equal(c.limit, 1024);
      const conns = c.connections as J[];
      assert.deepEqual(
        conns.map((x) => x.name),
        ['alpha', 'beta', 'gamma'],
        'by cid',
      );
      const [alpha, beta, gamma] = conns as [J, J, J];
      assert.deepEqual([alpha.in_msgs, alpha.out_msgs, alpha.subscriptions], [0, 11, 2]);
      assert.deepEqual([beta.in_msgs, beta.in_bytes, beta.out_msgs], [4, 63, 0]);
      assert.deepEqual([gamma.in_msgs, gamma.in_bytes], [7, 35]);
      assert.equal(alpha.lang, 'nats.js');
      assert.equal(typeof alpha.version, 'string');
      assert.equal(alpha.ip, '127.0.0.1');
      assert.equal(alpha.authorized_user, undefined, 'the user only with auth=1');
      assert.equal(alpha.subscriptions_list, undefined, 'subscriptions only with subs=1');

      const byFrom = (await read('/connz?sort=msgs_from')).json.connections as J[];
      assert.deepEqual(
        byFrom.map((x) => x.name),
        ['gamma', 'beta', 'alpha'],
      );
      const byTo = (await read('/connz?sort=msgs_to')).json.connections as J[];
      assert.equal(byTo[0]!.name, 'alpha');
      const bySubs = (await read('/connz?sort=subs&limit=1')).json;
      assert.deepEqual(
        (bySubs.connections as J[]).map((x) => x.name),
        ['alpha'],
      );

      const page = (await read('/connz?limit=1&offset=1')).json;
      assert.deepEqual([page.total, page.offset, page.limit, page.num_connections], [3, 1, 1, 1]);
      assert.equal((page.connections as J[])[0]!.name, 'beta');
      const past = (await read('/connz?offset=5')).json;
      assert.deepEqual([past.total, past.num_connections], [3, 0]);
      assert.deepEqual(past.connections, []);

      const capped = (await read('/connz?limit=100000')).json;
      assert.equal(capped.limit, 1024, 'limit capped');

      const subs = (await read('/connz?subs=1')).json.connections as J[];
      assert.deepEqual((subs[0]!.subscriptions_list as string[]).sort(), ['mon.a.*', 'mon.q']);
      const detail = (await read('/connz?subs=detail')).json.connections as J[];
      const d = (detail[0]!.subscriptions_list_detail as J[]).sort((x, y) => String(x.subject).localeCompare(String(y.subject)));
      assert.deepEqual(
        d.map((x) => [x.subject, x.qgroup, x.msgs, x.cid]),
        [
          ['mon.a.*', undefined, 4, alpha.cid],
          ['mon.q', 'g', 7, alpha.cid],
        ],
      );

      const auth = (await read('/connz?auth=1')).json.connections as J[];
      assert.equal(auth[0]!.authorized_user, 'alice');
      assert.equal(auth[1]!.authorized_user, undefined, 'anonymous clients have none');

      const one = (await read(`/connz?cid=${String(gamma.cid)}`)).json;
      assert.deepEqual(
        (one.connections as J[]).map((x) => x.name),
        ['gamma'],
      );

      // A round trip is measured by a PING the first /connz sent: a later answer has it.
      await eventually(async () => ((await read('/connz')).json.connections as J[]).every((x) => x.rtt !== '0s'), 5000, 'rtt measured');

      const bad = await read('/connz?sort=bogus');
      assert.deepEqual([bad.status, bad.text], [400, 'invalid sorting option: bogus']);
      const badLimit = await read('/connz?limit=ten');
      assert.equal(badLimit.status, 400);
      assert.equal(badLimit.text, `Error decoding int for 'limit': strconv.Atoi: parsing "ten": invalid syntax`);
      const stop = await read('/connz?sort=stop');
      assert.deepEqual([stop.status, stop.text], [400, 'sort by stop only valid on closed connections']);
    });

    it('/subsz counts subscriptions, lists them and filters by a test subject', async () => {
      const s = (await read('/subsz')).json;
      assert.equal(s.num_subscriptions, 2);
      assert.ok(Number(s.num_inserts) >= 2);
      assert.ok(Number(s.num_matches) >= 11);
      assert.equal(s.server_id, undefined, 'the stats alone without subs=1, as nats-server answers');
      const list = (await read('/subsz?subs=1')).json;
      assert.equal(list.total, 2);
      assert.deepEqual((list.subscriptions_list as J[]).map((x) => x.subject).sort(), ['mon.a.*', 'mon.q']);
      const test = (await read('/subsz?subs=1&test=mon.a.zz')).json;
      assert.deepEqual(
        (test.subscriptions_list as J[]).map((x) => [x.account, x.subject, x.msgs]),
        [['$G', 'mon.a.*', 4]],
      );
      const bad = await read('/subsz?subs=1&test=mon.*');
      assert.deepEqual([bad.status, bad.text], [400, 'invalid test subject, must be valid publish subject: mon.*']);
    });

    it('/healthz answers ok, with the JetStream options too', async () => {
      for (const q of ['', '?js-enabled-only=true', '?js-server-only=1', '?js-enabled=true']) {
        const h = await read(`/healthz${q}`);
        assert.deepEqual([h.status, h.text], [200, '{"status":"ok"}'], q);
      }
      assert.equal((await read('/healthz?js-enabled-only=maybe')).status, 400);
    });

    it('/jsz summarises the streams and details them with streams and consumers', async () => {
      const j0 = (await read('/jsz')).json;
      await jetstreamScenario(broker.natsPort);
      const j = (await read('/jsz')).json;
      assert.equal(Number(j.streams) - Number(j0.streams), 1);
      assert.equal(Number(j.consumers) - Number(j0.consumers), 1);
      assert.equal(Number(j.messages) - Number(j0.messages), 2);
      assert.ok(Number((j.api as J).total) >= 3);
      assert.equal(j.account_details, undefined);
      const d = (await read('/jsz?streams=true&consumers=true')).json;
      const acc = (d.account_details as J[])[0]!;
      assert.equal(acc.name, '$G');
      const mon = (acc.stream_detail as J[]).find((s) => s.name === 'MON')!;
      assert.equal((mon.state as J).messages, 2);
      assert.equal((mon.state as J).last_seq, 2);
      assert.equal(mon.config, undefined, 'config only with config=true');
      const c1 = (mon.consumer_detail as J[])[0]!;
      assert.deepEqual([c1.stream_name, c1.name, c1.num_pending, c1.config], ['MON', 'C1', 2, undefined]);
      const withConfig = (await read('/jsz?streams=1&consumers=1&config=1')).json;
      const mon2 = ((withConfig.account_details as J[])[0]!.stream_detail as J[]).find((s) => s.name === 'MON')!;
      assert.deepEqual((mon2.config as J).subjects, ['monjs.>']);
      assert.equal(((mon2.consumer_detail as J[])[0]!.config as J).durable_name, 'C1');
    });

    it('shows no password anywhere, and answers 404 for other paths', async () => {
      const all = [...texts, (await read('/connz?auth=1&subs=detail')).text, (await read('/varz')).text].join('\n');
      assert.ok(!all.includes(PASSWORD), 'the password of alice never appears');
      assert.ok(texts.length > 20);
      assert.equal((await get(base, '/routez')).status, 404);
    });
  });

  it('--nats-monitor-allow refuses other addresses with 403', async () => {
    const broker = await FlowmqProcess.start({ args: ['--nats-monitor-port', '0', '--nats-monitor-allow', '10.9.8.0/24'] });
    try {
      const base = `http://127.0.0.1:${broker.ports['nats-monitor']}`;
      const r = await get(base, '/varz');
      assert.equal(r.status, 403);
      assert.ok(!r.text.includes('server_id'));
      assert.equal((await get(base, '/healthz')).status, 403);
    } finally {
      await broker.stop();
    }
    const open = await FlowmqProcess.start({ args: ['--nats-monitor-port', '0', '--nats-monitor-allow', '127.0.0.1'] });
    try {
      assert.equal((await get(`http://127.0.0.1:${open.ports['nats-monitor']}`, '/healthz')).status, 200);
    } finally {
      await open.stop();
    }
  });

  describe('beside nats-server 2.9.10 (Debian package) with the same clients', () => {
    let broker: FlowmqProcess;
    let server: ChildProcess;
    let ours: string;
    let theirs: string;
    const runs: Array<Awaited<ReturnType<typeof scenario>>> = [];

    before(async () => {
      broker = await FlowmqProcess.start({ args: ['--nats-monitor-port', '0'] });
      ours = `http://127.0.0.1:${broker.ports['nats-monitor']}`;
      const [port, mport] = [await freePort(), await freePort()];
      const dir = mkdtempSync(join(tmpdir(), 'nats-server-mon-'));
      // FlowMQ's default subscription limit, so that both answer max_subscriptions (nats-server leaves out a 0).
      const conf = join(dir, 'nats.conf');
      writeFileSync(
        conf,
        `listen: "127.0.0.1:${port}"\nhttp: "127.0.0.1:${mport}"\nmax_subscriptions: 100000\njetstream { store_dir: "${join(dir, 'js')}" }\n`,
      );
      server = spawn('nats-server', ['-c', conf], { stdio: 'ignore' });
      theirs = `http://127.0.0.1:${mport}`;
      await eventually(
        async () => {
          try {
            return (await fetch(`${theirs}/healthz`)).ok;
          } catch {
            return false;
          }
        },
        10_000,
        'nats-server up',
      );
      runs.push(await scenario(broker.natsPort), await scenario(port));
      await jetstreamScenario(broker.natsPort);
      await jetstreamScenario(port);
    });
    after(async () => {
      await Promise.allSettled(runs.map((r) => r.close()));
      server?.kill('SIGTERM');
      await broker.stop();
    });

    /**
     * The keys of nats-server's answers FlowMQ leaves out (docs/nats.md, "Monitoring port" lists them): Go runtime
     * figures, the system account, JetStream's store directory and streams' cluster info.
     */
    const LEFT_OUT: Record<string, string[]> = {
      '/varz': ['.go', '.gomaxprocs', '.system_account', '.jetstream.config.store_dir'],
      '/connz?subs=1': [],
      '/connz?subs=detail&sort=msgs_from': [],
      '/subsz?subs=1': [],
      '/jsz?streams=1&consumers=1&config=1': ['.config.store_dir', '.account_details[].stream_detail[].cluster'],
      '/healthz': [],
    };

    for (const [path, leftOut] of Object.entries(LEFT_OUT)) {
      it(`${path}: FlowMQ's keys are nats-server's, with the same types`, async () => {
        const [a, b] = [await get(ours, path), await get(theirs, path)];
        assert.equal(a.status, 200);
        assert.equal(b.status, 200);
        if (process.env.MONITOR_DEBUG) console.log(path, a.text, b.text);
        const out = { extra: [] as string[], missing: [] as string[] };
        compareShapes(a.json, b.json, '', out);
        assert.deepEqual(out.extra, [], `keys FlowMQ answers that nats-server does not (or with another type) on ${path}`);
        assert.deepEqual([...new Set(out.missing)].sort(), [...leftOut].sort(), `keys nats-server answers that FlowMQ leaves out on ${path}`);
      });
    }

    it('counts the same messages and bytes per connection as nats-server', async () => {
      const pick = (j: J) =>
        (j.connections as J[])
          .filter((c) => ['alpha', 'beta', 'gamma'].includes(String(c.name)))
          .map((c) => [c.name, c.in_msgs, c.in_bytes, c.out_msgs, c.out_bytes, c.subscriptions]);
      const [a, b] = [(await get(ours, '/connz')).json, (await get(theirs, '/connz')).json];
      assert.deepEqual(pick(a), pick(b));
    });
  });
});
