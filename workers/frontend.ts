// The frontend stage's worker thread (see src/pipeline/stages.ts).
import { serveStage } from '../src/runtime/host.js';

serveStage('frontend');
