// Live operation pages: one EventSource per open page; on "changed" the live part is
// fetched again and swapped in, on "end" (automation stopped) the stream is closed.
// The server reads each operation's row at most once a second, however many pages watch.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var live = document.getElementById("live");
  if (!live || live.dataset.live !== "on" || !window.EventSource) return;
  var source = new EventSource(live.dataset.stream);
  var shown = Number(live.dataset.version);
  function refresh() {
    fetch(live.dataset.fragment, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null) return;
        live.innerHTML = html;
        // How many times the page changed without a reload (the browser tests read it).
        live.dataset.refreshed = String(Number(live.dataset.refreshed || 0) + 1);
      });
  }
  source.addEventListener("changed", function (e) {
    var version = JSON.parse(e.data).version;
    if (version !== shown) refresh();
    shown = version;
    live.dataset.version = String(version);
  });
  source.addEventListener("end", function (e) {
    source.close();
    refresh();
    live.dataset.live = "ended";
    // An ended operation can no longer be cancelled: its form goes with the stream.
    var cancel = document.getElementById("cancel");
    if (cancel && JSON.parse(e.data).ended) cancel.remove();
  });
});
