import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { bareBooleans } from '../../src/cli/commands/start.js';

describe('flowmq start: bare boolean flags', () => {
  it('reads a bare boolean flag as true (followed by another option, or last)', () => {
    assert.deepEqual(bareBooleans(['--cluster', '--broker-id', '1']), ['--cluster', 'true', '--broker-id', '1']);
    assert.deepEqual(bareBooleans(['--broker-id', '1', '--cluster']), ['--broker-id', '1', '--cluster', 'true']);
  });

  it('keeps an explicit value, and leaves string options alone', () => {
    assert.deepEqual(bareBooleans(['--cluster', 'false', '--mqtt-ws', 'true']), ['--cluster', 'false', '--mqtt-ws', 'true']);
    assert.deepEqual(bareBooleans(['--cluster=false']), ['--cluster=false']);
    // A string option's value may start with "--" only with "=", as before; a bare string option stays an error.
    assert.deepEqual(bareBooleans(['--cluster-secret', '--x']), ['--cluster-secret', '--x']);
  });
});
