/**
 * Encodings of the internal channel's bodies: a JSON head and an optional binary tail in one Buffer
 * ([u32 head length][head JSON][tail]), so that record batches and messages travel as bytes, never as base64; and
 * messages in the core's stored-message encoding (the one persistent sessions use: every property kept).
 */
import { decodeStoredMessage, encodeStoredMessage, FlowError, type Message } from '../core/index.js';

export function encodeBody(head: unknown, tail?: Buffer): Buffer {
  const json = Buffer.from(JSON.stringify(head ?? null));
  const out = Buffer.allocUnsafe(4 + json.length + (tail?.length ?? 0));
  out.writeUInt32BE(json.length, 0);
  json.copy(out, 4);
  if (tail) tail.copy(out, 4 + json.length);
  return out;
}

export function decodeBody<H>(body: Buffer): { head: H; tail: Buffer } {
  if (body.length < 4) throw new FlowError('PROTOCOL_ERROR', 'cluster body too short');
  const n = body.readUInt32BE(0);
  if (4 + n > body.length) throw new FlowError('PROTOCOL_ERROR', 'cluster body head overruns the body');
  let head: H;
  try {
    head = JSON.parse(body.toString('utf8', 4, 4 + n)) as H;
  } catch (err) {
    throw new FlowError('PROTOCOL_ERROR', 'cluster body head is not JSON', { cause: err });
  }
  return { head, tail: body.subarray(4 + n) };
}

/** Several buffers in one: [u32 count]([u32 length][bytes])*. */
export function packBuffers(list: readonly Buffer[]): Buffer {
  let size = 4;
  for (const b of list) size += 4 + b.length;
  const out = Buffer.allocUnsafe(size);
  out.writeUInt32BE(list.length, 0);
  let pos = 4;
  for (const b of list) {
    out.writeUInt32BE(b.length, pos);
    b.copy(out, pos + 4);
    pos += 4 + b.length;
  }
  return out;
}

export function unpackBuffers(buf: Buffer): Buffer[] {
  if (buf.length < 4) throw new FlowError('PROTOCOL_ERROR', 'cluster buffer list too short');
  const n = buf.readUInt32BE(0);
  const out: Buffer[] = [];
  let pos = 4;
  for (let i = 0; i < n; i++) {
    if (pos + 4 > buf.length) throw new FlowError('PROTOCOL_ERROR', 'cluster buffer list truncated');
    const len = buf.readUInt32BE(pos);
    if (pos + 4 + len > buf.length) throw new FlowError('PROTOCOL_ERROR', 'cluster buffer list truncated');
    out.push(buf.subarray(pos + 4, pos + 4 + len));
    pos += 4 + len;
  }
  return out;
}

export function encodeMessage(msg: Message): Buffer {
  // With an MQTT QoS 2 publish key (Message.pubKey): the receiving broker's sessions recognise a retried publish.
  return encodeStoredMessage(msg, true);
}

export function decodeMessage(buf: Buffer): Message {
  return decodeStoredMessage(buf);
}
