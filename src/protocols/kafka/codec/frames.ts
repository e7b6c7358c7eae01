/**
 * Whole frames: request header + body, response header + body. The 4-byte size prefix that delimits frames on
 * the wire is handled by the connection when reading; responses are encoded with it, ready to be written.
 */
import {
  apiName,
  decodeRequestHeader,
  decodeResponseHeader,
  encodeRequestHeader,
  encodeResponseHeader,
  isFlexible,
  readRequestPrefix,
  requestHeaderVersion,
  responseHeaderVersion,
  supportsVersion,
  type AnyApiCodec,
  type ApiCodec,
  type RequestHeader,
} from './api.js';
import { CreateAclsApi, DeleteAclsApi, DescribeAclsApi } from './acls.js';
import {
  AlterClientQuotasApi,
  AlterUserScramCredentialsApi,
  DescribeClientQuotasApi,
  DescribeLogDirsApi,
  DescribeProducersApi,
  DescribeUserScramCredentialsApi,
  ElectLeadersApi,
  OffsetDeleteApi,
} from './cluster-admin.js';
import { AddOffsetsToTxnApi, AddPartitionsToTxnApi, DescribeTransactionsApi, EndTxnApi, ListTransactionsApi, TxnOffsetCommitApi } from './transactions.js';
import { ConsumerGroupDescribeApi, ConsumerGroupHeartbeatApi } from './consumer-groups.js';
import { ApiVersionsApi } from './api-versions.js';
import { KafkaProtocolError } from './errors.js';
import { FetchApi } from './fetch.js';
import { ListOffsetsApi } from './list-offsets.js';
import { MetadataApi } from './metadata.js';
import { Reader, Writer } from './primitives.js';
import { ProduceApi } from './produce.js';
import {
  DeleteGroupsApi,
  DescribeGroupsApi,
  FindCoordinatorApi,
  HeartbeatApi,
  JoinGroupApi,
  LeaveGroupApi,
  ListGroupsApi,
  OffsetCommitApi,
  OffsetFetchApi,
  SyncGroupApi,
} from './groups.js';
import {
  AlterConfigsApi,
  CreatePartitionsApi,
  CreateTopicsApi,
  DeleteRecordsApi,
  DeleteTopicsApi,
  DescribeClusterApi,
  DescribeConfigsApi,
  IncrementalAlterConfigsApi,
  InitProducerIdApi,
  OffsetForLeaderEpochApi,
  SaslAuthenticateApi,
  SaslHandshakeApi,
} from './admin.js';

/** Every API this codec implements. */
export const API_CODECS: readonly AnyApiCodec[] = [
  ProduceApi,
  FetchApi,
  ListOffsetsApi,
  MetadataApi,
  OffsetCommitApi,
  OffsetFetchApi,
  FindCoordinatorApi,
  JoinGroupApi,
  HeartbeatApi,
  LeaveGroupApi,
  SyncGroupApi,
  DescribeGroupsApi,
  ListGroupsApi,
  SaslHandshakeApi,
  ApiVersionsApi,
  CreateTopicsApi,
  DeleteTopicsApi,
  DeleteRecordsApi,
  InitProducerIdApi,
  OffsetForLeaderEpochApi,
  AddPartitionsToTxnApi,
  AddOffsetsToTxnApi,
  EndTxnApi,
  TxnOffsetCommitApi,
  DescribeConfigsApi,
  AlterConfigsApi,
  SaslAuthenticateApi,
  CreatePartitionsApi,
  DeleteGroupsApi,
  IncrementalAlterConfigsApi,
  DescribeClusterApi,
  DescribeAclsApi,
  CreateAclsApi,
  DeleteAclsApi,
  ConsumerGroupHeartbeatApi,
  ConsumerGroupDescribeApi,
  DescribeLogDirsApi,
  ElectLeadersApi,
  OffsetDeleteApi,
  DescribeProducersApi,
  DescribeTransactionsApi,
  ListTransactionsApi,
  DescribeClientQuotasApi,
  AlterClientQuotasApi,
  DescribeUserScramCredentialsApi,
  AlterUserScramCredentialsApi,
];

const BY_KEY = new Map<number, AnyApiCodec>(API_CODECS.map((c) => [c.apiKey, c]));

export function codecFor(apiKey: number): AnyApiCodec | undefined {
  return BY_KEY.get(apiKey);
}

