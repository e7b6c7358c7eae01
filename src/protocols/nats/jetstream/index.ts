export { JetStream, type JetStreamOptions } from './service.js';
export { jetstreamStats, jsz, MAX_JSZ_DETAIL, type JszOptions } from './jsz.js';
export { jwtJetStreamLimits } from './jwt-limits.js';
