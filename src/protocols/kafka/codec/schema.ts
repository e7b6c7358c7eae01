/**
 * A small declarative way to describe Kafka messages, field by field with the versions each field exists in,
 * the way the protocol's own message definitions do. One description gives the decoder, the encoder and the
 * TypeScript type of a message for every version, so adding an API is a list of fields rather than four
 * hand-written walkers that must agree.
 *
 * - A field absent from a version decodes to its default and is not written.
 * - `string`, `bytes` and `array` pick the classic or compact (KIP-482) encoding from the reader's or writer's
 *   `flexible` flag, which the frame codec sets from the API's first flexible version.
 * - Every struct ends with a tagged-field section in flexible versions. Unknown tags are skipped when decoding,
 *   as the protocol requires; FlowMQ writes none (no message it answers needs one).
 */
import type { ApiCodec } from './api.js';
import { ZERO_UUID, type Reader, type Uuid, type Writer } from './primitives.js';

export class Field<T> {
  constructor(
    private readonly readFn: (r: Reader, version: number) => T,
    private readonly writeFn: (w: Writer, version: number, value: T) => void,
    /** Value of the field in versions without it; a function so mutable defaults ([]) are never shared. */
    readonly makeDefault: () => T,
    readonly min = 0,
    readonly max = Number.POSITIVE_INFINITY,
  ) {}

  read(r: Reader, version: number): T {
    return this.readFn(r, version);
  }

  // A method (not a function-typed property), so that a Field<string> is also a Field<unknown> in a shape.
  write(w: Writer, version: number, value: T): void {
    this.writeFn(w, version, value);
  }

  /** The field exists from version `min` (to `max`); elsewhere it is `def`. */
  v(min: number, max: number = Number.POSITIVE_INFINITY, def?: T): Field<T> {
    const d = def === undefined ? this.makeDefault : () => def;
    return new Field(this.readFn, this.writeFn, d, min, max);
  }

  /** Same field with another default. */
  orElse(def: T): Field<T> {
    return new Field(this.readFn, this.writeFn, () => def, this.min, this.max);
  }

  has(version: number): boolean {
    return version >= this.min && version <= this.max;
  }

  /**
   * The same field, optional in the TypeScript type (a value left out is written as the default): for fields added
   * by later versions, so that code written for the earlier ones need not name them.
   */
  optional(): OptionalField<T> {
    return new OptionalField(this.readFn, this.writeFn, this.makeDefault, this.min, this.max);
  }
}

/** A field a value may leave out (Field.optional). */
export class OptionalField<T> extends Field<T> {
  readonly isOptional = true as const;
}

/** Any field, whatever its value type (the shape of a struct mixes them). */
interface AnyField {
  has(version: number): boolean;
  read(r: Reader, version: number): unknown;
  write(w: Writer, version: number, value: never): void;
  makeDefault(): unknown;
}
type Shape = Record<string, AnyField>;
/** The TypeScript type a struct description decodes to (optional fields may be left out when writing). */
export type Infer<S> = { [K in keyof S as S[K] extends { readonly isOptional: true } ? never : K]: S[K] extends Field<infer T> ? T : never } & {
  [K in keyof S as S[K] extends { readonly isOptional: true } ? K : never]?: S[K] extends Field<infer T> ? T : never;
};
/** The value type of a field (e.g. of an API's `request` struct). */
export type ValueOf<F> = F extends Field<infer T> ? T : never;

const prim = <T>(read: (r: Reader) => T, write: (w: Writer, v: T) => void, def: T): Field<T> =>
  new Field<T>(
    (r) => read(r),
    (w, _v, x) => write(w, x),
    () => def,
  );

export const int8 = (): Field<number> =>
  prim(
    (r) => r.int8(),
    (w, v) => void w.int8(v),
    0,
  );
export const int16 = (): Field<number> =>
  prim(
    (r) => r.int16(),
    (w, v) => void w.int16(v),
    0,
  );
export const int32 = (): Field<number> =>
  prim(
    (r) => r.int32(),
    (w, v) => void w.int32(v),
    0,
  );
/** INT64 as a number (offsets, timestamps, producer ids: all below 2^53 in practice). */
export const int64 = (): Field<number> =>
  prim(
    (r) => r.int64(),
    (w, v) => void w.int64(v),
    0,
  );
export const float64 = (): Field<number> =>
  prim(
    (r) => r.float64(),
    (w, v) => void w.float64(v),
    0,
  );
