/**
 * The SASL mechanisms the broker implements (src/control/sasl.ts), named here, below the control plane, because the
 * configuration offers and checks them (`--kafka-sasl-mechanisms`).
 */
export const SCRAM_MECHANISMS = ['SCRAM-SHA-256', 'SCRAM-SHA-512'] as const;
export type ScramMechanism = (typeof SCRAM_MECHANISMS)[number];

export const SASL_MECHANISMS = ['PLAIN', ...SCRAM_MECHANISMS] as const;
export type SaslMechanism = (typeof SASL_MECHANISMS)[number];

export function isSaslMechanism(m: string): m is SaslMechanism {
  return (SASL_MECHANISMS as readonly string[]).includes(m);
}
