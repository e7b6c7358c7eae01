/**
 * What the RabbitMQ management API's files share: its options, the context its routes get, RabbitMQ's error shape,
 * and this node's name.
 */
import { hostname } from 'node:os';
import type { FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import type { Engine, NamespaceNames } from '../../core/index.js';
import type { AccessControl } from '../access.js';
import type { HttpTimeouts } from '../http-guard.js';
import type { NamespaceRemovalHooks } from '../namespace-removal.js';
import type { Action, Principal, ResourceKind } from '../policy.js';
import type { AmqpManagementView } from './types.js';
import type { Rates } from './format.js';
import type { RabbitPolicies } from './policy-store.js';

export interface RabbitManagementOptions {
  engine: Engine;
  logger: Logger;
  access: AccessControl;
  host: string;
  port: number;
  allowedHosts?: readonly string[];
  /** Headers, request and keep-alive timeouts and the lingering close (see http-guard.ts); default HTTP_TIMEOUTS. */
  timeouts?: HttpTimeouts;
  /** The AMQP module's connections, channels and alarms; undefined while AMQP does not run. */
  amqp: () => AmqpManagementView | undefined;
  /** The broker's listeners: name ("amqp", "mqtts", "http"...) and port (health checks, overview). */
  listeners: () => ReadonlyArray<{ name: string; port: number }>;
  /** Free space where the broker writes, and the reserve (`--min-free-disk`); null when not watched. */
  disk?: () => { freeBytes: number; minFreeBytes: number } | null;
  /** FlowMQ's version (product_version). */
  version: string;
  startedAt: number;
  /** What DELETE /api/vhosts/{vhost} removes of the protocols' (Kafka groups, MQTT sessions), as the admin API's. */
  removal?: NamespaceRemovalHooks;
}

export { CHALLENGE, RabbitError, badRequest, notFound } from './errors.js';

/** Who is calling: a user's principal, or the bootstrap administrator (no user exists, loopback). */
export interface Caller {
  readonly principal: Principal | null;
  readonly name: string;
}

declare module 'fastify' {
  interface FastifyRequest {
    rabbitCaller: Caller | null;
    /** The vhost a write names (set by writeVhost): its error texts lose the vhost's prefixes. */
    rabbitNames: NamespaceNames | null;
  }
}

/** What every route file gets. */
export interface RabbitContext extends RabbitManagementOptions {
  readonly node: string;
  readonly rates: Rates;
  /** The RabbitMQ policies and operator policies (policy-store.ts). */
  readonly policies: RabbitPolicies;
  /**
   * May the caller do `action` on `kind:name`? (bootstrap: yes). With `names` (a vhost other than `/`), `name` is the
   * vhost's own (unqualified) name, judged as the AMQP adapter judges its clients' names in that vhost.
   */
  can(req: FastifyRequest, action: Action, kind: ResourceKind, name: string, names?: NamespaceNames): boolean;
  /** 401 unless it may (RabbitMQ answers a permission refusal with 401 not_authorized). */
  require(req: FastifyRequest, action: Action, kind: ResourceKind, name: string, names?: NamespaceNames): void;
  /**
   * The `{vhost}` of a path (vhost = namespace): "/" (or `default`), the caller's own namespace, or any namespace for
   * a member of the admins group (or the bootstrap caller); else 404. Answers the vhost's label ("/" for `default`).
   * For a user of another namespace (not in the admins group) "/" is its own namespace, as at AMQP connection.open,
   * and `default` is 404.
   */
  vhost(req: FastifyRequest, vhost: string): string;
  /**
   * May the caller see the objects of this vhost (by its label, "/" for `default`)? The bootstrap caller and the
   * admins group see every vhost; anyone else its own namespace's only, whatever its policies allow (tenants' names
   * stay out of each other's listings, docs/namespaces.md).
   */
  sees(req: FastifyRequest, vhost: string): boolean;
  /**
   * As vhost, for routes that change things (and read queues' messages): the vhost's names, which qualify what the
   * request names as the AMQP channel does in that vhost (core vhosts.ts). Its error texts lose the prefixes.
   */
  writeVhost(req: FastifyRequest, vhost: string): NamespaceNames;
  caller(req: FastifyRequest): Caller;
}

/** This node's name, as RabbitMQ's `rabbit@<short host name>`. */
/** The RabbitMQ release whose management API shapes this one follows (management_version, rabbitmq_version). */
export const RABBITMQ_API_VERSION = '3.10.8';

export function nodeName(): string {
  return `rabbit@${hostname().split('.')[0]}`;
}