export interface DecodedRequest<Req> {
  header: RequestHeader;
  body: Req;
  /** Bytes after the body that no field of this version reads (ignored: see `decodeRequestWith`). */
  trailingBytes: number;
}

/**
 * Decodes one request frame (without its size prefix) with the codec of its API. Throws KafkaProtocolError
 * (UNSUPPORTED_VERSION, TRUNCATED, ...) and nothing else, whatever the bytes.
 *
 * Bytes left after the body are ignored and only counted (`trailingBytes`), on every API and version, because
 * that is what Kafka does: its RequestContext.parseRequest hands the frame to the generated XxxRequestData reader,
 * which reads the fields of the version and never looks at what remains. Clients rely on it: librdkafka 2.1+
 * reserves 4 bytes for the compact topics array length of its all-topics Metadata v12 request and writes a
 * 1-byte varint into them, so 3 bytes follow every such request. A Kafka broker takes the first of those bytes
 * as the request's own fields and ignores the rest; so does this decoder, byte for byte.
 */
export function decodeRequestWith<Req, Res>(codec: ApiCodec<Req, Res>, frame: Buffer): DecodedRequest<Req> {
  const { apiKey, apiVersion } = readRequestPrefix(frame);
  if (apiKey !== codec.apiKey) {
    throw new KafkaProtocolError('UNKNOWN_API', `expected ${codec.name}, got ${apiName(apiKey)}`);
  }
  if (!supportsVersion(codec, apiVersion)) {
    throw new KafkaProtocolError('UNSUPPORTED_VERSION', `${codec.name} v${apiVersion} is not supported`);
  }
  const flexible = isFlexible(codec, apiVersion);
  const r = new Reader(frame);
  const header = decodeRequestHeader(r, requestHeaderVersion(flexible));
  r.flexible = flexible;
  const body = codec.decodeRequest(r, apiVersion);
  return { header, body, trailingBytes: r.remaining() };
}

/** Decodes a request of any API in `API_CODECS` (UNKNOWN_API otherwise). */
export function decodeRequest(frame: Buffer): DecodedRequest<unknown> & { codec: AnyApiCodec } {
  const { apiKey } = readRequestPrefix(frame);
  const codec = codecFor(apiKey);
  if (!codec) throw new KafkaProtocolError('UNKNOWN_API', `${apiName(apiKey)} is not supported`);
  return { ...decodeRequestWith(codec, frame), codec };
}

export interface RequestFrameHeader {
  apiVersion: number;
  correlationId: number;
  clientId: string | null;
}

/** Encodes a request frame (client side: tests, tools, later inter-broker calls). */
export function encodeRequest<Req, Res>(codec: ApiCodec<Req, Res>, h: RequestFrameHeader, body: Req, opts: { sizePrefix?: boolean } = {}): Buffer {
  const flexible = isFlexible(codec, h.apiVersion);
  const w = new Writer(256, opts.sizePrefix === true);
  encodeRequestHeader(w, { ...h, apiKey: codec.apiKey, headerVersion: requestHeaderVersion(flexible) });
  w.flexible = flexible;
  codec.encodeRequest(w, h.apiVersion, body);
  return w.toBuffer();
}

/** Encodes a response frame, size prefix included, as chunks for one corked write. */
export function encodeResponse<Req, Res>(codec: ApiCodec<Req, Res>, apiVersion: number, correlationId: number, body: Res): Buffer[] {
  const w = new Writer(256, true);
  encodeResponseHeader(w, { correlationId, headerVersion: responseHeaderVersion(codec, apiVersion) });
  w.flexible = isFlexible(codec, apiVersion);
  codec.encodeResponse(w, apiVersion, body);
  return w.toChunks();
}

/** Decodes a response frame (without its size prefix). */
export function decodeResponse<Req, Res>(codec: ApiCodec<Req, Res>, apiVersion: number, frame: Buffer): { correlationId: number; body: Res } {
  const r = new Reader(frame);
  const { correlationId } = decodeResponseHeader(r, responseHeaderVersion(codec, apiVersion));
  r.flexible = isFlexible(codec, apiVersion);
  const body = codec.decodeResponse(r, apiVersion);
  r.expectEnd(`${codec.name} v${apiVersion} response`);
  return { correlationId, body };
}
