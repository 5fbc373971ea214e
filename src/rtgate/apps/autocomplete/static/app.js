// As-you-type suggestions over a WebSocket: every input change sends {seq, prefix};
// only the answer to the latest seq is shown; a late cloud answer replaces a placeholder.
// When typing stops (PAUSE_MS without a key, or Enter) the whole text is sent once more
// with pause: true, so that a short ask may still reach the big model.
(function () {
  "use strict";
  var input = document.getElementById("q");
  var list = document.getElementById("suggestions");
  var status = document.getElementById("status");
  var log = document.querySelector("#log tbody");
  var budget = Number(document.getElementById("budget").textContent) || 150;
  var seq = 0, latest = 0, socket = null, queued = null;
  var PAUSE_MS = 800, idle = null, cloudPending = false;

  function connect() {
    var proto = location.protocol === "https:" ? "wss:" : "ws:";
    socket = new WebSocket(proto + "//" + location.host + "/v1/complete/ws");
    socket.onopen = function () {
      status.textContent = "connected";
      if (queued) { socket.send(queued); queued = null; }
    };
    socket.onclose = function () { status.textContent = "disconnected, retrying…"; setTimeout(connect, 1000); };
    socket.onmessage = function (ev) { onMessage(JSON.parse(ev.data)); };
  }

  function send(prefix, pause) {
    seq += 1; latest = seq;
    if (!pause) cloudPending = false;
    var body = { seq: seq, prefix: prefix, budget_ms: budget };
    if (pause) body.pause = true;
    var msg = JSON.stringify(body);
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(msg); else queued = msg;
  }

  function row(m, label) {
    var tr = document.createElement("tr");
    [m.seq, m.prefix || "", label, m.elapsed_ms.toFixed(2)].forEach(function (v) {
      var td = document.createElement("td"); td.textContent = v; tr.appendChild(td);
    });
    log.insertBefore(tr, log.firstChild);
    while (log.children.length > 12) log.removeChild(log.lastChild);
  }

  function show(candidates, route, ms) {
    list.innerHTML = "";
    candidates.forEach(function (c) {
      var li = document.createElement("li");
      var text = document.createElement("span"); text.textContent = c.text;
      var meta = document.createElement("span"); meta.className = "meta src-" + c.source;
      meta.textContent = c.source + " · " + c.intent + " · " + ms.toFixed(1) + " ms";
      li.appendChild(text); li.appendChild(meta);
      li.dataset.route = route;
      // on cloud_async only the placeholder waits; fast suggestions shown beside it (a
      // partial answer to a multi-part ask) can be picked
      var pending = route === "cloud_async" && c.source === "cloud";
      if (pending) li.className = "pending";
      li.onclick = function () { if (!pending) { input.value = c.text; send(c.text); } };
      list.appendChild(li);
    });
    status.textContent = "route: " + route + " · " + ms.toFixed(2) + " ms";
  }

  function onMessage(m) {
    if (m.type === "error") { status.textContent = "error: " + m.error.message; return; }
    if (m.seq !== latest) return; // an answer to an older prefix
    if (m.type === "late") { cloudPending = true; return; }
    if (m.type === "suggestions") {
      if (m.route === "cloud_async") cloudPending = true;
      row(m, m.route);
      // silent: nothing new to say; keep what is shown unless the box is empty
      if (m.route !== "silent" || !input.value.trim()) show(m.candidates, m.route, m.elapsed_ms);
    } else if (m.type === "followup") {
      row(m, "cloud (later)");
      show(m.candidates, "cloud", m.elapsed_ms);
    }
  }

  function paused() {
    clearTimeout(idle); idle = null;
    // the server already works on this text in the cloud: nothing to add
    if (input.value.trim() && !cloudPending) send(input.value, true);
  }

  input.addEventListener("input", function () {
    send(input.value);
    clearTimeout(idle); idle = setTimeout(paused, PAUSE_MS);
  });
  input.addEventListener("keydown", function (ev) { if (ev.key === "Enter") paused(); });
  connect();
})();
