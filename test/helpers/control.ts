/**
 * A real control plane for tests, built as the broker builds it (src/broker.ts openControlPlane): a Directory over a
 * ControlStore (memory unless given), the PasswordGuard (scrypt on its worker thread) and AccessControl.
 */
import type { Logger } from 'pino';
import { AccessControl, Directory, PasswordGuard, type DefaultPolicy, type ExternalAuthenticator, type PasswordGuardOptions } from '../../src/control/index.js';
import { MemoryControlStore, type ControlStore } from '../../src/storage/metastore/control-store.js';

export interface TestControl {
  store: ControlStore;
  directory: Directory;
  guard: PasswordGuard;
  access: AccessControl;
  close(): Promise<void>;
}

export interface TestControlOptions {
  /** Protocols that let clients in without credentials. */
  anonymous?: readonly string[];
  users?: ReadonlyArray<{ username: string; password: string; groups?: string[]; namespace?: string }>;
  defaultPolicy?: DefaultPolicy;
  store?: ControlStore;
  /** Default: failures never slowed (the tests send wrong passwords on purpose). */
  guard?: PasswordGuardOptions;
  external?: ExternalAuthenticator;
  logger?: Logger;
}

export async function testControl(o: TestControlOptions = {}): Promise<TestControl> {
  const store = o.store ?? new MemoryControlStore();
  let guard!: PasswordGuard;
  const directory = await Directory.open({ store, defaultPolicy: o.defaultPolicy ?? 'auto', hasher: (p) => guard.verifier.hash(p) });
  guard = new PasswordGuard(directory, o.guard ?? { throttle: { freeFailures: 1000 } });
  for (const ns of new Set((o.users ?? []).map((u) => u.namespace ?? 'default'))) {
    if (directory.namespace(ns) === undefined) await directory.putNamespace({ name: ns });
  }
  for (const u of o.users ?? []) if (!directory.lookup(u.username)) await directory.addUser({ ...u });
  const access = new AccessControl({ directory, guard, anonymous: new Set(o.anonymous ?? []), logger: o.logger, external: o.external });
  return {
    store,
    directory,
    guard,
    access,
    async close() {
      access.close();
      directory.close();
      await guard.close();
    },
  };
}
