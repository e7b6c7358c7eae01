/** Every command of `flowmq` but `start` and `version`: one file per command group (the CLI reference is made from this list). */
import type { CommandGroup, SubCommand } from '../command.js';
import { streamCommand } from './stream.js';
import { queueCommand, exchangeCommand } from './queue.js';
import { consumerGroupCommand } from './consumer-group.js';
import { clientCommand } from './client.js';
import { sessionCommand, retainedCommand } from './mqtt.js';
import { userCommand, groupCommand } from './user.js';
import { tokenCommand } from './token.js';
import { policyCommand } from './policy.js';
import { namespaceCommand } from './namespace.js';
import { clusterCommand } from './cluster.js';
import { logLevelCommand, loginCommand, statusCommand } from './broker.js';

export const GROUPS: readonly CommandGroup[] = [
  streamCommand,
  queueCommand,
  exchangeCommand,
  consumerGroupCommand,
  clientCommand,
  sessionCommand,
  retainedCommand,
  userCommand,
  groupCommand,
  tokenCommand,
  policyCommand,
  namespaceCommand,
  clusterCommand,
];

export const SINGLES: Readonly<Record<string, SubCommand>> = { status: statusCommand, 'log-level': logLevelCommand, login: loginCommand };
