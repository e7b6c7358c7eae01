export { startAdminApi, streamView, type AdminApi, type AdminApiOptions, type StorageOps } from './admin-api.js';
export { FloodCollector, processMemory, type FloodCollectorOptions, type FloodCollectorStats, type ProcessMemory } from './memory.js';
export {
  DEFAULT_SCRAM_ITERATIONS,
  MemoryUserStore,
  SCRAM_MECHANISMS,
  deriveScramCredential,
  loadUsersFile,
  parseUsersFile,
  scramCredentialFromSalted,
  type ScramCredential,
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
  verifyUserPassword,
  type PasswordCheck,
  type SaslExchange,
  type SaslMechanism,
  type SaslServerOptions,
  type SaslStepResult,
} from './sasl.js';
