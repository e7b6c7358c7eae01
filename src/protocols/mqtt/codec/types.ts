/**
 * MQTT control packets as plain data. Every packet is a member of the `MqttPacket` tagged union (discriminated
 * by `type`), so a handler switches on `packet.type` and TypeScript narrows the fields.
 *
 * One shape serves MQTT 3.1 (level 3), 3.1.1 (level 4) and 5.0 (level 5). The v5-only parts (reason codes on
 * acknowledgements, DISCONNECT and AUTH, subscription options, and the property block) are optional fields:
 * the level-4 decoder never sets them, the level-5 decoder always does (`properties` is `{}` when the block is
 * empty), so a decoded packet re-encodes to the same bytes at its level.
 */
import type { QoS } from '../../../core/index.js';

/** Protocol level byte of CONNECT: 3 = MQTT 3.1 ("MQIsdp"), 4 = MQTT 3.1.1, 5 = MQTT 5.0. */
export type ProtocolLevel = 3 | 4 | 5;

/** Fixed-header packet type numbers (high nibble of the first byte). */
export const PacketType = {
  CONNECT: 1,
  CONNACK: 2,
  PUBLISH: 3,
  PUBACK: 4,
  PUBREC: 5,
  PUBREL: 6,
  PUBCOMP: 7,
  SUBSCRIBE: 8,
  SUBACK: 9,
  UNSUBSCRIBE: 10,
  UNSUBACK: 11,
  PINGREQ: 12,
  PINGRESP: 13,
  DISCONNECT: 14,
  /** MQTT 5.0 only. */
  AUTH: 15,
} as const;

/** CONNACK return codes of MQTT 3.1.1 (section 3.2.2.3). Values 6-255 are reserved. */
export const ConnackCode = {
  ACCEPTED: 0x00,
  UNACCEPTABLE_PROTOCOL_VERSION: 0x01,
  IDENTIFIER_REJECTED: 0x02,
  SERVER_UNAVAILABLE: 0x03,
  BAD_USERNAME_OR_PASSWORD: 0x04,
  NOT_AUTHORIZED: 0x05,
} as const;

/** MQTT 5.0 reason codes (section 2.4). One number can mean different things in different packets. */
export const ReasonCode = {
  SUCCESS: 0x00,
  NORMAL_DISCONNECTION: 0x00,
  GRANTED_QOS_0: 0x00,
  GRANTED_QOS_1: 0x01,
  GRANTED_QOS_2: 0x02,
  DISCONNECT_WITH_WILL: 0x04,
  NO_MATCHING_SUBSCRIBERS: 0x10,
  NO_SUBSCRIPTION_EXISTED: 0x11,
  CONTINUE_AUTHENTICATION: 0x18,
  RE_AUTHENTICATE: 0x19,
  UNSPECIFIED_ERROR: 0x80,
  MALFORMED_PACKET: 0x81,
  PROTOCOL_ERROR: 0x82,
  IMPLEMENTATION_SPECIFIC_ERROR: 0x83,
  UNSUPPORTED_PROTOCOL_VERSION: 0x84,
  CLIENT_IDENTIFIER_NOT_VALID: 0x85,
  BAD_USER_NAME_OR_PASSWORD: 0x86,
  NOT_AUTHORIZED: 0x87,
  SERVER_UNAVAILABLE: 0x88,
  SERVER_BUSY: 0x89,
  BANNED: 0x8a,
  SERVER_SHUTTING_DOWN: 0x8b,
  BAD_AUTHENTICATION_METHOD: 0x8c,
  KEEP_ALIVE_TIMEOUT: 0x8d,
  SESSION_TAKEN_OVER: 0x8e,
  TOPIC_FILTER_INVALID: 0x8f,
  TOPIC_NAME_INVALID: 0x90,
  PACKET_IDENTIFIER_IN_USE: 0x91,
  PACKET_IDENTIFIER_NOT_FOUND: 0x92,
  RECEIVE_MAXIMUM_EXCEEDED: 0x93,
  TOPIC_ALIAS_INVALID: 0x94,
  PACKET_TOO_LARGE: 0x95,
  MESSAGE_RATE_TOO_HIGH: 0x96,
  QUOTA_EXCEEDED: 0x97,
  ADMINISTRATIVE_ACTION: 0x98,
  PAYLOAD_FORMAT_INVALID: 0x99,
  RETAIN_NOT_SUPPORTED: 0x9a,
  QOS_NOT_SUPPORTED: 0x9b,
  USE_ANOTHER_SERVER: 0x9c,
  SERVER_MOVED: 0x9d,
  SHARED_SUBSCRIPTIONS_NOT_SUPPORTED: 0x9e,
  CONNECTION_RATE_EXCEEDED: 0x9f,
  MAXIMUM_CONNECT_TIME: 0xa0,
  SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED: 0xa1,
  WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED: 0xa2,
} as const;

/** SUBACK return code for a refused subscription (0x00-0x02 are granted QoS levels). */
export const SUBACK_FAILURE = 0x80;

