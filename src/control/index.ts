export {
  startAdminApi,
  type AdminApi,
  type ConsumerGroupAdmin,
  type GroupDetail,
  type GroupSummary,
  type OffsetResetTarget,
  type SessionAdmin,
} from './admin-api.js';
export { closeUnreadBody, httpServerOptions, httpTimeouts, type HttpTimeouts } from './http-guard.js';
export { FloodCollector, processMemory } from './memory.js';
export {
  DUMMY_PASSWORD_HASH,
  MemoryUserStore,
  deriveScramCredential,
  readUsersFile,
  scramCredentialFromSalted,
  type ScramCredential,
  type PasswordHash,
  type UserStore,
} from './users.js';
export { isSaslMechanism, type SaslMechanism, type ScramMechanism } from '../config/sasl-mechanisms.js';
export { passwordAuthenticator, saslProvider, startSaslExchange, type SaslExchange, type SaslStepResult } from './sasl.js';
export { PasswordGuard, type PasswordGuardOptions } from './password-guard.js';
export { PasswordVerifier } from './password-verifier.js';
export { AuthThrottle } from './auth-throttle.js';
export { AccessControl, Access, type AuthOutcome, type ExternalAuthenticator } from './access.js';
export {
  ADMIN_GROUP,
  ANONYMOUS,
  PolicySet,
  guestIn,
  routingKeyName,
  type Action,
  type DefaultPolicy,
  type PolicyDef,
  type Principal,
  type ResourceKind,
} from './policy.js';
export { Directory, TOKEN_PREFIX, validateName } from './directory.js';
export { disconnectNamespace, followNamespaceRemovals, removeNamespace, type NamespaceRemoval, type NamespaceRemovalHooks } from './namespace-removal.js';
export { decodeSignature, parsePublicNkey, validateUserNkey, verifySignature } from './nkeys.js';
export { QuotaManager, storedByNamespace, type QuotaLease, type StoredBytes } from './quotas.js';
export { RuntimeSettings, type BrokerConfigAdmin, type ConfigScope, type QuotaChange, type QuotaEntity } from './settings.js';
export { createMetrics, type Metrics } from './metrics.js';
export { ClientEntry, ClientRegistry, type ClientRegistration } from './clients.js';
export { parseUsersFile, reloadDirectory, seedDirectory, type UsersFile } from './seed.js';
export { WebhookAuthenticator } from './webhook.js';
export type { AmqpChannelView, AmqpConnectionView, AmqpConsumerView, AmqpManagementView, AmqpStreamQueueView } from './rabbitmq/types.js';
export { startRabbitManagement, type RabbitManagement, type RabbitManagementOptions } from './rabbit-management.js';
export { certificateLogin, tlsClientOptions, type CertUserField } from './certs.js';
export type { OidcVerifier, OidcOptions, TokenIdentity, TokenVerdict } from './oidc.js';
export { looksLikeJwt } from './jwt-shape.js';
export { openOidcVerifier } from './oidc-open.js';
