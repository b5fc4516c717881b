/** piscina task of `voxslab quantize`: one tensor per call, in the pool's worker threads. */
import { quantizeStored } from '../src/model/format/quant.js';

export default quantizeStored;
