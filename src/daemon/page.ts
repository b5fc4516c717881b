/**
 * The daemon's live page: per-owner memory over time (from /v1/memory), the stage clocks
 * (from /metrics), the input level, the running transcript, and a talk button that streams
 * the microphone over a WebSocket and plays the reply.
 */
export function livePage(): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>voxslab</title>
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;max-width:980px;color:#222}
h1{font-size:1.3em;margin:0 0 .5em}
#plot{border:1px solid #ccc;width:940px;height:260px}
.row{display:flex;gap:2em;align-items:flex-start;margin-top:1em}
#legend span{display:inline-block;margin-right:1em}
#transcript{border:1px solid #ccc;min-height:6em;padding:.5em;white-space:pre-wrap;width:360px}
button{font-size:1.1em;padding:.4em 1.2em}
#level{width:200px;height:12px;border:1px solid #999;position:relative}
#level div{background:#3a3;height:100%;width:0}
table{border-collapse:collapse}td{padding:0 .6em;text-align:right}
</style></head><body>
<h1>voxslab daemon</h1>
<div id="status">connecting…</div>
<canvas id="plot" width="940" height="260"></canvas>
<div id="legend"></div>
<div class="row">
 <div><button id="talk">Talk</button> <div>input level</div><div id="level"><div></div></div><div id="conv"></div></div>
 <div><b>Transcript</b><div id="transcript"></div></div>
 <div><b>Stage clocks (s)</b><table id="stages"></table></div>
 <div><b>Ring high water</b><table id="rings"></table></div>
</div>
<script>
const token = new URLSearchParams(location.search).get('access_token');
const q = token ? '?access_token=' + encodeURIComponent(token) : '';
const headers = token ? { Authorization: 'Bearer ' + token } : {};
const colors = ['#1f77b4','#ff7f0e','#2ca02c','#d62728','#9467bd','#8c564b','#e377c2','#7f7f7f','#bcbd22','#17becf'];
const series = new Map(); let samples = 0;
async function poll() {
  try {
    const m = await (await fetch('/v1/memory' + q, { headers })).json();
    const owners = m.owners || {};
    // An owner that appears later starts with zeros, so every series shares the time axis.
    for (const name of Object.keys(owners)) { if (!series.has(name)) series.set(name, new Array(Math.min(samples, 240)).fill(0)); }
    for (const [name, s] of series) { s.push(owners[name] ? owners[name].held : 0); if (s.length > 240) s.shift(); }
    samples++;
    draw(m);
    const text = await (await fetch('/metrics' + q, { headers })).text();
    const rows = [...text.matchAll(/^voxslab_stage_clock_seconds\\{clock="([^"]+)"\\} ([0-9.e+-]+)$/gm)];
    document.getElementById('stages').innerHTML = rows.map(r => '<tr><td>' + r[1] + '</td><td>' + Number(r[2]).toFixed(3) + '</td></tr>').join('');
    const rings = [...text.matchAll(/^voxslab_ring_high_water_ratio\\{conversation="([^"]+)",ring="([^"]+)"\\} ([0-9.e+-]+)$/gm)];
    document.getElementById('rings').innerHTML = rings
      .map(r => '<tr><td>' + r[1] + ' ' + r[2] + '</td><td>' + (100 * Number(r[3])).toFixed(0) + ' %</td></tr>')
      .join('');
    document.getElementById('status').textContent = 'held ' + m.totals.current + ' bytes of a ' + m.totals.limit + '-byte cap';
  } catch (e) { document.getElementById('status').textContent = 'daemon unreachable: ' + e.message; }
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
    s.forEach((v, k) => { const x = 40 + k * (c.width - 50) / span, y = c.height - 20 - v / max * (c.height - 40); k ? g.lineTo(x, y) : g.moveTo(x, y); });
    g.stroke();
    legend.push('<span style="color:' + col + '">■ ' + name + ' ' + (s[s.length - 1] / 1048576).toFixed(2) + ' MiB</span>');
  }
  g.fillStyle = '#444'; g.fillText((max / 1048576).toFixed(1) + ' MiB', 2, 14); g.fillText('bytes held per owner, sampled every 0.5 s', 40, c.height - 4);
  document.getElementById('legend').innerHTML = legend.join('');
}
setInterval(poll, 500); poll();

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
