/**
 * API keys, the shape of one API's codec, and request/response headers.
 *
 * Adding an API means writing one module that exports an `ApiCodec` (request decoder/encoder, response
 * encoder/decoder, version range, first flexible version) and registering it in `registry.ts`; headers, framing,
 * flexible encodings and ApiVersions advertisement follow from that description.
 */
import { KafkaProtocolError } from './errors.js';
import { Reader, Writer } from './primitives.js';

/** API keys (https://kafka.apache.org/protocol#protocol_api_keys). */
export const ApiKey = {
  Produce: 0,
  Fetch: 1,
  ListOffsets: 2,
  Metadata: 3,
  OffsetCommit: 8,
  OffsetFetch: 9,
  FindCoordinator: 10,
  JoinGroup: 11,
  Heartbeat: 12,
  LeaveGroup: 13,
  SyncGroup: 14,
  DescribeGroups: 15,
  ListGroups: 16,
  SaslHandshake: 17,
  ApiVersions: 18,
  CreateTopics: 19,
  DeleteTopics: 20,
  DeleteRecords: 21,
  InitProducerId: 22,
  OffsetForLeaderEpoch: 23,
  AddPartitionsToTxn: 24,
  AddOffsetsToTxn: 25,
  EndTxn: 26,
  TxnOffsetCommit: 28,
  DescribeAcls: 29,
  CreateAcls: 30,
  DeleteAcls: 31,
  DescribeConfigs: 32,
  AlterConfigs: 33,
  DescribeLogDirs: 35,
  SaslAuthenticate: 36,
  CreatePartitions: 37,
  DeleteGroups: 42,
  ElectLeaders: 43,
  IncrementalAlterConfigs: 44,
  OffsetDelete: 47,
  DescribeClientQuotas: 48,
  AlterClientQuotas: 49,
  DescribeUserScramCredentials: 50,
  AlterUserScramCredentials: 51,
  DescribeCluster: 60,
  DescribeProducers: 61,
  DescribeTransactions: 65,
  ListTransactions: 66,
  ConsumerGroupHeartbeat: 68,
  ConsumerGroupDescribe: 69,
} as const;

const API_NAMES = new Map<number, string>(Object.entries(ApiKey).map(([name, key]) => [key, name]));

/** Name of an API key for logs ("ApiKey(77)" when unknown). */
export function apiName(key: number): string {
  return API_NAMES.get(key) ?? `ApiKey(${key})`;
}

/** Codec of one API: every version in [minVersion, maxVersion] is decoded and encoded. */
export interface ApiCodec<Req, Res> {
  readonly apiKey: number;
  readonly name: string;
  readonly minVersion: number;
  readonly maxVersion: number;
  /** First version using flexible encodings and header v2/v1 (KIP-482); Infinity when none. */
  readonly firstFlexibleVersion: number;
  /**
   * ApiVersions responses always use response header v0, even in flexible versions, so that a client can read
   * the error code of a version it sent but the broker does not know (KIP-511).
   */
  readonly responseHeaderV0?: boolean;
  /** Decodes a request body; the reader's `flexible` flag is set by the caller. */
  decodeRequest(r: Reader, version: number): Req;
  encodeRequest(w: Writer, version: number, req: Req): void;
  encodeResponse(w: Writer, version: number, res: Res): void;
  decodeResponse(r: Reader, version: number): Res;
}

/**
 * Codec of any API, with its request and response types erased (for registries and generic framing). Method
 * parameters are bivariant, so every `ApiCodec<Req, Res>` is one.
 */
export type AnyApiCodec = ApiCodec<unknown, unknown>;

export function isFlexible(codec: { firstFlexibleVersion: number }, version: number): boolean {
  return version >= codec.firstFlexibleVersion;
}

export function supportsVersion(codec: { minVersion: number; maxVersion: number }, version: number): boolean {
  return version >= codec.minVersion && version <= codec.maxVersion;
}

// ---------------------------------------------------------------- headers

/** The fixed start of every request header: enough to route, to answer, or to log. */
export interface RequestPrefix {
  apiKey: number;
  apiVersion: number;
  correlationId: number;
}

export interface RequestHeader extends RequestPrefix {
  /** Request header version: 1, or 2 for flexible versions (0 is only used by ControlledShutdown v0). */
  headerVersion: number;
  clientId: string | null;
}

/** Reads api key, version and correlation id, the first 8 bytes of every request header version. */
export function readRequestPrefix(frame: Buffer): RequestPrefix {
  if (frame.length < 8) {
    throw new KafkaProtocolError('TRUNCATED', `request of ${frame.length} bytes is shorter than a request header`);
  }
  return { apiKey: frame.readInt16BE(0), apiVersion: frame.readInt16BE(2), correlationId: frame.readInt32BE(4) };
}

export function requestHeaderVersion(flexible: boolean): number {
  return flexible ? 2 : 1;
}

export function responseHeaderVersion(codec: { responseHeaderV0?: boolean; firstFlexibleVersion: number }, version: number): number {
  return !codec.responseHeaderV0 && isFlexible(codec, version) ? 1 : 0;
}

/**
 * Reads a request header of version 1 or 2. The client id stays a classic INT16-length nullable string even in
 * header v2, so that every broker can read it whatever the version (KIP-482); v2 only adds tagged fields.
 */
export function decodeRequestHeader(r: Reader, headerVersion: number): RequestHeader {
  const apiKey = r.int16();
  const apiVersion = r.int16();
  const correlationId = r.int32();
  const clientId = headerVersion >= 1 ? r.nullableString16() : null;
  if (headerVersion >= 2) {
    const flexible = r.flexible;
    r.flexible = true;
    r.taggedFields();
    r.flexible = flexible;
  }
  return { apiKey, apiVersion, correlationId, clientId, headerVersion };
}

export function encodeRequestHeader(w: Writer, h: RequestHeader): void {
  w.int16(h.apiKey).int16(h.apiVersion).int32(h.correlationId);
  if (h.headerVersion >= 1) w.nullableString16(h.clientId);
  if (h.headerVersion >= 2) w.uvarint(0);
}

export interface ResponseHeader {
  correlationId: number;
  headerVersion: number;
}

/** Response header v0 is the correlation id; v1 adds a tagged-field section. */
export function encodeResponseHeader(w: Writer, h: ResponseHeader): void {
  w.int32(h.correlationId);
  if (h.headerVersion >= 1) w.uvarint(0);
}

export function decodeResponseHeader(r: Reader, headerVersion: number): ResponseHeader {
  const correlationId = r.int32();
  if (headerVersion >= 1) {
    const flexible = r.flexible;
    r.flexible = true;
    r.taggedFields();
    r.flexible = flexible;
  }
  return { correlationId, headerVersion };
}
