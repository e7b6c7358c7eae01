export { LogManager, newLogStats, type LogOptions } from './log-manager.js';
