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
import { readWavSamples, scratchDir } from '../helpers.js';
import { formatSize } from '../../src/daemon/page.js';
import WebSocket from 'ws';

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
    await page.waitForFunction(() => document.getElementById('held') !== null, { timeout: 20_000 });
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
    t.match(state.stages, /depthformer\s*\d+ %/, 'each stage’s busy share is shown');
    t.match(state.rings, /conversation \d+ output\s*\d+ %/, 'and the rings’ fill');
    const shot = join(work, 'live-page.png');
    await page.screenshot({ path: shot });
    t.ok(statSync(shot).size > 10_000, `screenshot saved: ${shot}`);
    t.same(errors, [], 'no page errors');
    await browser.close();
    t.equal(await stop(d), 0);
  },
);

t.test(
  'the live page with a token: its numbers are what /v1/memory, /healthz, /v1/conversations and /metrics say at the same moment',
  { skip: chromium === undefined ? 'chromium is not installed (apt-get install chromium; .ci/run installs it)' : false },
  async (t) => {
    const work = scratchDir('voxslab-page-numbers-');
    const model = join(work, 'tiny');
    makeCheckpoint({ config: 'tiny', seed: 3, out: model, dtype: 'f32' });
    const token = 'page-secret';
    const d = await serve(model, ['--reply', '2', '--token', token]);
    t.teardown(() => void d.proc.kill('SIGKILL'));
    const auth = { Authorization: `Bearer ${token}` };
    const json = async <T>(path: string): Promise<T> => (await fetch(`${d.url}${path}`, { headers: auth })).json() as Promise<T>;
    // One conversation that stays open after a turn: a row with a turn and a first-audio latency.
    const speech = readWavSamples(fixture);
    const opened = (await (
      await fetch(`${d.url}/v1/conversations`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: '{"format":"f32"}' })
    ).json()) as { id: string; ws: string };
    const ws = new WebSocket(`${d.ws}${opened.ws}`, { headers: auth });
    await new Promise<void>((resolve, reject) => {
      ws.on('open', () => {
        const all = Buffer.from(speech.samples.buffer, speech.samples.byteOffset, speech.samples.byteLength);
        for (let at = 0; at < all.length; at += 4096) ws.send(all.subarray(at, at + 4096));
        ws.send(JSON.stringify({ type: 'end_turn' }));
      });
      ws.on('message', (m: Buffer, binary: boolean) => {
        if (!binary && (JSON.parse(m.toString()) as { type: string }).type === 'turn_end') resolve();
      });
      ws.on('error', reject);
    });
    const browser = await puppeteer.launch({ executablePath: chromium!, headless: true, args: ['--no-sandbox'] });
    t.teardown(() => browser.close());
    const page = await browser.newPage();
    await page.setViewport({ width: 1000, height: 900 });
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(`${d.url}/?access_token=${token}`, { waitUntil: 'load' });
    await page.waitForFunction(() => Number(document.body.dataset.polls ?? 0) >= 3, { timeout: 20_000 });
    // The page's numbers and the routes' at the same moment: right after a poll, nothing moving.
    const read = () =>
      page.evaluate(() => {
        const text = (id: string): string => document.getElementById(id)!.textContent!;
        const cells = (id: string): string[][] =>
          Array.from(document.getElementById(id)!.querySelectorAll('tr')).map((tr) =>
            Array.from(tr.querySelectorAll('td')).map((td) => td.textContent!.trim()),
          );
        const legend = Object.fromEntries(
          Array.from(document.querySelectorAll('#legend span')).map((s) => [(s as HTMLElement).dataset.owner!, s.textContent!]),
        );
        return {
          held: text('held'),
          cap: text('cap'),
          capacity: text('capacity'),
          conversations: cells('conversations'),
          stages: cells('stages'),
          rings: cells('rings'),
          legend,
        };
      });
    let shown = await read();
    let routes: [
      { totals: { current: number; limit: number }; owners: Record<string, { held: number }> },
      { maxConversations: number },
      { conversations: { id: string; index: number; state: string; turns: number; firstAudioMs: number | null; bargeIns: number }[] },
      string,
    ];
    for (let tries = 0; ; tries++) {
      routes = await Promise.all([
        json<(typeof routes)[0]>('/v1/memory'),
        json<(typeof routes)[1]>('/healthz'),
        json<(typeof routes)[2]>('/v1/conversations'),
        fetch(`${d.url}/metrics`, { headers: auth }).then((r) => r.text()),
      ]);
      if (shown.held === formatSize(routes[0].totals.current) || tries === 3) break;
      await new Promise((r) => setTimeout(r, 1100));
      shown = await read();
    }
    const [memory, health, list, metrics] = routes;
    t.equal(shown.held, formatSize(memory.totals.current), `held: ${shown.held}`);
    t.equal(shown.cap, formatSize(memory.totals.limit), `the cap: ${shown.cap}`);
    t.equal(shown.capacity, `${list.conversations.length} of ${health.maxConversations}`, `conversations: ${shown.capacity}`);
    for (const [owner, o] of Object.entries(memory.owners)) t.match(shown.legend[owner], `${owner} ${formatSize(o.held)}`, `the legend: ${owner}`);
    const c = list.conversations[0]!;
    t.same(
      shown.conversations.find((r) => r[0] === c.id)?.slice(0, 5),
      [c.id, c.state, String(c.turns), `${c.firstAudioMs!.toFixed(0)} ms`, String(c.bargeIns)],
      `the conversation's row: ${JSON.stringify(c)}`,
    );
    t.equal(c.turns, 1);
    const stages = [...metrics.matchAll(/^voxslab_stage_busy_seconds\{stage="([^"]+)"\}/gm)].map((m) => m[1]);
    t.same(
      shown.stages.map((r) => r[0]),
      stages,
      'a busy bar per stage',
    );
    const rings = [...metrics.matchAll(/^voxslab_ring_high_water_ratio\{conversation="([^"]+)",ring="([^"]+)"\} ([0-9.e+-]+)$/gm)];
    t.same(
      shown.rings.map((r) => r[0]),
      rings.map((m) => `conversation ${list.conversations.find((c) => String(c.index) === m[1])?.id} ${m[2]}`),
      'a fill bar per ring',
    );
    for (const [i, m] of rings.entries()) t.equal(shown.rings[i]![1], `${(100 * Number(m[3])).toFixed(0)} %`, `ring ${m[2]}: ${shown.rings[i]![1]}`);
    const shot = join(process.env.VOXSLAB_SCREENSHOTS ?? work, 'live-page-numbers.png');
    await page.screenshot({ path: shot, fullPage: true });
    t.ok(statSync(shot).size > 10_000, `screenshot saved: ${shot}`);
    t.same(errors, [], 'no page errors');
    ws.close();
    await browser.close();
    t.equal(await stop(d), 0);
  },
);
