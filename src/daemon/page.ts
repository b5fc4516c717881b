/**
 * The daemon's live page, for a person watching it: what is held against the cap and how full
 * the daemon is, per-owner memory over time (from /v1/memory), each open conversation (its
 * state, turns, last first-audio latency, barge-ins, input level; from /v1/conversations), each
 * stage's busy share and each ring's fill as bars (from /metrics), the running transcript, and a
 * talk button that streams the microphone over a WebSocket and plays the reply. Sizes are in
 * B, KiB, MiB or GiB with the binary prefixes (`formatSize`, whose source the page runs). With a
 * token it is opened as `/?access_token=…`, and every request it makes carries the token.
 */
/** Bytes as a person reads them: B, or KiB/MiB/GiB/TiB with two decimals under 10 and one above (the page runs this source). */
export function formatSize(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let n = bytes;
  let u = 0;
  while (n >= 1024 && u < units.length - 1) {
    n /= 1024;
    u++;
  }
  return `${u === 0 ? String(n) : n.toFixed(n < 10 ? 2 : 1)} ${units[u]}`;
}

export function livePage(): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>voxslab</title>
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;max-width:980px;color:#222}
h1{font-size:1.3em;margin:0 0 .3em}
#summary{font-size:1.05em;margin-bottom:.6em}
#plot{border:1px solid #ccc;width:940px;height:220px}
.row{display:flex;gap:2em;align-items:flex-start;margin-top:1em;flex-wrap:wrap}
#legend span{display:inline-block;margin-right:1em}
#transcript{border:1px solid #ccc;min-height:6em;padding:.5em;white-space:pre-wrap;width:360px}
button{font-size:1.1em;padding:.4em 1.2em}
#level{width:200px;height:12px;border:1px solid #999;position:relative}
#level div{background:#3a3;height:100%;width:0}
table{border-collapse:collapse}td,th{padding:.1em .6em;text-align:right}th{font-weight:600;border-bottom:1px solid #ccc}
td.name{text-align:left}
.bar{display:inline-block;width:160px;height:10px;border:1px solid #999;vertical-align:middle}
.bar div{height:100%;background:#1f77b4}
</style></head><body>
<h1>voxslab daemon</h1>
<div id="summary">connecting…</div>
<canvas id="plot" width="940" height="220"></canvas>
<div id="legend"></div>
<div class="row"><div><b>Conversations</b><table id="conversations"></table></div></div>
<div class="row">
 <div><b>Stage busy (share of the last second)</b><table id="stages"></table></div>
 <div><b>Ring fill (most ever in use)</b><table id="rings"></table></div>
</div>
<div class="row">
 <div><button id="talk">Talk</button> <div>input level</div><div id="level"><div></div></div><div id="conv"></div></div>
 <div><b>Transcript</b><div id="transcript"></div></div>
</div>
<script>
const token = new URLSearchParams(location.search).get('access_token');
const q = token ? '?access_token=' + encodeURIComponent(token) : '';
const headers = token ? { Authorization: 'Bearer ' + token } : {};
const colors = ['#1f77b4','#ff7f0e','#2ca02c','#d62728','#9467bd','#8c564b','#e377c2','#7f7f7f','#bcbd22','#17becf'];
const series = new Map(); let samples = 0;
let busyBefore = null;
${formatSize.toString()}
function bar(fraction) {
  const f = Math.max(0, Math.min(1, fraction));
  return '<span class="bar"><div style="width:' + (100 * f).toFixed(1) + '%"></div></span> ' + (100 * f).toFixed(0) + ' %';
}
function row(cells) { return '<tr>' + cells.map((c, i) => '<td' + (i === 0 ? ' class="name"' : '') + '>' + c + '</td>').join('') + '</tr>'; }
async function getJson(path) { return (await fetch(path + q, { headers })).json(); }
async function poll() {
  try {
    const [m, h, list, text] = await Promise.all([
      getJson('/v1/memory'), getJson('/healthz'), getJson('/v1/conversations'),
      fetch('/metrics' + q, { headers }).then((r) => r.text()),
    ]);
    const owners = m.owners || {};
    // An owner that appears later starts with zeros, so every series shares the time axis.
    for (const name of Object.keys(owners)) { if (!series.has(name)) series.set(name, new Array(Math.min(samples, 240)).fill(0)); }
    for (const [name, s] of series) { s.push(owners[name] ? owners[name].held : 0); if (s.length > 240) s.shift(); }
    samples++;
    draw();
    const convs = list.conversations;
    document.getElementById('summary').innerHTML = 'model <b>' + h.model + '</b> · held <b id="held">' + formatSize(m.totals.current) +
      '</b> of a <b id="cap">' + formatSize(m.totals.limit) + '</b> cap · conversations <b id="capacity">' + convs.length + ' of ' +
      h.maxConversations + '</b> · resident <b id="rss">' + formatSize(m.runtime.rss) + '</b>';
    document.getElementById('conversations').innerHTML =
      '<tr><th>id</th><th>state</th><th>turns</th><th>first audio</th><th>barge-ins</th><th>input level</th></tr>' +
      convs.map((c) => row([c.id, c.state, c.turns, c.firstAudioMs === null ? '–' : c.firstAudioMs.toFixed(0) + ' ms', c.bargeIns, bar(c.inputPeak)])).join('');
    const busy = new Map([...text.matchAll(/^voxslab_stage_busy_seconds\\{stage="([^"]+)"\\} ([0-9.e+-]+)$/gm)].map((r) => [r[1], Number(r[2])]));
    const now = performance.now();
    if (busyBefore !== null) {
      const dt = (now - busyBefore.at) / 1000;
      document.getElementById('stages').innerHTML = [...busy].map(([k, v]) => row([k, bar((v - (busyBefore.busy.get(k) || 0)) / dt)])).join('');
    }
    busyBefore = { at: now, busy };
    const rings = [...text.matchAll(/^voxslab_ring_high_water_ratio\\{conversation="([^"]+)",ring="([^"]+)"\\} ([0-9.e+-]+)$/gm)];
    // /metrics labels rings by the engine's index; the page names conversations by the daemon's id.
    const ids = new Map(convs.map((c) => [String(c.index), c.id]));
    document.getElementById('rings').innerHTML = rings.map((r) => row(['conversation ' + (ids.get(r[1]) ?? r[1]) + ' ' + r[2], bar(Number(r[3]))])).join('');
    document.body.dataset.polls = String(samples);
  } catch (e) { document.getElementById('summary').textContent = 'daemon unreachable: ' + e.message; }
}
function draw() {
  const c = document.getElementById('plot'), g = c.getContext('2d');
  g.clearRect(0, 0, c.width, c.height);
  let max = 1; for (const s of series.values()) for (const v of s) max = Math.max(max, v);
  let i = 0; const legend = [];
  for (const [name, s] of series) {
    const col = colors[i++ % colors.length];
    g.strokeStyle = col; g.lineWidth = 2; g.beginPath();
    const span = Math.max(60, s.length - 1);
    s.forEach((v, k) => { const x = 60 + k * (c.width - 70) / span, y = c.height - 20 - v / max * (c.height - 40); k ? g.lineTo(x, y) : g.moveTo(x, y); });
    g.stroke();
    legend.push('<span style="color:' + col + '" data-owner="' + name + '">■ ' + name + ' ' + formatSize(s[s.length - 1]) + '</span>');
  }
  g.fillStyle = '#444'; g.fillText(formatSize(max), 2, 14); g.fillText('bytes held per owner, sampled every second', 60, c.height - 4);
  document.getElementById('legend').innerHTML = legend.join('');
}
setInterval(poll, 1000); poll();

let ws = null, ctx = null, src = null, proc = null, playAt = 0;
const transcript = document.getElementById('transcript');
document.getElementById('talk').onclick = async () => {
  const b = document.getElementById('talk');
  if (ws) { ws.send(JSON.stringify({ type: 'end_turn' })); stopMic(); b.textContent = 'Talk'; return; }
  ctx = new AudioContext();
  const stream = await navigator.mediaDevices.getUserMedia({ audio: { echoCancellation: true } });
  const scheme = location.protocol === 'https:' ? 'wss://' : 'ws://';
  const auth = token ? '&access_token=' + encodeURIComponent(token) : '';
  ws = new WebSocket(scheme + location.host + '/v1/ws?format=f32&inputRate=' + ctx.sampleRate + auth);
  ws.binaryType = 'arraybuffer';
  ws.onmessage = (m) => {
    if (typeof m.data === 'string') {
      const e = JSON.parse(m.data);
      if (e.type === 'ready') { window.outputRate = e.outputRate; document.getElementById('conv').textContent = 'conversation ' + e.id; }
      if (e.type === 'text') transcript.textContent += e.delta;
      if (e.type === 'turn_end') { transcript.textContent += '\\n'; document.body.dataset.turns = String((Number(document.body.dataset.turns) || 0) + 1); }
      if (e.type === 'speech_end') transcript.textContent += '[you spoke ' + (e.samples / ctx.sampleRate).toFixed(1) + ' s] ';
      return;
    }
    const pcm = new Float32Array(m.data);
    const buf = ctx.createBuffer(1, pcm.length, window.outputRate || 48000); buf.copyToChannel(pcm, 0);
    const node = ctx.createBufferSource(); node.buffer = buf; node.connect(ctx.destination);
    playAt = Math.max(playAt, ctx.currentTime); node.start(playAt); playAt += buf.duration;
  };
  ws.onclose = () => { ws = null; b.textContent = 'Talk'; };
  src = ctx.createMediaStreamSource(stream);
  proc = ctx.createScriptProcessor(4096, 1, 1);
  proc.onaudioprocess = (ev) => {
    const x = ev.inputBuffer.getChannelData(0);
    let e = 0; for (const v of x) e += v * v;
    document.querySelector('#level div').style.width = Math.min(100, Math.sqrt(e / x.length) * 400) + '%';
    if (ws && ws.readyState === 1) ws.send(new Float32Array(x).buffer);
  };
  src.connect(proc); proc.connect(ctx.destination);
  b.textContent = 'End turn';
};
function stopMic() { if (proc) { proc.disconnect(); src.disconnect(); proc = null; } }
</script></body></html>
`;
}
