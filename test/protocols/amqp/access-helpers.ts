/**
 * A real control plane for AMQP adapter tests (test/helpers/control.ts), AMQP anonymous unless told otherwise.
 */
import type { Logger } from 'pino';
import type { DefaultPolicy } from '../../../src/control/index.js';
import { testControl as control, type TestControl } from '../../helpers/control.js';

export type { TestControl };

export function testControl(opts: { anonymous?: boolean; defaultPolicy?: DefaultPolicy; logger?: Logger } = {}): Promise<TestControl> {
  return control({ anonymous: opts.anonymous === false ? [] : ['amqp'], defaultPolicy: opts.defaultPolicy, logger: opts.logger });
}
