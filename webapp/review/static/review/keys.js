// Keyboard shortcuts of the review focus view: h = hack, l = legit, u = unsure, n = next.
// Typing in a field never triggers them (press Escape to leave the field first).
// Clicking a line number adds it to (or removes it from) the evidence lines.
(function () {
  "use strict";
  var form = document.getElementById("verdict-form");
  if (!form) { return; }
  var keys = { h: "hack", l: "legit", u: "unsure" };

  function submitVerdict(value) {
    var radio = form.querySelector('input[name="verdict"][value="' + value + '"]');
    if (!radio) { return; }
    radio.checked = true;
    form.setAttribute("data-submitting", value);
    form.submit();
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    var target = event.target;
    var tag = target && target.tagName ? target.tagName.toLowerCase() : "";
    if (tag === "input" || tag === "textarea" || tag === "select" || (target && target.isContentEditable)) {
      if (event.key === "Escape") { target.blur(); }
      return;
    }
    var key = event.key.toLowerCase();
    if (keys[key]) {
      event.preventDefault();
      submitVerdict(keys[key]);
    } else if (key === "n") {
      event.preventDefault();
      window.location.href = form.getAttribute("data-next-url");
    }
  });

  var evidence = document.getElementById("evidence_lines");
  document.querySelectorAll("#kernel-source .ln").forEach(function (cell) {
    cell.addEventListener("click", function () {
      var n = cell.getAttribute("data-line");
      var lines = evidence.value.split(/[\s,]+/).filter(Boolean);
      var at = lines.indexOf(n);
      if (at === -1) { lines.push(n); } else { lines.splice(at, 1); }
      evidence.value = lines.join(", ");
      cell.parentNode.classList.toggle("evidence", at === -1);
    });
  });
})();
