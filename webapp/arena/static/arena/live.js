// Evaluations still queued or running: listen on /ws/evaluations/<id>/ and reload the page when one
// finishes. Without a websocket (old proxy, closed connection) fall back to polling by reload.
(function () {
  var live = document.querySelectorAll("[data-evaluation-live]");
  if (!live.length) { return; }
  var fallback = function () { window.setTimeout(function () { window.location.reload(); }, 10000); };
  var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
  live.forEach(function (node) {
    var status = node.querySelector(".status");
    var socket;
    try {
      socket = new WebSocket(scheme + window.location.host + "/ws/evaluations/" + node.dataset.evaluationLive + "/");
    } catch (e) { fallback(); return; }
    var done = false;
    socket.onmessage = function (message) {
      var state = JSON.parse(message.data);
      if (status) { status.textContent = state.status; status.className = "status status-" + state.status; }
      if (state.finished) { done = true; socket.close(); window.location.reload(); }
    };
    socket.onclose = function () { if (!done) { fallback(); } };
  });
})();
