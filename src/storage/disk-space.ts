/**
 * The free-space reserve (`--min-free-disk`): stream appends are refused with STORAGE_FULL (retriable for producers:
 * Kafka KAFKA_STORAGE_ERROR, MQTT v5 PUBACK 0x97) while the data directory's filesystem has less than this much
 * free, and accepted again once it has more, without a restart.
 *
 * Why a reserve, when a failed write is recovered from anyway: a disk that is completely full stops more than the
 * appends. Sealing needs room before it frees any (the shared WAL layout writes a segment object before its WAL
 * file can go; a metastore commit grows SQLite's journal), the metastore's session queues, offsets and retained
 * messages need room, and so do the logs. Refusing appends a little before the end keeps all of that working, so
 * the broker drains its WAL into segments, consumers keep committing, and producers get a clean retriable error.
 *
 * Default: 5% of the filesystem, at most 1 GiB. 1 GiB covers several 16 MiB segments being sealed at once, the two
 * spare 64 MiB files of the shared WAL and SQLite's journal with a wide margin; a fixed 1 GiB would be a fifth of a
 * small 5 GiB volume, hence the 5% for small disks. 0 disables the reserve (only failed writes refuse appends then).
 *
 * Cheap: the check on the append path is a comparison with a cached figure. The figure is refreshed with statfs
 * (free blocks available to unprivileged users) every second, and sooner after `refreshAfterBytes` of appends;
 * between two looks, the bytes appended are taken off it, so a burst cannot run far past the reserve.
 */
import { statfs } from 'node:fs/promises';
import { FlowError } from '../core/index.js';

export const DEFAULT_MAX_RESERVE = 1024 * 1024 * 1024;
export const DEFAULT_RESERVE_FRACTION = 0.05;

/** What statfs says, in bytes. */
export interface FsSpace {
  /** Bytes available to an unprivileged writer. */
  available: number;
  /** Size of the filesystem. */
  total: number;
}

export interface DiskSpaceOptions {
  /** A directory on the filesystem to watch (the data directory). */
  dir: string;
  /** Bytes to keep free; null: DEFAULT_RESERVE_FRACTION of the filesystem, at most DEFAULT_MAX_RESERVE; 0: no reserve. */
  minFreeBytes: number | null;
  /** How often the figure is refreshed. Default 1 s. */
  refreshMs?: number;
  /** Appended bytes after which it is refreshed before the interval is up. Default 64 MiB. */
  refreshAfterBytes?: number;
  /** Told when appends start and stop being refused (pino's Logger fits). */
  logger?: { warn(obj: object, msg: string): void; info(obj: object, msg: string): void };
  /** Reads the filesystem's figures (tests replace it). Default: statfs. */
  probe?: (dir: string) => Promise<FsSpace>;
}

async function statfsProbe(dir: string): Promise<FsSpace> {
  const s = await statfs(dir);
  return { available: s.bavail * s.bsize, total: s.blocks * s.bsize };
}

export class DiskSpace {
  /** The reserve in bytes (0: none). */
  readonly minFreeBytes: number;
  private available: number;
  private total: number;
  /** Bytes appended since the last look. */
  private sinceLook = 0;
  private refusing = false;
  /** Appends refused because of the reserve. */
  refusals = 0;
  private timer: NodeJS.Timeout | null = null;
  private looking: Promise<void> | null = null;
  private readonly refreshAfter: number;

  private constructor(
    private readonly opts: DiskSpaceOptions,
    private readonly probe: (dir: string) => Promise<FsSpace>,
    first: FsSpace,
  ) {
    this.available = first.available;
    this.total = first.total;
    this.minFreeBytes = opts.minFreeBytes ?? Math.min(DEFAULT_MAX_RESERVE, Math.floor(first.total * DEFAULT_RESERVE_FRACTION));
    this.refreshAfter = opts.refreshAfterBytes ?? 64 * 1024 * 1024;
  }

  /** Looks at the filesystem once (the default reserve depends on its size) and then every `refreshMs`. */
  static async open(opts: DiskSpaceOptions): Promise<DiskSpace> {
    const probe = opts.probe ?? statfsProbe;
    let first: FsSpace;
    try {
      first = await probe(opts.dir);
    } catch (err) {
      throw new FlowError('STORAGE_ERROR', `cannot read the free space of ${opts.dir}`, { cause: err });
    }
    const d = new DiskSpace(opts, probe, first);
    d.update();
    if (d.minFreeBytes > 0) {
      d.timer = setInterval(() => void d.refresh(), opts.refreshMs ?? 1000);
      d.timer.unref();
    }
    return d;
  }

  /** STORAGE_FULL while free space (as last seen, less what was appended since) is below the reserve; else null. */
  refusal(): FlowError | null {
    if (this.minFreeBytes === 0) return null;
    if (!this.refusing) return null;
    this.refusals++;
    return new FlowError(
      'STORAGE_FULL',
      `free disk space is below the reserve (--min-free-disk ${this.minFreeBytes} bytes): writes are refused until space returns`,
    );
  }

  /** Counts appended bytes against the free space until the next look. */
  written(bytes: number): void {
    if (this.minFreeBytes === 0) return;
    this.sinceLook += bytes;
    if (!this.refusing && this.available - this.sinceLook < this.minFreeBytes) this.update();
    if (this.sinceLook >= this.refreshAfter) void this.refresh();
  }

  /** Looks at the filesystem now (one look at a time); resolves once the figures are current. */
  refresh(): Promise<void> {
    this.looking ??= (async () => {
      try {
        const s = await this.probe(this.opts.dir);
        this.available = s.available;
        this.total = s.total;
        this.sinceLook = 0;
        this.update();
      } catch {
        // Keep the last figures; the next look may work.
      } finally {
        this.looking = null;
      }
    })();
    return this.looking;
  }

  /** Free bytes as estimated now. */
  get freeBytes(): number {
    return Math.max(0, this.available - this.sinceLook);
  }

  /** For the admin API. */
  figures(): { freeBytes: number; totalBytes: number; minFreeBytes: number; refusingWrites: boolean; refusals: number } {
    return { freeBytes: this.freeBytes, totalBytes: this.total, minFreeBytes: this.minFreeBytes, refusingWrites: this.refusing, refusals: this.refusals };
  }

  close(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  private update(): void {
    if (this.minFreeBytes === 0) return;
    const below = this.freeBytes < this.minFreeBytes;
    if (below === this.refusing) return;
    this.refusing = below;
    const fields = { freeBytes: this.freeBytes, minFreeBytes: this.minFreeBytes, dir: this.opts.dir };
    if (below) this.opts.logger?.warn(fields, 'free disk space below the reserve: stream writes are refused until space returns');
    else this.opts.logger?.info(fields, 'free disk space above the reserve again: stream writes accepted');
  }
}
