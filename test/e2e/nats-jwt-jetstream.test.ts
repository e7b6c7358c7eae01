/**
 * An account JWT's JetStream limits (operator mode), side by side: the same scenario against `bin/flowmq`
 * (--nats-operator, --nats-accounts) and Debian's nats-server 2.9.10 (operator mode, MEMORY resolver, JetStream on),
 * with the same operator, accounts and users made by `@nats-io/jwt`. One account has default-tier limits (4 KiB of
 * file storage, no memory storage, one stream), the other tiered limits (R1: 1 MiB of file storage, two streams).
 * Account info reports them (a tiered account as `tiers.R1` with zero account-wide limits), and stream creation is
 * refused past them with nats-server's errors. Before: FlowMQ did not read an account JWT's JetStream limits at all.
 * The tiered account's streams name num_replicas 1: nats-server 2.9.10 looks a stream without it up as tier R0
 * (10120 `no JetStream default or applicable tiered limit present`), where FlowMQ counts it in R1.
 * A third account's JWT has no JetStream limits: nats-server runs it without JetStream, and so does FlowMQ (its API
 * answers `JetStream not enabled for account`, 10039; before, it had JetStream with its namespace's quotas).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, jwtAuthenticator } from 'nats';
import { createAccount, createOperator, createUser, encodeAccount, encodeOperator, encodeUser } from '@nats-io/jwt';
import { eventually, FlowmqProcess, freePort } from './harness.js';
import { step, type Entry } from './nats-side-by-side.js';

interface Setup {
  operatorJwt: string;
  accounts: Record<string, string>;
  users: { flat: string; tiered: string; plain: string };
}

async function makeSetup(): Promise<Setup> {
  const operator = createOperator();
  const sys = createAccount();
  const flat = createAccount();
  const tiered = createAccount();
  const plain = createAccount();
  const accounts = {
    // nats-server runs JetStream in operator mode with a system account only.
    [sys.getPublicKey()]: await encodeAccount('SYS', sys, { limits: { conn: -1, subs: -1, data: -1, payload: -1 } }, { signer: operator }),
    [flat.getPublicKey()]: await encodeAccount(
      'flat',
      flat,
      { limits: { conn: -1, subs: -1, data: -1, payload: -1, disk_storage: 4096, mem_storage: 0, streams: 1, consumer: 2 } },
      { signer: operator },
    ),
    [tiered.getPublicKey()]: await encodeAccount(
      'tiered',
      tiered,
      { limits: { conn: -1, subs: -1, data: -1, payload: -1, tiered_limits: { R1: { disk_storage: 1024 * 1024, streams: 2, consumer: -1 } } } },
      { signer: operator },
    ),
    [plain.getPublicKey()]: await encodeAccount('plain', plain, { limits: { conn: -1, subs: -1, data: -1, payload: -1 } }, { signer: operator }),
  };
  return {
    operatorJwt: await encodeOperator('jwt-js', operator, { system_account: sys.getPublicKey() }),
    accounts,
    users: {
      flat: await encodeUser('flat-user', createUser(), flat, { bearer_token: true }),
      tiered: await encodeUser('tiered-user', createUser(), tiered, { bearer_token: true }),
      plain: await encodeUser('plain-user', createUser(), plain, { bearer_token: true }),
    },
  };
}

/** A JetStream API error's code and text, or 'ok'. */
async function outcome(fn: () => Promise<unknown>): Promise<unknown> {
  try {
    await fn();
    return 'ok';
  } catch (err) {
    const e = err as { api_error?: { err_code?: number; description?: string }; message?: string };
    return e.api_error !== undefined ? [e.api_error.err_code, e.api_error.description] : String(e.message);
  }
}

async function scenario(url: string, s: Setup): Promise<Entry[]> {
  const out: Entry[] = [];
  const log = (label: string, v: unknown): void => void out.push([label, v]);
  const flat = await connect({ servers: url, reconnect: false, authenticator: jwtAuthenticator(s.users.flat) });
  const tiered = await connect({ servers: url, reconnect: false, authenticator: jwtAuthenticator(s.users.tiered) });
  try {
    const fj = await flat.jetstreamManager();
    const fi = await fj.getAccountInfo();
    log('flat info', { limits: fi.limits, tiers: fi.tiers ?? null });
    log('flat over storage', await outcome(() => fj.streams.add({ name: 'F1', subjects: ['f1.>'], max_bytes: 8192 })));
    log('flat memory', await outcome(() => fj.streams.add({ name: 'F1', subjects: ['f1.>'], max_bytes: 1024, storage: 'memory' as never })));
    log('flat first', await outcome(() => fj.streams.add({ name: 'F1', subjects: ['f1.>'], max_bytes: 1024 })));
    log('flat second', await outcome(() => fj.streams.add({ name: 'F2', subjects: ['f2.>'], max_bytes: 1024 })));

    const tj = await tiered.jetstreamManager();
    const ti = await tj.getAccountInfo();
    log('tiered info', { limits: ti.limits, tiers: ti.tiers ?? null });
    log('tiered first', await outcome(() => tj.streams.add({ name: 'T1', subjects: ['t1.>'], num_replicas: 1 })));
    log('tiered second', await outcome(() => tj.streams.add({ name: 'T2', subjects: ['t2.>'], num_replicas: 1 })));
    log('tiered third', await outcome(() => tj.streams.add({ name: 'T3', subjects: ['t3.>'], num_replicas: 1 })));
    const after = await tj.getAccountInfo();
    log('tiered usage', { streams: after.streams, r1: { streams: after.tiers?.R1?.streams, limits: after.tiers?.R1?.limits.max_streams } });

    const plain = await connect({ servers: url, reconnect: false, authenticator: jwtAuthenticator(s.users.plain) });
    try {
      const api = async (subject: string, body: unknown): Promise<unknown> =>
        JSON.parse(new TextDecoder().decode((await plain.request(subject, JSON.stringify(body), { timeout: 3000 })).data));
      log('plain info', await api('$JS.API.INFO', ''));
      log('plain create', await api('$JS.API.STREAM.CREATE.P1', { name: 'P1', subjects: ['p1.>'] }));
    } finally {
      await plain.close();
    }
  } finally {
    await flat.close();
    await tiered.close();
  }
  return out;
}

