/** Type declarations of the pure-JavaScript compression libraries the Kafka adapter uses (they ship none). */
declare module 'snappyjs' {
  const snappy: {
    /** Raw snappy block; throws when the stated length exceeds `maxLength`. */
    uncompress(compressed: Uint8Array, maxLength?: number): Uint8Array;
    compress(uncompressed: Uint8Array): Uint8Array;
  };
  export default snappy;
}

declare module 'lz4js' {
  const lz4: {
    /** An LZ4 frame (the format Kafka uses for RecordBatch v2). */
    decompress(src: Uint8Array, maxSize?: number): Uint8Array;
    decompressBound(src: Uint8Array): number;
    compress(src: Uint8Array, maxSize?: number): Uint8Array;
  };
  export default lz4;
}
