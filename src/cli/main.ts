#!/usr/bin/env node
/** The `voxslab` executable: one command line (app.ts), its exit code the process's. */
import { runCli } from './app.js';

runCli(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
  // The command is over: whatever it left running (a worker after a fault) does not hold the process.
  setTimeout(() => process.exit(code), 2000).unref();
});
