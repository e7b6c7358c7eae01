export {
  startAdminApi,
  streamView,
  type AdminApi,
  type AdminApiOptions,
  type ConsumerGroupAdmin,
  type GroupDetail,
  type GroupSummary,
  type MetricsSource,
  type OffsetResetTarget,
  type SessionAdmin,
  type StorageOps,
} from './admin-api.js';
export { HTTP_TIMEOUTS, applyHttpTimeouts, closeUnreadBody, httpServerOptions, type HttpTimeouts } from './http-guard.js';
export { FloodCollector, processMemory, type FloodCollectorOptions, type FloodCollectorStats, type ProcessMemory } from './memory.js';
export {
  DEFAULT_SCRAM_ITERATIONS,
  DUMMY_PASSWORD_HASH,
  MemoryUserStore,
  deriveScramCredential,
  readUsersFile,
  scramCredentialFromSalted,
  type ScramCredential,
  type PasswordHash,
  type UserRecord,
  type UserStore,
} from './users.js';
export { SASL_MECHANISMS, SCRAM_MECHANISMS, isSaslMechanism, type SaslMechanism, type ScramMechanism } from '../config/sasl-mechanisms.js';
export {
  passwordAuthenticator,
  saslProvider,
  startSaslExchange,
  type PasswordCheck,
  type SaslExchange,
  type SaslServerOptions,
  type SaslStepResult,
} from './sasl.js';
export { PasswordGuard, type PasswordGuardOptions, type PasswordVerdict } from './password-guard.js';
export { PasswordVerifier, type PasswordVerifierOptions, type VerifyResult } from './password-verifier.js';
export { AuthThrottle, type Admission, type AuthThrottleOptions } from './auth-throttle.js';
export { AccessControl, Access, type AccessControlOptions, type AuthOutcome, type ExternalAuthenticator } from './access.js';
export {
  ACTIONS,
  ADMIN_GROUP,
  ANONYMOUS,
  PolicySet,
  RESOURCE_KINDS,
  filterCovers,
  filtersIntersect,
  validatePolicy,
  type Action,
  type DefaultPolicy,
  type PolicyDef,
  type Principal,
  type ResourceKind,
  type SubscriptionVerdict,
} from './policy.js';
export {
  DEFAULT_NAMESPACE,
  Directory,
  TOKEN_PREFIX,
  validateName,
  validatePassword,
  validateQuotas,
  validateUsername,
  type DirectoryOptions,
  type GroupDef,
  type NamespaceDef,
  type PasswordHasher,
  type Quotas,
  type TokenInfo,
  type UserInfo,
} from './directory.js';
export { QuotaManager, type QuotaLease } from './quotas.js';
export {
  RuntimeSettings,
  quotaEntityKey,
  type BrokerConfigAdmin,
  type ConfigScope,
  type QuotaChange,
  type QuotaEntity,
  type QuotaEntry,
  type UserQuota,
} from './settings.js';
export { createMetrics, type Metrics, type MetricsSources } from './metrics.js';
export { ClientEntry, ClientRegistry, type ClientRegistration, type ProtocolTotals } from './clients.js';
export { loadUsersFile, parseUsersFile, seedDirectory, type SeedFigures, type SeedUser, type UsersFile } from './seed.js';
export { WebhookAuthenticator, type WebhookOptions, type WebhookVerdict } from './webhook.js';
export { certificateLogin, certificateUser, subjectAltNames, tlsClientOptions, type CertUserField, type ClientCertSettings } from './certs.js';
