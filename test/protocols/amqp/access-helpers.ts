/**
 * A real control plane for AMQP adapter tests: a Directory over the in-memory ControlStore, the PasswordGuard
 * (scrypt on its worker) and AccessControl, as the broker builds them (src/broker.ts openControlPlane).
 */
import type { Logger } from 'pino';
import { AccessControl, Directory, MemoryControlStore, PasswordGuard, type DefaultPolicy } from '../../../src/control/index.js';

export interface TestControl {
  access: AccessControl;
  directory: Directory;
  guard: PasswordGuard;
  close(): Promise<void>;
}

export async function testControl(opts: { anonymous?: boolean; defaultPolicy?: DefaultPolicy; logger?: Logger } = {}): Promise<TestControl> {
  let guard!: PasswordGuard;
  const directory = await Directory.open({ store: new MemoryControlStore(), defaultPolicy: opts.defaultPolicy ?? 'auto', hasher: (p) => guard.verifier.hash(p) });
  // Generous throttle: the tests log in with wrong passwords on purpose and must not be slowed.
  guard = new PasswordGuard(directory, { throttle: { freeFailures: 1000 } });
  const access = new AccessControl({ directory, guard, anonymous: new Set(opts.anonymous === false ? [] : ['amqp']), logger: opts.logger });
  return {
    access,
    directory,
    guard,
    async close() {
      access.close();
      directory.close();
      await guard.close();
    },
  };
}
