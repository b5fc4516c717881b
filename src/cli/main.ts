#!/usr/bin/env node
/** The `voxslab` executable: one command line (app.ts), its exit code the process's. */
import { reportFailure } from './failure.js';

// Loaded here rather than imported: an error while the program loads (the native addon refusing
// an environment variable) is reported as one line with its exit code, like any other.
import('./app.js')
  .then(({ runCli }) => runCli(process.argv.slice(2)), reportFailure)
  .then((code) => {
    process.exitCode = code;
    // The command is over: whatever it left running (a worker after a fault) does not hold the process.
    setTimeout(() => process.exit(code), 2000).unref();
  });
