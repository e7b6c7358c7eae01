/**
 * MQTT control packets as plain data. Every packet is a member of the `MqttPacket` tagged union (discriminated
 * by `type`), so a handler switches on `packet.type` and TypeScript narrows the fields.
 *
 * Shaped for MQTT 3.1.1 (protocol level 4) and 3.1 (level 3). MQTT 5.0 (level 5) adds reason codes and a
 * property block to most packets: those arrive as new optional fields on these interfaces, and the decoders
 * and encoders already take the protocol level to branch on, so adding v5 does not change this surface.
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

/** SUBACK return code for a refused subscription (0x00-0x02 are granted QoS levels). */
export const SUBACK_FAILURE = 0x80;

export interface Will {
  topic: string;
  payload: Buffer;
  qos: QoS;
  retain: boolean;
}

export interface ConnectPacket {
  type: 'connect';
  /** 'MQTT' for levels 4 and 5, 'MQIsdp' for level 3. */
  protocolName: string;
  protocolLevel: ProtocolLevel;
  cleanSession: boolean;
  /** Seconds; 0 disables keep-alive. */
  keepalive: number;
  /** May be empty: the server then assigns one (clean session only). */
  clientId: string;
  will: Will | null;
  username: string | null;
  password: Buffer | null;
}

export interface ConnackPacket {
  type: 'connack';
  sessionPresent: boolean;
  returnCode: number;
}

export interface PublishPacket {
  type: 'publish';
  dup: boolean;
  qos: QoS;
  retain: boolean;
  topic: string;
  /** 0 for QoS 0 (which carries no packet identifier, [MQTT-2.3.1-5]). */
  packetId: number;
  payload: Buffer;
}

/** Packets whose whole variable header is a packet identifier (in 3.1.1). */
export interface PacketIdPacket<T extends 'puback' | 'pubrec' | 'pubrel' | 'pubcomp' | 'unsuback'> {
  type: T;
  packetId: number;
}
export type PubackPacket = PacketIdPacket<'puback'>;
export type PubrecPacket = PacketIdPacket<'pubrec'>;
export type PubrelPacket = PacketIdPacket<'pubrel'>;
export type PubcompPacket = PacketIdPacket<'pubcomp'>;
export type UnsubackPacket = PacketIdPacket<'unsuback'>;

export interface SubscriptionRequest {
  filter: string;
  qos: QoS;
}

export interface SubscribePacket {
  type: 'subscribe';
  packetId: number;
  subscriptions: SubscriptionRequest[];
}

export interface SubackPacket {
  type: 'suback';
  packetId: number;
  /** One per requested filter, in order: granted QoS 0-2, or 0x80 for failure. */
  returnCodes: number[];
}

export interface UnsubscribePacket {
  type: 'unsubscribe';
  packetId: number;
  filters: string[];
}

export interface PingreqPacket {
  type: 'pingreq';
}
export interface PingrespPacket {
  type: 'pingresp';
}
export interface DisconnectPacket {
  type: 'disconnect';
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
  | DisconnectPacket;

export type PacketTypeName = MqttPacket['type'];
