/**
 * ApiVersions (key 18), versions 0-4; v3 is flexible (KIP-482) and carries the client's software name and
 * version (KIP-511); v4 has the same fields (it lets feature ranges start at 0, KAFKA-17011). Its response always uses response header v0 (see `ApiCodec.responseHeaderV0`).
 */
import { ApiKey, type ApiCodec } from './api.js';
import type { Reader, Writer } from './primitives.js';

export interface ApiVersionsRequest {
  /** v3+; null in earlier versions. */
  clientSoftwareName: string | null;
  clientSoftwareVersion: string | null;
}

export interface ApiVersionRange {
  apiKey: number;
  minVersion: number;
  maxVersion: number;
}

export interface ApiVersionsResponse {
  errorCode: number;
  apiKeys: ApiVersionRange[];
  /** v1+. */
  throttleTimeMs: number;
}

export const ApiVersionsApi: ApiCodec<ApiVersionsRequest, ApiVersionsResponse> = {
  apiKey: ApiKey.ApiVersions,
  name: 'ApiVersions',
  minVersion: 0,
  maxVersion: 4,
  firstFlexibleVersion: 3,
  responseHeaderV0: true,

  decodeRequest(r: Reader, version: number): ApiVersionsRequest {
    if (version < 3) return { clientSoftwareName: null, clientSoftwareVersion: null };
    const clientSoftwareName = r.compactString();
    const clientSoftwareVersion = r.compactString();
    r.taggedFields();
    return { clientSoftwareName, clientSoftwareVersion };
  },

  encodeRequest(w: Writer, version: number, req: ApiVersionsRequest): void {
    if (version < 3) return;
    w.compactString(req.clientSoftwareName ?? '').compactString(req.clientSoftwareVersion ?? '');
    w.taggedFields();
  },

  encodeResponse(w: Writer, version: number, res: ApiVersionsResponse): void {
    w.int16(res.errorCode);
    w.array(res.apiKeys, (w, k) => {
      w.int16(k.apiKey).int16(k.minVersion).int16(k.maxVersion);
      w.taggedFields();
    });
    if (version >= 1) w.int32(res.throttleTimeMs);
    // v3+ tagged fields SupportedFeatures / FinalizedFeatures (KIP-584) are omitted: FlowMQ has no feature flags.
    w.taggedFields();
  },

  decodeResponse(r: Reader, version: number): ApiVersionsResponse {
    const errorCode = r.int16();
    const apiKeys = r.array((r) => {
      const k = { apiKey: r.int16(), minVersion: r.int16(), maxVersion: r.int16() };
      r.taggedFields();
      return k;
    });
    const throttleTimeMs = version >= 1 ? r.int32() : 0;
    r.taggedFields();
    return { errorCode, apiKeys, throttleTimeMs };
  },
};
