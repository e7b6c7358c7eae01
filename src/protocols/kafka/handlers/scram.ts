/**
 * DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554) on FlowMQ's user directory.
 *
 * - Describe (`describe cluster:*`, Kafka's DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED at the top):
 *   each user's SCRAM mechanisms with their iteration counts; no users named (null or empty): every user with a
 *   SCRAM credential. A user without one (or unknown) is RESOURCE_NOT_FOUND, a user named twice DUPLICATE_RESOURCE.
 * - Alter (`alter cluster:*`, Kafka's ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED for every user):
 *   upsertions carry what the client derived from the password (salt, iterations, salted password =
 *   Hi(password, salt, iterations)); FlowMQ stores only the keys SCRAM needs (StoredKey, ServerKey, RFC 5802), so a
 *   SCRAM login with the new password works at once, on every broker. Deletions remove one mechanism. As Kafka: a
 *   user named more than once in the request is DUPLICATE_RESOURCE, an empty name UNACCEPTABLE_CREDENTIAL, an unknown
 *   mechanism UNSUPPORTED_SASL_MECHANISM, fewer than 4096 or more than 16384 iterations UNACCEPTABLE_CREDENTIAL,
 *   deleting a credential the user does not have RESOURCE_NOT_FOUND. FlowMQ's own: the user must exist in the
 *   directory (RESOURCE_NOT_FOUND: create users with `flowmq user add` or the admin API, which also sets the
 *   password other protocols check), and the salted password must be as long as the mechanism's hash.
 *
 * The clear-text password's hash (PLAIN, MQTT, AMQP, NATS, HTTP logins) is not changed: the client never sends the
 * password itself. Offered only with a user directory (access control).
 */
import { scramCredentialFromSalted, type ScramCredential, type ScramMechanism } from '../../../control/index.js';
import {
  KafkaErrorCode,
  ScramMechanismType,
  type AlterUserScramCredentialsRequest,
  type AlterUserScramCredentialsResponse,
  type DescribeUserScramCredentialsRequest,
  type DescribeUserScramCredentialsResponse,
} from '../codec/index.js';
import { kafkaErrorCode } from '../errors.js';
import type { RequestContext } from '../route.js';
import { allowed } from '../authz.js';

/** Kafka's bounds on SCRAM iterations (ScramMechanism.minIterations; ScramControlManager.MAX_ITERATIONS). */
export const MIN_SCRAM_ITERATIONS = 4096;
export const MAX_SCRAM_ITERATIONS = 16384;

const BY_TYPE: ReadonlyMap<number, ScramMechanism> = new Map([
  [ScramMechanismType.SCRAM_SHA_256, 'SCRAM-SHA-256'],
  [ScramMechanismType.SCRAM_SHA_512, 'SCRAM-SHA-512'],
]);
const TYPE_OF: Readonly<Record<ScramMechanism, number>> = {
  'SCRAM-SHA-256': ScramMechanismType.SCRAM_SHA_256,
  'SCRAM-SHA-512': ScramMechanismType.SCRAM_SHA_512,
};
const HASH_BYTES: Readonly<Record<ScramMechanism, number>> = { 'SCRAM-SHA-256': 32, 'SCRAM-SHA-512': 64 };

class Refusal extends Error {
  constructor(
    readonly errorCode: number,
    message: string,
  ) {
    super(message);
  }
}

export function handleDescribeUserScramCredentials(ctx: RequestContext, req: DescribeUserScramCredentialsRequest): DescribeUserScramCredentialsResponse {
  const directory = ctx.adapter.options.access?.directory;
  if (!allowed(ctx, 'describe', 'cluster', '*') || directory === undefined) {
    return {
      throttleTimeMs: 0,
      errorCode: KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED,
      errorMessage: 'not authorized to describe SCRAM credentials',
      results: [],
    };
  }
  const counts = new Map<string, number>();
  const names =
    req.users === null || req.users.length === 0
      ? directory
          .listUsers()
          .filter((u) => directory.scramIterations(u.username).length > 0)
          .map((u) => u.username)
      : req.users.map((u) => u.name);
  for (const n of names) counts.set(n, (counts.get(n) ?? 0) + 1);
  const results = [...counts].map(([user, n]) => {
    if (n > 1)
      return {
        user,
        errorCode: KafkaErrorCode.DUPLICATE_RESOURCE,
        errorMessage: `cannot describe SCRAM credentials for the same user twice in a single request: ${user}`,
        credentialInfos: [],
      };
    const creds = directory.scramIterations(user);
    if (creds.length === 0)
      return {
        user,
        errorCode: KafkaErrorCode.RESOURCE_NOT_FOUND,
        errorMessage: `attempt to describe a user credential that does not exist: ${user}`,
        credentialInfos: [],
      };
    return {
      user,
      errorCode: KafkaErrorCode.NONE,
      errorMessage: null,
      credentialInfos: creds.map((c) => ({ mechanism: TYPE_OF[c.mechanism], iterations: c.iterations })),
    };
  });
  return { throttleTimeMs: 0, errorCode: KafkaErrorCode.NONE, errorMessage: null, results };
}

