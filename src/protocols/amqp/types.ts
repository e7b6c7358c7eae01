/**
 * What an AMQP channel uses of its connection (AmqpChannelHost, which AmqpConnection implements), and the small
 * types both share: the channel depends on this contract, not on the connection class, so that the two files do
 * not import each other.
 */
import type { Logger } from 'pino';
import type { Access } from '../../control/index.js';
import type { NamespaceNames } from '../../core/namespaces.js';
import type { AmqpAdapter } from './adapter.js';
import type { AmqpMethod } from './wire.js';

/** Capabilities the client announced in start-ok's client-properties. */
export interface ClientCapabilities {
  readonly blocked: boolean;
  readonly cancelNotify: boolean;
}

/** What settles a write made without a publisher confirm. */
export interface WriteCallbacks {
  settled(): void;
  failed(err: unknown): void;
}

/** The connection as its channels see it (see connection.ts for what each member does). */
export interface AmqpChannelHost {
  readonly id: string;
  readonly remoteAddress: string | undefined;
  readonly adapter: AmqpAdapter;
  readonly access: Access;
  /** The authenticated user (null: anonymous). */
  readonly user: string | null;
  readonly loginName: string;
  readonly vhost: string;
  /** The vhost's namespace names (vhost.ts). */
  readonly names: NamespaceNames;
  readonly capabilities: ClientCapabilities;
  readonly frameMax: number;
  /** A consumer was refused a delivery for the socket's sake: resume consumers on 'drain'. */
  starved: boolean;
  readonly log: Logger;
  readonly congested: boolean;
  readonly sendsHeld: boolean;
  readonly onWrite: WriteCallbacks;
  send(buf: Buffer | Buffer[]): void;
  sendMethod(channel: number, m: AmqpMethod): void;
  uncongested(): Promise<void>;
  backlogChanged(delta: number): void;
  bodyBytes(delta: number): void;
  channelGone(ch: number): void;
  chargeIn(bytes: number): void;
  /** Why the namespace takes no writes now (its storage quota), or null. */
  storageFull(): string | null;
  chargeOut(bytes: number): void;
  protocolError(err: unknown): void;
  published(): void;
  writeStarted(bytes: number): void;
  writeSettled(): void;
}
