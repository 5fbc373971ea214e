// The /voice page: microphone -> 16 kHz PCM over a WebSocket; agent audio back, played in order.
"use strict";
const RATE = 16000;
const $ = (id) => document.getElementById(id);
let ctx = null, gain = null, ws = null, playAt = 0, sources = [], chunks = 0, bargeins = 0, turnEnd = {};

function log(cls, text, extra) {
  const row = document.createElement("div");
  row.className = "row " + cls;
  row.textContent = text;
  if (extra) { const t = document.createElement("span"); t.className = "t"; t.textContent = extra; row.appendChild(t); }
  $("log").prepend(row);
}

function play(buf) {
  const pcm = new Int16Array(buf);
  const audio = ctx.createBuffer(1, pcm.length, RATE);
  const ch = audio.getChannelData(0);
  for (let i = 0; i < pcm.length; i++) ch[i] = pcm[i] / 32768;
  const src = ctx.createBufferSource();
  src.buffer = audio;
  src.connect(gain);
  playAt = Math.max(playAt, ctx.currentTime);
  src.start(playAt);
  playAt += audio.duration;
  sources.push(src);
  src.onended = () => { sources = sources.filter((s) => s !== src); };
  chunks += 1;
  $("chunks").textContent = chunks;
}

function clearAudio() {
  for (const s of sources) { try { s.stop(); } catch (e) { /* already stopped */ } }
  sources = [];
  playAt = 0;
}

function onEvent(ev) {
  switch (ev.type) {
    case "ready": $("status").textContent = "listening (" + ev.asr + ", " + ev.llm + ")"; break;
    case "partial": $("partial").textContent = ev.text; break;
    case "turn": turnEnd[ev.turn] = ev; $("partial").textContent = ""; log("caller", "caller: " + ev.text, ev.rule + ", turn end " + ev.end_ms + " ms after speech"); break;
    case "final": log("caller", "final: " + ev.text, "decode " + ev.decode_ms + " ms"); break;
    case "ack": case "answer": case "followup":
      log(ev.type, ev.type + ": " + ev.text, ev.after_turn_ms == null ? "" : "+" + ev.after_turn_ms + " ms after turn end");
      if (ev.type === "ack" && turnEnd[ev.turn]) $("firstaudio").textContent = (turnEnd[ev.turn].end_ms + (ev.after_turn_ms || 0)).toFixed(0);
      break;
    case "bargein": bargeins += 1; $("bargeins").textContent = bargeins; break;
    case "clear": clearAudio(); gain.gain.value = 1; break;
    // the caller's line rose: the server pauses the agent; what this page has queued
    // (up to the server's 0.1 s lead) is muted, not paused: the microphone shares the context
    case "hold": gain.gain.value = 0; break;
    case "resume": gain.gain.value = 1; break;
  }
}

async function start() {
  $("start").disabled = true;
  ctx = new AudioContext({ sampleRate: RATE });
  await ctx.resume();
  gain = ctx.createGain();
  gain.connect(ctx.destination);
  const stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: true, noiseSuppression: false } });
  const url = new URL("ws", location.href.endsWith("/") ? location.href : location.href + "/");
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  if ($("lang").value) url.searchParams.set("lang", $("lang").value);
  ws = new WebSocket(url);
  ws.binaryType = "arraybuffer";
  ws.onmessage = (m) => { if (typeof m.data === "string") onEvent(JSON.parse(m.data)); else play(m.data); };
  ws.onclose = () => { $("status").textContent = "closed"; };
  await new Promise((ok) => { ws.onopen = ok; });
  const mic = ctx.createMediaStreamSource(stream);
  const proc = ctx.createScriptProcessor(512, 1, 1);  // 32 ms: small capture latency
  proc.onaudioprocess = (e) => {
    if (ws.readyState !== WebSocket.OPEN) return;
    const x = e.inputBuffer.getChannelData(0);
    const out = new Int16Array(x.length);
    for (let i = 0; i < x.length; i++) out[i] = Math.max(-1, Math.min(1, x[i])) * 32767;
    ws.send(out.buffer);
  };
  mic.connect(proc);
  proc.connect(ctx.destination);  // keeps the processor running; it outputs silence
  $("status").textContent = "connecting…";
}

$("start").addEventListener("click", () => { start().catch((e) => { $("status").textContent = "error: " + e; }); });
