export { LogManager, DEFAULT_LOG_OPTIONS, newLogStats, type LogOptions } from './log-manager.js';
export { buildSegment, parseFooter, parseIndex, type SegmentIndex, type IndexEntry } from './segment.js';
