// `voxslab bench serve --quick --json` as an operator runs it (system tier: about a minute and a
// half): the daemon in one child process, its clients in another. Admission by compute holds
// under load: more conversations than the daemon's capacity come, every one past it is refused
// with 503 and Retry-After, and none admitted is lost or underruns at device pace; the abusers
// beside well-behaved clients are shut out without taking one of them down.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { LoadResult } from '../../bench/load.js';

const cli = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));

t.test(
  'bench serve: more conversations than capacity; those past it refused with Retry-After, none admitted lost or underrun; the abusive mix is shut out',
  (t) => {
    const r = spawnSync(process.execPath, [cli, 'bench', 'serve', '--quick', '--json'], { encoding: 'utf8', timeout: 600_000 });
    t.equal(r.status, 0, r.stderr.slice(-800));
    const { load } = JSON.parse(r.stdout) as { load: LoadResult };
    t.equal(load.capacity, load.capacityOption, `the daemon admitted its capacity, ${load.capacityOption} conversations`);
    t.equal(load.refused, 2, 'both attempts past the limit were refused with 503');
    t.equal(load.refusedWithRetryAfter, 2, 'each saying Retry-After');
    t.match(load.refusals, [/the engine keeps 4 in real time/], `by compute: ${load.refusals.join('; ')}`);
    t.equal(load.lost, 0, 'no admitted conversation was lost');
    t.equal(load.underrunMs, 0, 'none admitted underran');
    t.ok(load.turns >= load.capacity, `${load.turns} turns answered`);
    for (const k of ['rssMiB', 'accountedMiB', 'runtimeMiB', 'residualMiB'] as const) t.ok(load[k] > 0, `${k} ${load[k]}`);
    t.equal(load.abusive.lost, 0, 'the abusive mix cost no well-behaved conversation');
    t.equal(load.abusive.clients, load.capacityOption, 'and every one was admitted beside the abusers');
    const outcome = (kind: string): string[] => load.abusive.abusers.filter((a) => a.kind === kind).map((a) => a.outcome);
    t.match(outcome('flood')[0], /closed by the daemon/, 'the flood was closed');
    for (const o of outcome('slow-loris')) t.equal(o, 'closed by the daemon', 'a slow-loris upgrade was closed');
    t.match(outcome('garbage')[0], /connections closed: \d+× 1007$/, 'every garbage frame closed its socket with 1007');
    t.end();
  },
);
