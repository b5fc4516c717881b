// Worker: attaches to the memory domain and the weights image, sums some tensors' bytes.
import { parentPort, workerData } from 'node:worker_threads';
import { MemoryDomain, type SharedMemoryDomain } from '../../../src/memory/index.js';
import { WeightsImage, type SharedWeightsImage } from '../../../src/model/format/image.js';

const d = workerData as { shared: SharedMemoryDomain; image: SharedWeightsImage; names: string[] };
const domain = MemoryDomain.attach(d.shared);
const before = domain.snapshot().held.total;
const image = WeightsImage.attach(d.image);
const sums = d.names.map((n) => image.bytes(n).reduce((a, b) => (a * 31 + b) >>> 0, 7));
const sameBuffer = image.bytes(d.names[0]!).buffer === d.image.slabs[image.get(d.names[0]!).slab];
parentPort!.postMessage({ sums, sameBuffer, heldBefore: before, heldAfter: domain.snapshot().held.total });