describe("e2e: an account JWT's JetStream limits, side by side with nats-server 2.9.10", () => {
  let s: Setup;
  let broker: FlowmqProcess;
  let server: ChildProcess | undefined;
  let ours: Entry[] = [];
  let theirs: Entry[] = [];

  before(async () => {
    s = await makeSetup();
    const dir = mkdtempSync(join(tmpdir(), 'nats-jwt-js-'));
    writeFileSync(join(dir, 'operator.jwt'), s.operatorJwt);
    mkdirSync(join(dir, 'accounts'));
    for (const [pub, jwt] of Object.entries(s.accounts)) writeFileSync(join(dir, 'accounts', `${pub}.jwt`), jwt);
    const preload = Object.entries(s.accounts)
      .map(([pub, jwt]) => `  ${pub}: "${jwt}"`)
      .join('\n');
    const port = await freePort();
    writeFileSync(
      join(dir, 'nats.conf'),
      `listen: "127.0.0.1:${port}"\njetstream { store_dir: "${join(dir, 'js')}" }\noperator: "${join(dir, 'operator.jwt')}"\n` +
        `resolver: MEMORY\nresolver_preload: {\n${preload}\n}\n`,
    );
    server = spawn('nats-server', ['-c', join(dir, 'nats.conf')], { stdio: 'ignore' });
    broker = await FlowmqProcess.start({
      args: ['--allow-anonymous', 'false', '--nats-operator', join(dir, 'operator.jwt'), '--nats-accounts', join(dir, 'accounts')],
    });
    const url = `127.0.0.1:${port}`;
    await eventually(
      async () => {
        try {
          await (await connect({ servers: url, reconnect: false, authenticator: jwtAuthenticator(s.users.flat) })).close();
          return true;
        } catch {
          return false;
        }
      },
      10_000,
      'nats-server up',
    );
    ours = await scenario(broker.natsServer, s);
    theirs = await scenario(url, s);
  });
  after(async () => {
    server?.kill('SIGTERM');
    await broker?.stop();
    broker?.cleanup();
  });

  it('the same transcript on both', () => {
    assert.deepEqual(ours, theirs);
  });

  it('default-tier limits: reported as the account limits, a stream past them refused', () => {
    assert.deepEqual(step(ours, 'flat info'), {
      limits: {
        max_memory: 0,
        max_storage: 4096,
        max_streams: 1,
        max_consumers: 2,
        max_ack_pending: -1,
        memory_max_stream_bytes: -1,
        storage_max_stream_bytes: -1,
        max_bytes_required: false,
      },
      tiers: null,
    });
    assert.deepEqual(step(ours, 'flat over storage'), [10047, 'insufficient storage resources available']);
    assert.deepEqual(step(ours, 'flat first'), 'ok');
    assert.deepEqual(step(ours, 'flat second'), [10027, 'maximum number of streams reached']);
  });

  it('tiered limits: reported under tiers.R1, every stream counted in R1', () => {
    const info = step(ours, 'tiered info') as { limits: Record<string, unknown>; tiers: Record<string, { limits: Record<string, unknown> }> };
    assert.equal(info.limits.max_storage, 0);
    assert.deepEqual(Object.keys(info.tiers), ['R1']);
    assert.equal(info.tiers.R1!.limits.max_storage, 1024 * 1024);
    assert.equal(info.tiers.R1!.limits.max_streams, 2);
    assert.equal(info.tiers.R1!.limits.max_consumers, -1);
    assert.equal(info.tiers.R1!.limits.max_ack_pending, -1);
    assert.deepEqual(
      ['tiered first', 'tiered second', 'tiered third'].map((l) => step(ours, l)),
      ['ok', 'ok', [10027, 'maximum number of streams reached']],
    );
    assert.deepEqual(step(ours, 'tiered usage'), { streams: 2, r1: { streams: 2, limits: 2 } });
  });

  it('an account JWT without JetStream limits has no JetStream: its API answers 10039', () => {
    const off = { code: 503, err_code: 10039, description: 'JetStream not enabled for account' };
    assert.deepEqual(step(ours, 'plain info'), { type: 'io.nats.jetstream.api.v1.account_info_response', error: off });
    assert.deepEqual(step(ours, 'plain create'), { type: 'io.nats.jetstream.api.v1.stream_create_response', error: off });
  });
});
