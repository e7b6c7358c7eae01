/** Test helpers for the AMQP codec: amqplib's codec as the reference, and value normalisation. */
import { createRequire } from 'node:module';
import { Typed, type FieldValue } from '../../../src/protocols/amqp/codec/index.js';

const require = createRequire(import.meta.url);

export interface AmqplibArgInfo {
  name: string;
  type: string;
  default?: unknown;
}
export interface AmqplibDefs {
  info(id: number): { id: number; classId: number; methodId: number; name: string; args: AmqplibArgInfo[] };
  encodeMethod(id: number, channel: number, fields: Record<string, unknown>): Buffer;
  encodeProperties(id: number, channel: number, size: number, fields: Record<string, unknown>): Buffer;
  decode(id: number, buf: Buffer): Record<string, unknown>;
  [name: string]: unknown;
}
export interface AmqplibCodec {
  encodeTable(buf: Buffer, val: Record<string, unknown>, offset: number): number;
  decodeFields(slice: Buffer): Record<string, unknown>;
}
export interface AmqplibFrame {
  PROTOCOL_HEADER: string;
  HEARTBEAT_BUF: Buffer;
  parseFrame(bin: Buffer): { type: number; channel: number; size: number; payload: Buffer; rest: Buffer } | false;
  decodeFrame(frame: { type: number; channel: number; payload: Buffer }): Record<string, unknown>;
}

/** amqplib 0.10's method definitions, table codec and frame parser: a real client's codec, used as reference. */
export const amqplibDefs = require('amqplib/lib/defs') as AmqplibDefs;
export const amqplibCodec = require('amqplib/lib/codec') as AmqplibCodec;
export const amqplibFrame = require('amqplib/lib/frame') as AmqplibFrame;

/** amqplib's numeric id of a method given our name ('basic.get-ok' → BasicGetOk). */
export function amqplibId(name: string): number {
  const pascal = name
    .split(/[.-]/)
    .map((w) => w[0]!.toUpperCase() + w.slice(1))
    .join('');
  const id = amqplibDefs[pascal];
  if (typeof id !== 'number') throw new Error(`amqplib has no ${pascal}`);
  return id;
}

/** amqplib's argument name for ours (confirm.select and the others spell it `nowait`). */
export const amqplibArgName = (ours: string): string => (ours === 'noWait' ? 'nowait' : ours);

/** Null-prototype tables → plain objects, recursively, so deepStrictEqual compares values only. */
export function plain(v: unknown): unknown {
  if (v === null || typeof v !== 'object') return v;
  if (v instanceof Typed || Buffer.isBuffer(v) || v instanceof Date) return v;
  if (Array.isArray(v)) return v.map(plain);
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) out[k] = plain(x);
  return out;
}

/** Our field value in amqplib's form ({'!': type, value} for explicit types), for its encoder. */
export function toAmqplib(v: FieldValue): unknown {
  if (typeof v === 'number') return Number.isInteger(v) && v >= -0x80000000 && v <= 0x7fffffff ? { '!': 'int', value: v } : { '!': 'double', value: v };
  if (v instanceof Typed) {
    const names: Record<string, string> = {
      b: 'byte',
      B: 'unsignedbyte',
      s: 'short',
      u: 'unsignedshort',
      I: 'int',
      i: 'unsignedint',
      l: 'long',
      f: 'float',
      d: 'double',
      T: 'timestamp',
    };
    if (v.type === 'D') {
      const d = v.value as { scale: number; value: number };
      return { '!': 'decimal', value: { places: d.scale, digits: d.value } };
    }
    const name = names[v.type];
    if (name === undefined) throw new Error(`amqplib cannot encode ${v.type}`);
    return { '!': name, value: typeof v.value === 'bigint' ? Number(v.value) : v.value };
  }
  if (v === null || typeof v !== 'object' || Buffer.isBuffer(v)) return v;
  if (Array.isArray(v)) return v.map(toAmqplib);
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) out[k] = toAmqplib(x as FieldValue);
  return out;
}