export const bool = (): Field<boolean> =>
  prim(
    (r) => r.bool(),
    (w, v) => void w.bool(v),
    false,
  );
export const uuid = (): Field<Uuid> =>
  prim(
    (r) => r.uuid(),
    (w, v) => void w.uuid(v),
    ZERO_UUID,
  );
export const string = (): Field<string> =>
  prim(
    (r) => r.string(),
    (w, v) => void w.string(v),
    '',
  );
export const nullableString = (): Field<string | null> =>
  prim(
    (r) => r.nullableString(),
    (w, v) => void w.nullableString(v),
    null,
  );
export const bytes = (): Field<Buffer> =>
  prim(
    (r) => r.bytes(),
    (w, v) => void w.bytes(v),
    Buffer.alloc(0),
  );
export const nullableBytes = (): Field<Buffer | null> =>
  prim(
    (r) => r.nullableBytes(),
    (w, v) => void w.nullableBytes(v),
    null,
  );

/**
 * A string that is nullable only from version `from` (e.g. JoinGroup's protocol name from v7): before that a
 * null is written as "" (the protocol's own convention for "none" in those versions).
 */
export const stringNullableFrom = (from: number): Field<string | null> =>
  new Field<string | null>(
    (r, v) => (v >= from ? r.nullableString() : r.string()),
    (w, v, x) => void (v >= from ? w.nullableString(x) : w.string(x ?? '')),
    () => null,
  );

export function array<T>(item: Field<T>): Field<T[]> {
  return new Field<T[]>(
    (r, v) => r.array((rr) => item.read(rr, v)),
    (w, v, xs) => void w.array(xs, (ww, x) => item.write(ww, v, x)),
    () => [],
  );
}

export function nullableArray<T>(item: Field<T>): Field<T[] | null> {
  return new Field<T[] | null>(
    (r, v) => r.nullableArray((rr) => item.read(rr, v)),
    (w, v, xs) => void w.nullableArray(xs, (ww, x) => item.write(ww, v, x)),
    () => null,
  );
}

/** An array that is nullable only from version `from` (OffsetFetch topics from v2); null is [] before. */
export function arrayNullableFrom<T>(from: number, item: Field<T>): Field<T[] | null> {
  return new Field<T[] | null>(
    (r, v) => (v >= from ? r.nullableArray((rr) => item.read(rr, v)) : r.array((rr) => item.read(rr, v))),
    (w, v, xs) => {
      const write = (ww: Writer, x: T): void => item.write(ww, v, x);
      if (v >= from) w.nullableArray(xs, write);
      else w.array(xs ?? [], write);
    },
    () => null,
  );
}

export function struct<S extends Shape>(shape: S): Field<Infer<S>> {
  const entries = Object.entries(shape);
  return new Field<Infer<S>>(
    (r, v) => {
      const out: Record<string, unknown> = {};
      // An optional field is left out of the versions without it (so a message of an older version looks as it did).
      for (const [k, f] of entries) {
        if (f.has(v)) out[k] = f.read(r, v);
        else if (!(f instanceof OptionalField)) out[k] = f.makeDefault();
      }
      r.taggedFields();
      return out as Infer<S>;
    },
    (w, v, x) => {
      const rec = x as Record<string, unknown>;
      for (const [k, f] of entries) {
        if (!f.has(v)) continue;
        const x = rec[k];
        f.write(w, v, (x === undefined ? f.makeDefault() : x) as never);
      }
      w.taggedFields();
    },
    () => {
      const out: Record<string, unknown> = {};
      for (const [k, f] of entries) out[k] = f.makeDefault();
      return out as Infer<S>;
    },
  );
}

export interface MessageApi {
  apiKey: number;
  name: string;
  minVersion: number;
  maxVersion: number;
  /** First flexible version (KIP-482); Infinity when none. */
  firstFlexibleVersion: number;
}

/** An API codec from the descriptions of its request and response. */
export function messageApi<Req extends Shape, Res extends Shape>(
  api: MessageApi,
  request: Req,
  response: Res,
): ApiCodec<Infer<Req>, Infer<Res>> & { readonly request: Field<Infer<Req>>; readonly response: Field<Infer<Res>> } {
  const req = struct(request);
  const res = struct(response);
  return {
    ...api,
    request: req,
    response: res,
    decodeRequest: (r, v) => req.read(r, v),
    encodeRequest: (w, v, x) => req.write(w, v, x),
    encodeResponse: (w, v, x) => res.write(w, v, x),
    decodeResponse: (r, v) => res.read(r, v),
  };
}
