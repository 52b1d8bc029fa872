// Live regions for the fedload admin UI. No libraries: poll the page's own URL for its live
// region (?partial=live) every couple of seconds and swap it in when it changed.
(function () {
  "use strict";

  var region = document.querySelector("[data-live]");
  var status = document.getElementById("live-status");
  if (!region || !status) {
    return;
  }
  var root = document.body.getAttribute("data-root") || "";
  var interval = Number(region.getAttribute("data-live-interval")) || 2000;
  var last = null;
  var busy = false;

  function show(text, problem) {
    status.textContent = text;
    status.classList.toggle("problem", Boolean(problem));
  }

  function liveUrl() {
    var url = new URL(window.location.href);
    url.searchParams.set("partial", "live");
    return url.toString();
  }

  function clock() {
    return new Date().toLocaleTimeString([], { hour12: false });
  }

  function tick() {
    if (busy || document.hidden) {
      return;
    }
    busy = true;
    fetch(liveUrl(), {
      headers: { "X-Fedload-Fragment": "1" },
      credentials: "same-origin",
      cache: "no-store"
    })
      .then(function (response) {
        if (response.status === 401) {
          // The session ended (sign-out elsewhere, key rotated): go and sign in again.
          var here = window.location.pathname + window.location.search;
          window.location.assign(root + "/login?next=" + encodeURIComponent(here));
          return null;
        }
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        if (html === null) {
          return;
        }
        if (html !== last) {
          last = html;
          region.innerHTML = html;
          region.setAttribute("data-updated", String(Date.now()));
        }
        show("live · " + clock(), false);
      })
      .catch(function (error) {
        show("live updates paused (" + error.message + "), retrying", true);
      })
      .then(function () {
        busy = false;
      });
  }

  show("live", false);
  window.setInterval(tick, interval);
  document.addEventListener("visibilitychange", tick);
})();