/**
 * The MQTT 5.0 property block (section 2.2.2.2), by name. Which properties a packet may carry is checked by the
 * decoder (a property of another packet is a Malformed Packet); repeating a property that may appear once is
 * a Protocol Error.
 */
export interface Properties {
  payloadFormatIndicator?: number;
  messageExpiryInterval?: number;
  contentType?: string;
  responseTopic?: string;
  correlationData?: Buffer;
  /** PUBLISH may carry several; SUBSCRIBE at most one. */
  subscriptionIdentifiers?: number[];
  sessionExpiryInterval?: number;
  assignedClientIdentifier?: string;
  serverKeepAlive?: number;
  authenticationMethod?: string;
  authenticationData?: Buffer;
  requestProblemInformation?: number;
  willDelayInterval?: number;
  requestResponseInformation?: number;
  responseInformation?: string;
  serverReference?: string;
  reasonString?: string;
  receiveMaximum?: number;
  topicAliasMaximum?: number;
  topicAlias?: number;
  maximumQoS?: number;
  retainAvailable?: number;
  /** Name/value pairs in order; names may repeat. */
  userProperties?: Array<[string, string]>;
  maximumPacketSize?: number;
  wildcardSubscriptionAvailable?: number;
  subscriptionIdentifierAvailable?: number;
  sharedSubscriptionAvailable?: number;
}

export interface Will {
  topic: string;
  payload: Buffer;
  qos: QoS;
  retain: boolean;
  /** v5 will properties (Will Delay Interval, Message Expiry, Content Type...). */
  properties?: Properties;
}

export interface ConnectPacket {
  type: 'connect';
  /** 'MQTT' for levels 4 and 5, 'MQIsdp' for level 3. */
  protocolName: string;
  protocolLevel: ProtocolLevel;
  /** v5 calls it Clean Start; same bit. */
  cleanSession: boolean;
  /** Seconds; 0 disables keep-alive. */
  keepalive: number;
  /** May be empty: the server then assigns one. */
  clientId: string;
  will: Will | null;
  username: string | null;
  password: Buffer | null;
  properties?: Properties;
}

export interface ConnackPacket {
  type: 'connack';
  sessionPresent: boolean;
  /** 3.1.1 return code, or v5 reason code. */
  returnCode: number;
  properties?: Properties;
}

export interface PublishPacket {
  type: 'publish';
  dup: boolean;
  qos: QoS;
  retain: boolean;
  /** May be empty in v5 when a Topic Alias stands for it. */
  topic: string;
  /** 0 for QoS 0 (which carries no packet identifier, [MQTT-2.3.1-5]). */
  packetId: number;
  payload: Buffer;
  properties?: Properties;
}

/** PUBACK, PUBREC, PUBREL, PUBCOMP: a packet identifier, and in v5 a reason code and properties. */
export interface PacketIdPacket<T extends 'puback' | 'pubrec' | 'pubrel' | 'pubcomp'> {
  type: T;
  packetId: number;
  reasonCode?: number;
  properties?: Properties;
}
export type PubackPacket = PacketIdPacket<'puback'>;
export type PubrecPacket = PacketIdPacket<'pubrec'>;
export type PubrelPacket = PacketIdPacket<'pubrel'>;
export type PubcompPacket = PacketIdPacket<'pubcomp'>;

export interface UnsubackPacket {
  type: 'unsuback';
  packetId: number;
  /** v5: one per filter. */
  reasonCodes?: number[];
  properties?: Properties;
}

export interface SubscriptionRequest {
  filter: string;
  qos: QoS;
  /** v5 subscription options (section 3.8.3.1). */
  noLocal?: boolean;
  retainAsPublished?: boolean;
  retainHandling?: 0 | 1 | 2;
}

export interface SubscribePacket {
  type: 'subscribe';
  packetId: number;
  subscriptions: SubscriptionRequest[];
  properties?: Properties;
}

export interface SubackPacket {
  type: 'suback';
  packetId: number;
  /** One per requested filter, in order: granted QoS 0-2, or a failure code (0x80 in 3.1.1). */
  returnCodes: number[];
  properties?: Properties;
}

export interface UnsubscribePacket {
  type: 'unsubscribe';
  packetId: number;
  filters: string[];
  properties?: Properties;
}

export interface PingreqPacket {
  type: 'pingreq';
}
export interface PingrespPacket {
  type: 'pingresp';
}
export interface DisconnectPacket {
  type: 'disconnect';
  reasonCode?: number;
  properties?: Properties;
}
/** MQTT 5.0 enhanced authentication exchange (section 3.15). */
export interface AuthPacket {
  type: 'auth';
  reasonCode: number;
  properties?: Properties;
}

export type MqttPacket =
  | ConnectPacket
  | ConnackPacket
  | PublishPacket
  | PubackPacket
  | PubrecPacket
  | PubrelPacket
  | PubcompPacket
  | SubscribePacket
  | SubackPacket
  | UnsubscribePacket
  | UnsubackPacket
  | PingreqPacket
  | PingrespPacket
  | DisconnectPacket
  | AuthPacket;
