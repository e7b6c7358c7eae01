export { startAdminApi, streamView, type AdminApi, type AdminApiOptions, type StorageOps } from './admin-api.js';
export { FloodCollector, processMemory, type FloodCollectorOptions, type FloodCollectorStats, type ProcessMemory } from './memory.js';
export {
  DEFAULT_SCRAM_ITERATIONS,
  DUMMY_PASSWORD_HASH,
  MemoryUserStore,
  SCRAM_MECHANISMS,
  deriveScramCredential,
  loadUsersFile,
  parseUsersFile,
  scramCredentialFromSalted,
  type ScramCredential,
  type PasswordHash,
  type ScramMechanism,
  type UserRecord,
  type UserStore,
} from './users.js';
export {
  SASL_MECHANISMS,
  isSaslMechanism,
  passwordAuthenticator,
  saslProvider,
  startSaslExchange,
  type PasswordCheck,
  type SaslExchange,
  type SaslMechanism,
  type SaslServerOptions,
  type SaslStepResult,
} from './sasl.js';
export { PasswordGuard, type PasswordGuardOptions, type PasswordVerdict } from './password-guard.js';
export { PasswordVerifier, type PasswordVerifierOptions, type VerifyResult } from './password-verifier.js';
export { AuthThrottle, type Admission, type AuthThrottleOptions } from './auth-throttle.js';