type Change = { mechanism: ScramMechanism; credential: ScramCredential | null };

export async function handleAlterUserScramCredentials(ctx: RequestContext, req: AlterUserScramCredentialsRequest): Promise<AlterUserScramCredentialsResponse> {
  const directory = ctx.adapter.options.access?.directory;
  const users = [...new Set([...req.deletions.map((d) => d.name), ...req.upsertions.map((u) => u.name)])];
  if (!allowed(ctx, 'alter', 'cluster', '*') || directory === undefined) {
    return {
      throttleTimeMs: 0,
      results: users.map((user) => ({
        user,
        errorCode: KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        errorMessage: 'not authorized to alter SCRAM credentials',
      })),
    };
  }
  const counts = new Map<string, number>();
  for (const n of [...req.deletions.map((d) => d.name), ...req.upsertions.map((u) => u.name)]) counts.set(n, (counts.get(n) ?? 0) + 1);
  const changes = new Map<string, Change[]>();
  const errors = new Map<string, Refusal>();
  const refuse = (user: string, check: () => Change): void => {
    try {
      if ((counts.get(user) ?? 0) > 1) throw new Refusal(KafkaErrorCode.DUPLICATE_RESOURCE, 'a user credential cannot be altered twice in the same request');
      if (user === '') throw new Refusal(KafkaErrorCode.UNACCEPTABLE_CREDENTIAL, 'username must not be empty');
      const c = check();
      if (directory.user(user) === undefined)
        throw new Refusal(KafkaErrorCode.RESOURCE_NOT_FOUND, `user "${user}" does not exist: create it first (flowmq user add, or the admin API)`);
      changes.set(user, [...(changes.get(user) ?? []), c]);
    } catch (err) {
      if (!(err instanceof Refusal)) throw err;
      errors.set(user, err);
    }
  };
  const mechanismOf = (type: number): ScramMechanism => {
    const m = BY_TYPE.get(type);
    if (m === undefined) throw new Refusal(KafkaErrorCode.UNSUPPORTED_SASL_MECHANISM, `unknown SCRAM mechanism ${type}`);
    return m;
  };
  for (const d of req.deletions) {
    refuse(d.name, () => {
      const mechanism = mechanismOf(d.mechanism);
      if (!directory.scramIterations(d.name).some((c) => c.mechanism === mechanism)) {
        throw new Refusal(KafkaErrorCode.RESOURCE_NOT_FOUND, 'attempt to delete a user credential that does not exist');
      }
      return { mechanism, credential: null };
    });
  }
  for (const u of req.upsertions) {
    refuse(u.name, () => {
      const mechanism = mechanismOf(u.mechanism);
      if (u.iterations < MIN_SCRAM_ITERATIONS)
        throw new Refusal(KafkaErrorCode.UNACCEPTABLE_CREDENTIAL, `too few iterations (at least ${MIN_SCRAM_ITERATIONS})`);
      if (u.iterations > MAX_SCRAM_ITERATIONS)
        throw new Refusal(KafkaErrorCode.UNACCEPTABLE_CREDENTIAL, `too many iterations (at most ${MAX_SCRAM_ITERATIONS})`);
      if (u.salt.length === 0) throw new Refusal(KafkaErrorCode.UNACCEPTABLE_CREDENTIAL, 'the salt must not be empty');
      if (u.saltedPassword.length !== HASH_BYTES[mechanism]) {
        throw new Refusal(
          KafkaErrorCode.UNACCEPTABLE_CREDENTIAL,
          `a ${mechanism} salted password has ${HASH_BYTES[mechanism]} bytes, not ${u.saltedPassword.length}`,
        );
      }
      return { mechanism, credential: scramCredentialFromSalted(mechanism, Buffer.from(u.saltedPassword), Buffer.from(u.salt), u.iterations) };
    });
  }
  const results: AlterUserScramCredentialsResponse['results'] = [];
  const by = ctx.conn.access?.principal.user ?? null;
  for (const user of users) {
    const refusal = errors.get(user);
    if (refusal !== undefined) {
      results.push({ user, errorCode: refusal.errorCode, errorMessage: refusal.message });
      continue;
    }
    const c = changes.get(user)!;
    try {
      await directory.setScram(user, c);
      ctx.conn.log.info(
        {
          user,
          set: c.filter((x) => x.credential !== null).map((x) => x.mechanism),
          deleted: c.filter((x) => x.credential === null).map((x) => x.mechanism),
          by,
        },
        'SCRAM credentials changed',
      );
      results.push({ user, errorCode: KafkaErrorCode.NONE, errorMessage: null });
    } catch (err) {
      const notFound = err instanceof Error && (err as { code?: string }).code === 'NOT_FOUND';
      results.push({
        user,
        errorCode: notFound ? KafkaErrorCode.RESOURCE_NOT_FOUND : kafkaErrorCode(err),
        errorMessage: err instanceof Error ? err.message : null,
      });
    }
  }
  return { throttleTimeMs: 0, results };
}
