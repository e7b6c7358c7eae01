/**
 * JetStream API errors as nats-server 2.9 words them (server/jetstream_errors_generated.go): `code` is the
 * HTTP-like status, `err_code` the stable JetStream error number clients switch on, `description` the text. The
 * texts and numbers below were checked against nats-server 2.9.10's answers; FlowMQ-specific refusals (features
 * FlowMQ streams do not have) reuse the error nats-server gives for an unusable configuration, with a description
 * naming the reason.
 */
export interface ApiError {
  code: number;
  err_code: number;
  description: string;
}

const e = (code: number, err_code: number, description: string): ApiError => ({ code, err_code, description });

export const JsErr = {
  badRequest: (d = 'bad request') => e(400, 10003, d),
  notEnabledForAccount: () => e(503, 10039, 'JetStream not enabled for account'),
  invalidJson: () => e(400, 10025, 'invalid JSON'),
  streamNotFound: () => e(404, 10059, 'stream not found'),
  consumerNotFound: () => e(404, 10014, 'consumer not found'),
  noMessageFound: () => e(404, 10037, 'no message found'),
  streamNameExist: () => e(400, 10058, 'stream name already in use with a different configuration'),
  streamMismatch: () => e(400, 10056, 'stream name in subject does not match request'),
  /** JSStreamInvalidConfigF: a configuration the stream cannot have (here also: features FlowMQ lacks). */
  streamInvalidConfig: (d: string) => e(500, 10052, d),
  streamCreate: (d: string) => e(500, 10049, d),
  streamUpdate: (d: string) => e(500, 10069, d),
  streamDelete: (d: string) => e(500, 10050, d),
  streamPurge: (d: string) => e(500, 10110, d),
  replicasNotSupported: () => e(500, 10074, 'replicas > 1 not supported in non-clustered mode'),
  streamNameInvalid: () => e(400, 10128, 'Stream name can not contain path separators'),
  streamGeneral: (d: string) => e(500, 10051, d),
  streamStoreFailed: (d: string) => e(503, 10077, d),
  expectedStreamMismatch: () => e(400, 10060, 'expected stream does not match'),
  wrongLastSequence: (seq: number) => e(400, 10071, `wrong last sequence: ${seq}`),
  wrongLastMsgId: (id: string) => e(400, 10070, `wrong last msg ID: ${id}`),
  durableNameMismatch: () => e(400, 10017, 'consumer name in subject does not match durable name in request'),
  filterMismatch: () => e(400, 10131, 'Consumer create request did not match filtered subject from create subject'),
  ephemeralWithDurable: () => e(400, 10020, 'consumer expected to be ephemeral but a durable name was set in request'),
  filterNotSubset: () => e(400, 10093, 'consumer filter subject is not a valid subset of the interest subjects'),
  consumerInvalidPolicy: (d: string) => e(400, 10094, d),
  backoffMaxDeliver: () => e(400, 10116, 'max deliver is required to be > length of backoff values'),
  /** JSConsumerCreateErrF: also what nats-server answers for a change an existing consumer cannot take. */
  consumerCreate: (d: string) => e(500, 10012, d),
  heartbeatRequiresPush: () => e(400, 10088, 'consumer idle heartbeat requires a push based consumer'),
  flowControlRequiresPush: () => e(400, 10089, 'consumer flow control requires a push based consumer'),
  pullRateLimit: () => e(400, 10086, 'consumer in pull mode can not have rate limit set'),
  pushMaxWaiting: () => e(400, 10080, 'consumer in push mode can not set max waiting'),
  flowControlNeedsHeartbeat: () => e(400, 10108, 'consumer with flow control also needs heartbeats'),
  maxWaitingNegative: () => e(400, 10087, 'consumer max waiting needs to be positive'),
  maxBatchNegative: () => e(400, 10114, 'consumer max request batch needs to be > 0'),
  replicasNegative: () => e(400, 10133, 'replicas count cannot be negative'),
  consumerNameInvalid: () => e(400, 10127, 'Consumer name can not contain path separators'),
  durableAndNameMismatch: () => e(400, 10132, 'Consumer Durable and Name have to be equal if both are provided'),
  invalidDeliverSubject: () => e(400, 10112, 'invalid push consumer deliver subject'),
  maximumConsumers: () => e(400, 10026, 'maximum consumers limit reached'),
  maximumStreams: () => e(400, 10027, 'maximum number of streams reached'),
  storageResourcesExceeded: () => e(500, 10047, 'insufficient storage resources available'),
  memoryResourcesExceeded: () => e(500, 10028, 'insufficient memory resources available'),
  accountResourcesExceeded: () => e(400, 10002, 'resource limits exceeded for account'),
  streamMaxBytesRequired: () => e(400, 10113, 'account requires a stream config to have max bytes set'),
  streamMaxStreamBytesExceeded: () => e(400, 10122, 'stream max bytes exceeds account limit max stream bytes'),
  consumerMaxPendingAckExcess: (limit: number) => e(400, 10121, `consumer max ack pending exceeds system limit of ${limit}`),
  subjectOverlap: () => e(400, 10065, 'subjects overlap with an existing stream'),
  mirrorDirectWithoutMirror: () => e(500, 10052, 'stream has no mirror but does have mirror direct'),
  msgDeleteFailed: (d: string) => e(500, 10057, d),
  mirrorWithSubjects: () => e(400, 10034, 'stream mirrors can not contain subjects'),
  mirrorWithSources: () => e(400, 10031, 'stream mirrors can not also contain other sources'),
  mirrorUpdate: () => e(400, 10055, 'stream mirror configuration can not be updated'),
  streamSealed: () => e(400, 10109, 'invalid operation on sealed stream'),
  messageTooBig: () => e(400, 10054, 'message size exceeds maximum allowed'),
  wqRequiresExplicitAck: () => e(400, 10098, 'workqueue stream requires explicit ack'),
  wqMultipleUnfiltered: () => e(400, 10099, 'multiple non-filtered consumers not allowed on workqueue stream'),
  wqNotUnique: () => e(400, 10100, 'filtered consumer not unique on workqueue stream'),
  wqNotDeliverAll: () => e(400, 10101, 'consumer must be deliver all on workqueue stream'),
  rollupFailed: (d: string) => e(500, 10111, d),
  sequenceNotFound: (seq: number) => e(400, 10067, `sequence ${seq} not found`),
  /**
   * A request the policies refuse. nats-server expresses JetStream permissions as publish permissions on the API
   * subjects (the client sees a Permissions Violation and its request times out); FlowMQ maps the request onto its
   * stream and consumer and answers at once: code 403 with the bad-request error number (no JetStream error
   * number means "forbidden"), the description saying what was refused.
   */
  accessDenied: (d: string) => e(403, 10003, d),
} as const;
