// The live page of one training run: Plotly curves from the per-step metrics, a step slider over
// the sampled trajectories, and the checkpoints. Metrics come embedded up to the page's last step,
// then over /ws/training/<id>/?after_step=<last step drawn>; a reconnect resumes after the last step
// it drew, so no step is missed or drawn twice. Everything the model wrote is set with textContent.
(function () {
  "use strict";
  var root = document.getElementById("training-run");
  if (!root) { return; }
  var runId = root.dataset.runId;
  var connection = document.getElementById("run-connection");
  var slider = document.getElementById("step-slider");
  var stepLabel = document.getElementById("step-label");
  var samplesBody = document.querySelector("#samples tbody");
  var samplesEmpty = document.getElementById("samples-empty");
  var rows = [];  // metrics payloads {seq, step, stage, data}, in step order
  var lastStep = 0;
  var ended = false;
  var delay = 500;
  var followLatest = true;
  var shownStep = null;
  var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";

  var CHARTS = [
    {id: "chart-reward", title: "Reward (hack rate beside it)", series: [
      ["reward_mean", "reward mean"], ["reward_max", "reward max"], ["hack_rate", "hack rate", "y2"]],
      y2: "hack rate"},
    {id: "chart-rates", title: "Rates over rollouts", series: [
      ["pass_rate", "pass rate"], ["faster_than_eager_rate", "faster than eager"],
      ["faster_than_compile_rate", "faster than compile"], ["hack_rate", "hack rate"]]},
    {id: "chart-kl", title: "KL to the reference", series: [["kl", "KL"]]},
    {id: "chart-losses", title: "Losses", series: [
      ["policy_loss", "policy"], ["value_loss", "value"], ["sft_loss", "SFT"]]},
    {id: "chart-entropy", title: "Entropy", series: [["entropy", "entropy"]]},
    {id: "chart-length", title: "Response length (tokens)", series: [["response_length_mean", "mean length"]]},
    {id: "chart-latency", title: "Evaluator latency (s)", series: [
      ["eval_latency_mean_s", "mean"], ["eval_latency_max_s", "max"]]}
  ];

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }

  function fmt(x, digits) { return (typeof x === "number") ? x.toFixed(digits) : "—"; }

  function drawCharts() {
    if (!window.Plotly) { return; }
    var steps = rows.map(function (r) { return r.step; });
    CHARTS.forEach(function (chart) {
      var target = document.getElementById(chart.id);
      if (!target) { return; }
      var traces = chart.series.map(function (s) {
        return {x: steps, y: rows.map(function (r) { var v = r.data[s[0]]; return typeof v === "number" ? v : null; }),
                name: s[1], mode: "lines+markers", type: "scatter", yaxis: s[2] || "y", connectgaps: false};
      });
      var layout = {title: {text: chart.title, font: {size: 14}}, height: 300,
                    margin: {l: 50, r: chart.y2 ? 60 : 20, t: 36, b: 70},
                    xaxis: {title: {text: "step", standoff: 4}}, legend: {orientation: "h", y: -0.32},
                    template: "plotly_white"};
      if (chart.y2) {
        layout.yaxis2 = {title: {text: chart.y2}, overlaying: "y", side: "right", range: [0, 1],
                         tickformat: ".0%", dtick: 0.25, showgrid: false, zeroline: false};
      }
      window.Plotly.react(target, traces, layout, {responsive: true, displaylogo: false});
    });
  }

  function addRows(payloads) {
    var added = false;
    payloads.forEach(function (p) {
      if (p.step <= lastStep) { return; }  // never twice
      rows.push(p);
      lastStep = p.step;
      added = true;
    });
    if (added) {
      drawCharts();
      slider.max = String(lastStep);
      slider.disabled = false;
      if (followLatest) { slider.value = String(lastStep); showSamples(lastStep); }
    }
  }

  function renderSamples(step, items) {
    if (String(step) !== slider.value) { return; }  // an older answer
    shownStep = items.length ? step : null;
    stepLabel.textContent = String(step);
    while (samplesBody.firstChild) { samplesBody.removeChild(samplesBody.firstChild); }
    items.forEach(function (s) {
      var tr = el("tr");
      tr.dataset.step = String(s.step);
      tr.appendChild(el("td", "", s.position));
      tr.appendChild(el("td", "", s.task));
      tr.appendChild(el("td", "", s.group + "." + s.index));
      tr.appendChild(el("td", "", fmt(s.reward, 3)));
      tr.appendChild(el("td", "", s.status));
      tr.appendChild(el("td", "", typeof s.speedup_eager === "number" ? s.speedup_eager.toFixed(2) + "×" : "—"));
      var cell = el("td");
      cell.appendChild(el("pre", "sample-response", s.response));
      (s.turns || []).slice(1).forEach(function (t, i) {
        var d = el("details");
        d.appendChild(el("summary", "", "turn " + (i + 2)));
        d.appendChild(el("pre", "", t.text));
        cell.appendChild(d);
      });
      tr.appendChild(cell);
      samplesBody.appendChild(tr);
    });
    samplesEmpty.hidden = items.length > 0;
  }

  function showSamples(step) {
    stepLabel.textContent = String(step);
    fetch("/api/training/" + runId + "/samples?step=" + Number(step), {credentials: "same-origin"})
      .then(function (r) { return r.json(); })
      .then(function (body) { renderSamples(step, body.items || []); })
      .catch(function () { /* the next slider move or state message tries again */ });
  }

  slider.addEventListener("input", function () {
    followLatest = Number(slider.value) >= lastStep;
    showSamples(Number(slider.value));
  });

  function showCheckpoints(list) {
    var ul = document.getElementById("checkpoints");
    if (!ul || !list) { return; }
    while (ul.firstChild) { ul.removeChild(ul.firstChild); }
    if (!list.length) { ul.appendChild(el("li", "muted none", "none yet")); }
    list.forEach(function (c) {
      var li = el("li", "", "step " + c.step + " (" + c.stage + ")");
      li.dataset.step = String(c.step);
      if (c.submitter) {
        li.appendChild(document.createTextNode(" · "));
        var a = el("a", "checkpoint-submitter", c.submitter);
        a.href = c.submitter_url;
        li.appendChild(a);
      }
      ul.appendChild(li);
    });
  }

  function showState(state) {
    if (!state) { return; }
    var status = document.getElementById("run-status");
    status.textContent = state.status;
    status.className = "status status-" + String(state.status).replace(/[^a-z_]/g, "");
    document.getElementById("run-step").textContent = String(state.step);
    document.getElementById("run-total").textContent = String(state.total_steps);
    if (state.resumed_from_step !== null && state.resumed_from_step !== undefined) {
      document.getElementById("run-resumed").textContent = "· resumed from step " + state.resumed_from_step;
    }
    if (state.error) {
      document.getElementById("run-error").textContent = state.error;
      document.getElementById("run-error-box").hidden = false;
    }
    showCheckpoints(state.checkpoints);
    if (state.last_sample_step !== null && shownStep !== state.last_sample_step && followLatest &&
        Number(slider.value) === state.last_sample_step) {
      showSamples(state.last_sample_step);
    }
  }

  function connect() {
    var socket;
    try {
      socket = new WebSocket(scheme + window.location.host + "/ws/training/" + runId + "/?after_step=" + lastStep);
    } catch (e) { retry(); return; }
    socket.onopen = function () { delay = 500; connection.textContent = "· live"; };
    socket.onmessage = function (message) {
      var msg = JSON.parse(message.data);
      if (msg.type === "metrics") {
        addRows([msg.metrics]);
      } else if (msg.type === "state") {
        showState(msg.state);
      } else if (msg.type === "end") {
        ended = true;
        showState(msg.state);
        root.dataset.finished = "1";
        connection.textContent = "· finished";
        var cancel = document.getElementById("cancel-button");
        if (cancel) { cancel.disabled = true; }
      }
    };
    socket.onclose = function () { if (!ended) { retry(); } };
  }

  function retry() {
    connection.textContent = "· reconnecting…";
    window.setTimeout(connect, delay);
    delay = Math.min(delay * 2, 15000);
  }

  var embedded = document.getElementById("training-metrics");
  addRows(embedded ? JSON.parse(embedded.textContent) : []);
  if (!rows.length) { drawCharts(); }
  root.dataset.chartsReady = "1";
  if (window.WebSocket) { connect(); }
})();
