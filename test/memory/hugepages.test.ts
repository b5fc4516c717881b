// Transparent huge pages on the weights image's slabs: the advice reaches the kernel (Linux).
import t from 'tap';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { MemoryDomain } from '../../src/memory/index.js';
import { loadCheckpoint, makeCheckpoint } from '../../src/io/checkpoint.js';
import { native } from '../../src/native.js';
import { scratchDir } from '../helpers.js';

const THP = '/sys/kernel/mm/transparent_hugepage/enabled';
const skip = process.platform !== 'linux' || !existsSync(THP) ? 'Linux with transparent huge pages only' : false;

/** Bytes of this process's mappings that carry the huge-page advice (VmFlags `hg` in smaps). */
function advisedBytes(): number {
  let total = 0;
  let size = 0;
  for (const line of readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
    if (line.startsWith('Size:')) size = Number(line.split(/\s+/)[1]) * 1024;
    else if (line.startsWith('VmFlags:') && line.split(/\s+/).includes('hg')) total += size;
  }
  return total;
}

/** Every slab this file makes stays mapped to its end: one collected between two readings of smaps would take its advice out of the second. */
const kept: unknown[] = [];

t.test('a slab created with hugePages carries the advice; one without does not', { skip }, async (t) => {
  const domain = MemoryDomain.create({ limit: '1GiB' });
  const owner = domain.owner('model');
  const before = advisedBytes();
  const plain = domain.createSlab(owner, 8 << 20);
  t.equal(advisedBytes(), before, 'no advice by default');
  const huge = domain.createSlab(owner, 8 << 20, { hugePages: true });
  const page = native.pageSize();
  t.ok(advisedBytes() - before >= (8 << 20) - 2 * page, 'the slab’s whole pages are advised');
  t.ok(plain.buffer.byteLength > 0 && huge.buffer.byteLength > 0);
  kept.push(domain, plain, huge);
});

t.test('the weights image’s slabs are advised before they are read', { skip }, async (t) => {
  const dir = scratchDir('voxslab-thp-');
  makeCheckpoint({ config: 'tiny', seed: 5, out: join(dir, 'ck'), dtype: 'f32' });
  const before = advisedBytes();
  const { image, release } = loadCheckpoint(join(dir, 'ck'), MemoryDomain.create({ limit: '1GiB' }));
  const page = native.pageSize();
  const slabBytes = image.slabs.reduce((a, s) => a + s.byteLength, 0);
  t.ok(advisedBytes() - before >= slabBytes - 2 * page * image.slabs.length, `${slabBytes} bytes of slabs advised`);
  release();
});
