/**
 * S3ObjectStore against s3rver, through a small HTTP proxy that fails requests on demand (503 SlowDown, a reset
 * connection, no answer at all) before forwarding the rest: retries, timeouts, what a failure looks like, and the
 * figures that count them. The object-store contract itself is checked by test/conformance/objects-s3.test.ts.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { isFlowError } from '../../../src/core/index.js';
import { S3ObjectStore, parseS3Url, type S3Options } from '../../../src/storage/objects/index.js';
import { startS3, type S3TestServer } from '../../helpers/s3.js';

type Action = 'pass' | 'slow' | '503' | '403' | 'reset' | 'hang';

/** An HTTP proxy in front of s3rver; `plan` decides each request's fate, `seen` logs them ("METHOD /path?query"). */
class FaultyProxy {
  plan: (req: IncomingMessage) => Action = () => 'pass';
  readonly seen: string[] = [];
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();
  port = 0;

  constructor(private readonly upstreamPort: number) {
    this.server = createServer((req, res) => this.handle(req, res));
    this.server.on('connection', (s: Socket) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
  }

  async listen(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as AddressInfo).port;
  }

  /** Fails the next `n` requests (that `which` selects) with `action`, then passes everything. */
  failNext(n: number, action: Action, which: (req: IncomingMessage) => boolean = () => true): void {
    let left = n;
    this.plan = (req) => (which(req) && left-- > 0 ? action : 'pass');
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    this.seen.push(`${req.method} ${req.url}`);
    const action = this.plan(req);
    if (action === 'hang') return; // never answered; the socket is cut when the proxy closes
    if (action === 'reset') {
      req.socket.resetAndDestroy();
      return;
    }
    if (action === '503' || action === '403') {
      const [code, message] = action === '503' ? ['SlowDown', 'Please reduce your request rate.'] : ['AccessDenied', 'Access Denied'];
      // The request's body is read first, as a server would before answering.
      req.resume();
      req.on('end', () => {
        res.writeHead(Number(action), { 'content-type': 'application/xml' });
        res.end(`<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${message}</Message></Error>`);
      });
      return;
    }
    const forward = (): void => {
      const up = request({ host: '127.0.0.1', port: this.upstreamPort, method: req.method, path: req.url, headers: req.headers }, (upRes) => {
        res.writeHead(upRes.statusCode ?? 502, upRes.headers);
        upRes.pipe(res);
        upRes.on('end', () => this.seen.push(`done ${req.method} ${req.url}`));
      });
      up.on('error', () => res.destroy());
      req.pipe(up);
    };
    // 'slow': forwarded a while later (its body waits in the socket meanwhile).
    if (action === 'slow') setTimeout(forward, 300);
    else forward();
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

const bytes = (n: number, seed = 1): Buffer => {
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = (i * 13 + seed) & 0xff;
  return b;
};

interface Figures {
  operations: Record<string, { requests: number; bytes: number; errors: number; retries: number }>;
}
const ops = (s: S3ObjectStore): Figures['operations'] => (s.figures() as unknown as Figures).operations;

describe('parseS3Url', () => {
  it('takes the bucket and the prefix, without its slashes', () => {
    assert.deepEqual(parseS3Url('s3://my-bucket'), { bucket: 'my-bucket', prefix: '' });
    assert.deepEqual(parseS3Url('s3://my-bucket/'), { bucket: 'my-bucket', prefix: '' });
    assert.deepEqual(parseS3Url('s3://my.bucket-1/some/prefix'), { bucket: 'my.bucket-1', prefix: 'some/prefix' });
    assert.deepEqual(parseS3Url('s3://abc/p/'), { bucket: 'abc', prefix: 'p' });
  });

  it('refuses what is not s3://bucket[/prefix] with CONFIG_ERROR', () => {
    for (const bad of [
      '',
      'bucket',
      'http://bucket/x',
      's3://',
      's3:///prefix',
      's3://Bucket',
      's3://ab',
      's3://-ab',
      's3://a..b',
      's3://b_c',
      's3://bucket//x',
      's3://bucket/a/../b',
      's3://bucket/x?y=1',
      's3://bucket/a b',
    ]) {
      assert.throws(
        () => parseS3Url(bad),
        (e: unknown) => isFlowError(e, 'CONFIG_ERROR') && e.message.includes(bad),
        bad,
      );
    }
  });
});

describe('S3ObjectStore', () => {
  let s3: S3TestServer;
  let proxy: FaultyProxy;
  let n = 0;
  const stores: S3ObjectStore[] = [];

  const options = (over: Partial<S3Options> = {}): S3Options => ({
    bucket: s3.bucket,
    prefix: `t${n++}`,
    endpoint: `http://127.0.0.1:${proxy.port}`,
    region: s3.region,
    accessKeyId: s3.accessKeyId,
    secretAccessKey: s3.secretAccessKey,
    forcePathStyle: true,
    retryBaseDelayMs: 5,
    maxAttempts: 4,
    ...over,
  });
  const open = async (over: Partial<S3Options> = {}): Promise<S3ObjectStore> => {
    const s = await S3ObjectStore.open(options(over));
    stores.push(s);
    return s;
  };

  before(async () => {
    s3 = await startS3();
    proxy = new FaultyProxy(s3.port);
    await proxy.listen();
  });
  after(async () => {
    for (const s of stores) await s.close();
    await proxy.close();
    await s3.close();
  });

  it('is of kind "s3", keeps keys under its prefix and lists them without it', async () => {
    const a = await open({ prefix: 'shared/a' });
    const root = await open({ prefix: '' });
    assert.equal(a.kind, 's3');
    await a.put('x/1', Buffer.from('one'));
    assert.equal((await root.get('shared/a/x/1')).toString(), 'one');
    assert.deepEqual(await a.list('x/'), [{ key: 'x/1', size: 3 }]);
    assert.deepEqual(await root.list('shared/'), [{ key: 'shared/a/x/1', size: 3 }]);
    const f = a.figures() as { bucket: string; prefix: string };
    assert.equal(f.bucket, s3.bucket);
    assert.equal(f.prefix, 'shared/a');
  });

  it('counts requests and bytes by operation', async () => {
    const s = await open({ partBytes: 5 * 1024 * 1024, multipartThresholdBytes: 5 * 1024 * 1024, listPageSize: 2 });
    await s.put('a', bytes(1000));
    await s.put('b', [bytes(6 * 1024 * 1024, 2), bytes(1, 3)]);
    await s.get('a');
    await s.get('b', { start: 10, end: 20 });
    await assert.rejects(s.get('none'), (e: unknown) => isFlowError(e, 'NOT_FOUND'));
    assert.equal((await s.list('')).length, 2);
    await s.put('c', Buffer.alloc(0));
    assert.equal((await s.list('')).length, 3); // two pages of two
    await s.delete('a');
    await s.delete('a');
    const f = ops(s);
    assert.deepEqual(f.put, { requests: 2, bytes: 1000, errors: 0, retries: 0 });
    assert.deepEqual(f.part, { requests: 2, bytes: 6 * 1024 * 1024 + 1, errors: 0, retries: 0 });
    assert.equal(f.multipart.requests, 2); // create and complete
    assert.deepEqual(f.get, { requests: 3, bytes: 1010, errors: 0, retries: 0 }); // an absent object is no error
    assert.equal(f.list.requests, 3);
    assert.equal(f.delete.requests, 2);
    assert.equal(f.head.requests, 1);
  });

  it('puts a segment-sized object (16 MiB) in one PutObject by default, and multipart only past the threshold', async () => {
    const s = await open();
    const seg = [bytes(8 * 1024 * 1024, 4), bytes(8 * 1024 * 1024, 5)];
    await s.put('seg', seg);
    assert.equal(ops(s).put.requests, 1);
    assert.equal(ops(s).multipart.requests, 0);
    assert.ok((await s.get('seg')).equals(Buffer.concat(seg)));
    const small = await open({ multipartThresholdBytes: 8 * 1024 * 1024 });
    await small.put('seg', seg);
    assert.equal(ops(small).put.requests, 0);
    assert.equal(ops(small).part.requests, 2);
    await small.close();
  });

  for (const action of ['503', 'reset'] as const) {
    it(`retries every operation after ${action === '503' ? '503 SlowDown answers' : 'reset connections'}, counting the retries`, async () => {
      const s = await open({ partBytes: 5 * 1024 * 1024, multipartThresholdBytes: 5 * 1024 * 1024 });
      const data = bytes(123_457, 5);
      proxy.failNext(2, action);
      await s.put('k', [data.subarray(0, 1000), data.subarray(1000)]);
      proxy.failNext(2, action);
      assert.ok((await s.get('k')).equals(data));
      proxy.failNext(2, action);
      assert.ok((await s.get('k', { start: 100, end: 200 })).equals(data.subarray(100, 200)));
      proxy.failNext(2, action);
      assert.deepEqual(await s.list(''), [{ key: 'k', size: data.length }]);
      // A multipart upload whose parts fail on their way.
      const big = bytes(11 * 1024 * 1024, 6);
      proxy.failNext(3, action, (req) => (req.url ?? '').includes('partNumber='));
      await s.put('big', [big.subarray(0, 7), big.subarray(7)]);
      assert.ok((await s.get('big')).equals(big));
      proxy.failNext(2, action);
      await s.delete('k');
      proxy.plan = () => 'pass';
      await assert.rejects(s.get('k'), (e: unknown) => isFlowError(e, 'NOT_FOUND'));
      const f = ops(s);
      assert.equal(f.put.retries, 2);
      assert.equal(f.get.retries, 4);
      assert.equal(f.list.retries, 2);
      assert.equal(f.part.retries, 3);
      assert.equal(f.delete.retries, 2);
      for (const o of Object.values(f)) assert.equal(o.errors, 0);
    });
  }

  it('fails with STORAGE_ERROR naming the operation, key and cause after maxAttempts', async () => {
    const s = await open({ maxAttempts: 3 });
    await s.put('there', Buffer.from('x'));
    proxy.plan = () => '503';
    try {
      await assert.rejects(s.get('there'), (e: unknown) => {
        assert.ok(isFlowError(e, 'STORAGE_ERROR'), String(e));
        assert.match(e.message, /S3 get of "there"/);
        assert.match(e.message, /after 3 attempts/);
        assert.match(e.message, /SlowDown/);
        assert.match(e.message, new RegExp(`bucket "${s3.bucket}" at http://127\\.0\\.0\\.1:${proxy.port}`));
        return true;
      });
      await assert.rejects(s.put('p', Buffer.from('y')), (e: unknown) => isFlowError(e, 'STORAGE_ERROR') && /S3 put of "p"/.test(e.message));
    } finally {
      proxy.plan = () => 'pass';
    }
    const f = ops(s);
    assert.deepEqual(f.get, { requests: 3, bytes: 0, errors: 1, retries: 2 });
    assert.equal(f.put.errors, 1);
    assert.equal(f.put.requests, 1 + 3);
    // Works again once the service does.
    assert.equal((await s.get('there')).toString(), 'x');
  });

  it('does not retry what the service refuses (a 4xx)', async () => {
    const s = await open();
    proxy.failNext(1, '403');
    await assert.rejects(s.put('k', Buffer.from('x')), (e: unknown) => isFlowError(e, 'STORAGE_ERROR') && /HTTP 403 AccessDenied/.test(e.message));
    assert.deepEqual(ops(s).put, { requests: 1, bytes: 0, errors: 1, retries: 0 });
  });

  it('aborts a multipart upload whose part fails for good, after the parts in flight', async () => {
    const s = await open({ partBytes: 5 * 1024 * 1024, multipartThresholdBytes: 5 * 1024 * 1024, maxAttempts: 2 });
    // Part 2 fails at once, part 1 is slow: the abort must not overtake it (S3 may keep a part landing later).
    proxy.plan = (req) => ((req.url ?? '').includes('partNumber=2') ? '503' : (req.url ?? '').includes('partNumber=1') ? 'slow' : 'pass');
    try {
      await assert.rejects(s.put('doomed', bytes(12 * 1024 * 1024)), (e: unknown) => isFlowError(e, 'STORAGE_ERROR') && /part 2/.test(e.message));
    } finally {
      proxy.plan = () => 'pass';
    }
    const abort = proxy.seen.findIndex((l) => l.startsWith('DELETE ') && l.includes('/doomed?uploadId='));
    const part1 = proxy.seen.findIndex((l) => l.startsWith('done PUT ') && l.includes('/doomed?') && l.includes('partNumber=1'));
    assert.ok(abort >= 0, 'an AbortMultipartUpload');
    assert.equal(proxy.seen.filter((l) => l.startsWith('DELETE ') && l.includes('/doomed?uploadId=')).length, 1);
    assert.ok(part1 >= 0 && part1 < abort, 'the abort came after part 1 was answered');
    assert.equal(ops(s).multipart.requests, 2); // create, abort: never completed
    await assert.rejects(s.get('doomed'), (e: unknown) => isFlowError(e, 'NOT_FOUND'));
  });

  it('gives up on a request that gets no answer after requestTimeoutMs, and retries it', async () => {
    const s = await open({ requestTimeoutMs: 300, maxAttempts: 2 });
    await s.put('slow', Buffer.from('z'));
    proxy.failNext(1, 'hang');
    assert.equal((await s.get('slow')).toString(), 'z');
    assert.equal(ops(s).get.retries, 1);
    proxy.plan = () => 'hang';
    try {
      await assert.rejects(s.get('slow'), (e: unknown) => isFlowError(e, 'STORAGE_ERROR') && /after 2 attempts/.test(e.message) && /Timeout/.test(e.message));
    } finally {
      proxy.plan = () => 'pass';
    }
    assert.equal(ops(s).get.errors, 1);
  });

  it('open() checks the bucket: unreachable, absent and refused are STORAGE_ERROR naming endpoint and bucket', async () => {
    // A port nothing listens on any more.
    const spare = createServer();
    await new Promise<void>((resolve) => spare.listen(0, '127.0.0.1', resolve));
    const deadPort = (spare.address() as AddressInfo).port;
    await new Promise((resolve) => spare.close(resolve));
    await assert.rejects(S3ObjectStore.open(options({ endpoint: `http://127.0.0.1:${deadPort}`, maxAttempts: 2 })), (e: unknown) => {
      assert.ok(isFlowError(e, 'STORAGE_ERROR'), String(e));
      assert.match(e.message, new RegExp(`cannot reach S3 bucket "${s3.bucket}" at http://127\\.0\\.0\\.1:${deadPort}`));
      assert.match(e.message, /ECONNREFUSED/);
      return true;
    });
    await assert.rejects(
      S3ObjectStore.open(options({ bucket: 'no-such-bucket' })),
      (e: unknown) => isFlowError(e, 'STORAGE_ERROR') && /"no-such-bucket".*does not exist/.test(e.message),
    );
    // s3rver checks the access key id (not V4 signatures).
    await assert.rejects(
      S3ObjectStore.open(options({ accessKeyId: 'nobody' })),
      (e: unknown) => isFlowError(e, 'STORAGE_ERROR') && /access denied/.test(e.message),
    );
  });

  it('open() refuses bad options with CONFIG_ERROR', async () => {
    const cases: Array<Partial<S3Options>> = [
      { partBytes: 1024 * 1024 },
      { multipartThresholdBytes: 1024 * 1024 },
      { accessKeyId: 'only-the-id', secretAccessKey: undefined },
      { endpoint: 'not a url' },
      { endpoint: 'ftp://x' },
      { maxAttempts: 0 },
      { bucket: '' },
    ];
    for (const c of cases) {
      await assert.rejects(S3ObjectStore.open(options(c)), (e: unknown) => isFlowError(e, 'CONFIG_ERROR'), JSON.stringify(c));
    }
  });

  it('refuses work once closed', async () => {
    const s = await open();
    await s.close();
    await assert.rejects(s.get('x'), (e: unknown) => isFlowError(e, 'CLOSED'));
    await assert.rejects(s.put('x', Buffer.from('x')), (e: unknown) => isFlowError(e, 'CLOSED'));
  });
});
