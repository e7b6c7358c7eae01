/**
 * Contracts between the MQTT adapter's parts, so that they do not import each other in a circle: what a session
 * and its hub use of the client connection attached to it (MqttConnection implements SessionConnection), and what
 * the cluster's session ownership uses of the hub (MqttHub implements MqttClusterHost).
 */
import type { Message, SessionRecord, SessionStore, Subscription } from '../../core/index.js';
import type { AdapterContext } from '../types.js';
import type { ReasonCode, Will } from './codec/index.js';

/** Why a connection is closed when its session leaves this broker. */
export type SessionMoveReason = typeof ReasonCode.SERVER_SHUTTING_DOWN | typeof ReasonCode.SESSION_TAKEN_OVER;

/** The connection attached to a session, as the session and the hub see it. */
export interface SessionConnection {
  readonly remote: string;
  readonly isConnected: boolean;
  /** The will the connection would publish if it ended now. */
  readonly currentWill: Will | null;
  deliver(msg: Message, subs: Subscription[]): void;
  /** Another connection took the session over (here or on another broker). */
  takenOver(): void;
  /** An administrator ended the client's connection. */
  kick(reason: string): void;
  /** The session leaves this broker (a handover, or lost ownership). */
  sessionMoved(reason: SessionMoveReason): void;
  /** Keep-alive and connect timeouts (the hub's tick). */
  checkTimers(now: number): void;
}

/** A session as the cluster's ownership sees it. */
export interface ClusterSession {
  /** The ownership epoch it is served under (cluster mode). */
  epoch: number | undefined;
  readonly conn: SessionConnection | null;
  readonly ended: boolean;
  readonly persistent: boolean;
  /** Store writes of it that failed so far. */
  readonly failedWrites: number;
}

/** What the cluster's session ownership (cluster.ts) uses of the hub. */
export interface MqttClusterHost<S extends ClusterSession> {
  readonly ctx: AdapterContext;
  readonly store: SessionStore;
  readonly sessions: ReadonlyMap<string, S>;
  /** Loads a stored session (null: expired or unreadable). */
  load(rec: SessionRecord, now: number, epoch: number | undefined): S | null;
  /** Ends a session here (an administrator's delete); answers whether it was in memory. */
  deleteSession(clientId: string): boolean;
  /** Writes what the session has and waits for it (a handover). */
  drainSession(s: S): Promise<void>;
  /** Forgets a session here, its connection closed with `reason` (null: already closed). */
  dropSession(s: S, reason: SessionMoveReason | null): void;
  /** Settles once the store writes of the deliveries made so far have settled (null: none pending). */
  queueWrites(): Promise<void> | null;
  queueWritesFenced(): Promise<void> | null;
}
