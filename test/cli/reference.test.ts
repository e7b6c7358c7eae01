/**
 * The configuration, CLI and metrics references in docs/ say what their tables say: regenerate them with
 * `npm run docs` after changing an option, a command or a metric.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { GENERATED, configReference, withPart } from '../../src/cli/reference.js';
import { OPTIONS } from '../../src/config/index.js';

const ROOT = join(import.meta.dirname, '../../..');

describe('docs references', () => {
  for (const part of GENERATED) {
    it(`${part.file} "${part.name}" is what its table says (else: npm run docs)`, () => {
      const doc = readFileSync(join(ROOT, part.file), 'utf8');
      assert.equal(withPart(doc, part.name, part.render()), doc);
    });
  }

  it('lists every option once, with its environment variable', () => {
    const table = configReference();
    for (const o of OPTIONS) assert.equal(table.split(`| \`--${o.name}\` |`).length, 2, o.name);
    assert.match(table, /\| `--kafka-port` \| `FLOWMQ_KAFKA_PORT` \| 9092 \|/);
    assert.match(table, /\| `--segment-bytes` \| `FLOWMQ_SEGMENT_BYTES` \| \d+MiB \|/);
  });

  it('finds a stale part: a changed table no longer matches the doc', () => {
    const doc = readFileSync(join(ROOT, 'docs/configuration.md'), 'utf8');
    const stale = withPart(doc, 'options', configReference().replace('9092', '9093'));
    assert.notEqual(withPart(stale, 'options', configReference()), stale);
  });
});
