/**
 * The golden fixtures read by a second client's codec: pika (Debian's python3-pika, which the AMQP e2e tests and
 * the benchmark use too) decodes every fixture frame to the fixture's values and re-encodes it to the same bytes.
 * pika 1.2 has no connection.update-secret, so those two are the only ones it cannot check.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { FULL_PROPERTIES_FIXTURE, METHOD_FIXTURES } from './codec-fixtures.js';

/** Debian's interpreter, where python3-pika lives (a `python3` on PATH may be another one, e.g. pyenv's). */
const PYTHON = process.env.FLOWMQ_TEST_PYTHON ?? (existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3');
const SCRIPT = fileURLToPath(new URL('../../../../test/protocols/amqp/pika_codec_check.py', import.meta.url));

test('pika decodes every golden fixture to its values and re-encodes the same bytes', () => {
  const input = JSON.stringify({
    methods: METHOD_FIXTURES.map((f) => ({
      hex: f.hex,
      channel: f.channel,
      method: Object.fromEntries(Object.entries(f.method).map(([k, v]) => [k, Buffer.isBuffer(v) ? { buf: v.toString('hex') } : v])),
    })),
    props: FULL_PROPERTIES_FIXTURE,
  });
  let out: string;
  try {
    out = execFileSync(PYTHON, [SCRIPT], { input, encoding: 'utf8', timeout: 60_000 });
  } catch (e) {
    throw new Error(`${PYTHON} with python3-pika is needed (Debian: apt-get install python3-pika): ${String(e)}`);
  }
  const result = JSON.parse(out) as { ok: number; missing: string[]; errors: string[] };
  assert.deepEqual(result.errors, []);
  assert.deepEqual(result.missing, ['connection.update-secret', 'connection.update-secret-ok']);
  assert.equal(result.ok, METHOD_FIXTURES.length - 2);
});
