/// <reference lib="dom" />
// The live page in a real headless Chromium with a fake microphone fed from a WAV file: it
// holds a conversation with the daemon on the tiny model, and the test saves a screenshot.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';
import { makeCheckpoint } from '../../src/io/checkpoint.js';
import { serve, stop } from './daemon.js';
import { scratchDir } from '../helpers.js';

const chromium = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => spawnSync(p, ['--version']).status === 0);
const fixture = fileURLToPath(new URL('../../../test/fixtures/hello.wav', import.meta.url));

t.test(
  'the live page talks to the daemon from a browser microphone and shows memory and transcript',
  { skip: chromium === undefined ? 'chromium is not installed (apt-get install chromium; .ci/run installs it)' : false },
  async (t) => {
    const work = scratchDir('voxslab-page-');
    const model = join(work, 'tiny');
    makeCheckpoint({ config: 'tiny', seed: 3, out: model, dtype: 'f32' });
    const d = await serve(model, ['--reply', '2']);
    t.teardown(() => void d.proc.kill('SIGKILL'));
    const browser = await puppeteer.launch({
      executablePath: chromium!,
      headless: true,
      args: [
        '--no-sandbox',
        '--use-fake-ui-for-media-stream',
        '--use-fake-device-for-media-stream',
        `--use-file-for-fake-audio-capture=${fixture}`,
        '--autoplay-policy=no-user-gesture-required',
        '--mute-audio',
      ],
    });
    t.teardown(() => browser.close());
    const page = await browser.newPage();
    await page.setViewport({ width: 1000, height: 700 });
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(d.url, { waitUntil: 'load' });
    await page.waitForFunction(() => document.getElementById('status')!.textContent!.startsWith('held '), { timeout: 20_000 });
    await page.click('#talk');
    await page.waitForFunction(() => document.getElementById('conv')!.textContent!.startsWith('conversation '), { timeout: 20_000 });
    // The fake microphone plays the fixture (about 3 s): let it speak, then end the turn.
    await new Promise((r) => setTimeout(r, 3500));
    await page.click('#talk');
    await page.waitForFunction(() => document.body.dataset.turns === '1', { timeout: 60_000 });
    // Let the plot take a few more samples with the conversation's bytes in it.
    await new Promise((r) => setTimeout(r, 1500));
    const state = await page.evaluate(() => {
      const c = document.getElementById('plot') as HTMLCanvasElement;
      const px = c.getContext('2d')!.getImageData(0, 0, c.width, c.height).data;
      let inked = 0;
      for (let i = 3; i < px.length; i += 4) if (px[i]! > 0) inked++;
      return {
        transcript: document.getElementById('transcript')!.textContent!,
        legend: document.getElementById('legend')!.textContent!,
        inked,
        stages: document.getElementById('stages')!.textContent!,
        rings: document.getElementById('rings')!.textContent!,
      };
    });
    // The reply's text follows the turn; the babble's first token may itself begin with a space
    // (the turn's length, and so the reply, follows the browser's timing).
    t.match(state.transcript, /\[you spoke [0-9.]+ s\] {1,2}\S/, 'the transcript shows the turn and the reply text');
    t.match(state.legend, /model\/0 [0-9.]+ MiB/, 'the plot’s legend names the model’s bytes');
    t.match(state.legend, /conversation\/0/, '… and the conversation’s');
    t.ok(state.inked > 500, `the memory plot is drawn (${state.inked} pixels)`);
    t.match(state.stages, /encoder/, 'the stage clocks are shown');
    t.match(state.rings, /0 output\d+ %/, 'and the rings’ high water');
    const shot = join(work, 'live-page.png');
    await page.screenshot({ path: shot });
    t.ok(statSync(shot).size > 10_000, `screenshot saved: ${shot}`);
    t.same(errors, [], 'no page errors');
    await browser.close();
    t.equal(await stop(d), 0);
  },
);
