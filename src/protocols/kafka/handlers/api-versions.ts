/**
 * ApiVersions: the API version ranges this broker implements (exactly the registered routes).
 */
import { KafkaErrorCode, type ApiVersionsRequest, type ApiVersionsResponse } from '../codec/index.js';
import type { RequestContext } from '../route.js';

export function handleApiVersions(ctx: RequestContext, _req: ApiVersionsRequest): ApiVersionsResponse {
  return { errorCode: KafkaErrorCode.NONE, apiKeys: ctx.adapter.apiVersions, throttleTimeMs: 0 };
}
