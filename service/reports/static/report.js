// Live progress on the report page of a queued or running replay: poll the replay's status
// (same origin), update the bar, reload once it has finished so the report fills in.
(function () {
  "use strict";
  var box = document.getElementById("progress");
  if (!box) { return; }
  var state = box.getAttribute("data-status");
  if (state !== "queued" && state !== "running") { return; }
  var url = box.getAttribute("data-status-url");
  var bar = document.getElementById("progress-bar");
  var text = document.getElementById("progress-text");
  var chunks = document.getElementById("progress-chunks");
  var eta = document.getElementById("progress-eta");
  function duration(s) {
    if (s < 90) { return Math.max(1, Math.round(s)) + " s"; }
    if (s < 5400) { return Math.round(s / 60) + " min"; }
    return (s / 3600).toFixed(1) + " h";
  }
  var badge = document.getElementById("status");
  function show(s) {
    if (bar) { bar.value = s.progress; }
    if (text) { text.textContent = (100 * s.progress).toFixed(1) + " %"; }
    if (chunks) { chunks.textContent = String(s.chunks_done); }
    if (eta) {
      eta.textContent = (s.eta_seconds === null || s.eta_seconds === undefined) ? "time left not known yet"
        : "about " + duration(s.eta_seconds) + " left" + (s.status === "queued" ? " (estimated at submission, on one worker)" : "");
    }
    if (badge) { badge.textContent = s.status; badge.className = "status status-" + s.status; }
  }
  // ?wait=1: the server holds each read up to a second while the replay runs and answers
  // within 25 ms of its end, so the page refreshes then rather than up to a second later
  function poll() {
    fetch(url + "?wait=1", { headers: { "Accept": "application/json" }, cache: "no-store" })
      .then(function (r) { if (!r.ok) { throw new Error("status " + r.status); } return r.json(); })
      .then(function (s) {
        show(s);
        if (s.status === "queued" || s.status === "running") { window.setTimeout(poll, 50); }
        else { window.location.reload(); }
      })
      .catch(function () { window.setTimeout(poll, 4000); });
  }
  window.setTimeout(poll, 1000);
})();
