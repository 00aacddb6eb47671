// The live trajectory of one rollout: /ws/rollouts/<id>/?after_seq=<last seen>. Reconnects with
// backoff and resumes after the last event it rendered, so nothing is missed or shown twice.
// Everything the model wrote is set with textContent, never parsed as HTML.
(function () {
  "use strict";
  var root = document.getElementById("rollout");
  if (!root || !window.WebSocket) { return; }
  var rolloutId = root.dataset.rolloutId;
  var list = document.getElementById("events");
  var candidates = document.querySelector("#candidates tbody");
  var connection = document.getElementById("rollout-connection");
  var lastSeq = -1;
  var ended = false;
  var delay = 500;
  var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }

  function fmt(x, digits) { return (typeof x === "number") ? x.toFixed(digits) : ""; }

  function setText(id, text) { var n = document.getElementById(id); if (n) { n.textContent = text; } }

  function showState(state) {
    if (!state) { return; }
    var status = document.getElementById("rollout-status");
    if (status) { status.textContent = state.status; status.className = "status status-" + state.status; }
    setText("rollout-stop", state.stop_reason || "—");
    setText("rollout-turns", state.turns);
    setText("rollout-tokens", (state.prompt_tokens || 0) + (state.completion_tokens || 0));
    var progress = document.getElementById("rollout-progress");
    if (state.best_kernel_id && progress && !document.getElementById("rollout-best")) {
      var link = el("a", "", "kernel " + Number(state.best_kernel_id));
      link.id = "rollout-best";
      link.href = "/kernels/" + Number(state.best_kernel_id) + "/";
      progress.appendChild(document.createTextNode(" · best: "));
      progress.appendChild(link);
    }
  }

  function addCandidate(ev) {
    if (!candidates || candidates.querySelector('tr[data-seq="' + ev.seq + '"]')) { return; }
    var result = ev.evaluation || {};
    var row = el("tr");
    row.dataset.seq = ev.seq;
    row.appendChild(el("td", "", ev.turn));
    row.appendChild(el("td", "", (ev.data && ev.data.tool) || ""));
    var cell = el("td");
    cell.appendChild(el("span", "status status-" + String(result.status || "").replace(/[^a-z_]/g, ""), result.status || ""));
    row.appendChild(cell);
    var speed = result.speedup && result.speedup.eager;
    row.appendChild(el("td", "", typeof speed === "number" ? speed.toFixed(2) + "×" : ""));
    row.appendChild(el("td", "", fmt(ev.reward, 3)));
    candidates.appendChild(row);
  }

  function render(ev) {
    var item = el("li", "event kind-" + String(ev.kind).replace(/[^a-z_]/g, ""));
    item.id = "event-" + ev.seq;
    item.dataset.seq = ev.seq;
    var head = "#" + ev.seq + " · " + ev.kind + (ev.role ? " (" + ev.role + ")" : "") + " · turn " + ev.turn;
    if (ev.prompt_tokens || ev.completion_tokens) { head += " · " + ev.prompt_tokens + "+" + ev.completion_tokens + " tokens"; }
    head += " · " + fmt(ev.elapsed_s, 1) + " s";
    item.appendChild(el("div", "event-head", head));
    if (ev.kind === "evaluation") {
      var result = ev.evaluation || {};
      var speed = result.speedup && result.speedup.eager;
      item.appendChild(el("div", "event-verdict", ((ev.data && ev.data.tool) || "evaluate") + ": " + (result.status || "?") +
        (typeof speed === "number" ? " · " + speed.toFixed(2) + "× vs eager" : "") +
        (typeof ev.reward === "number" ? " · reward " + ev.reward.toFixed(3) : "")));
      if (ev.data && ev.data.kernel_source) {
        var details = el("details");
        details.appendChild(el("summary", "", "kernel"));
        details.appendChild(el("pre", "", ev.data.kernel_source));
        item.appendChild(details);
      }
      addCandidate(ev);
    } else if (ev.kind === "tool_call") {
      item.appendChild(el("div", "", "calls " + ((ev.tool_call && ev.tool_call.name) || "?")));
    } else if (ev.kind === "system" || ev.kind === "user") {
      var sys = el("details");
      sys.appendChild(el("summary", "", ev.kind === "system" ? "system prompt" : "task prompt"));
      sys.appendChild(el("pre", "", ev.content));
      item.appendChild(sys);
    } else {
      item.appendChild(el("pre", "event-content", ev.content));
    }
    list.appendChild(item);
  }

  function connect() {
    var socket;
    try {
      socket = new WebSocket(scheme + window.location.host + "/ws/rollouts/" + rolloutId + "/?after_seq=" + lastSeq);
    } catch (e) { retry(); return; }
    socket.onopen = function () { delay = 500; if (connection) { connection.textContent = "· live"; } };
    socket.onmessage = function (message) {
      var msg = JSON.parse(message.data);
      if (msg.type === "event") {
        if (msg.event.seq <= lastSeq) { return; }  // never twice
        render(msg.event);
        lastSeq = msg.event.seq;
      } else if (msg.type === "state") {
        showState(msg.state);
      } else if (msg.type === "end") {
        ended = true;
        showState(msg.state);
        root.dataset.finished = "1";
        if (connection) { connection.textContent = "· finished"; }
        var cancel = document.getElementById("cancel-button");
        if (cancel) { cancel.disabled = true; }
      }
    };
    socket.onclose = function () { if (!ended) { retry(); } };
  }

  function retry() {
    if (connection) { connection.textContent = "· reconnecting…"; }
    window.setTimeout(connect, delay);
    delay = Math.min(delay * 2, 15000);
  }

  connect();
})();
