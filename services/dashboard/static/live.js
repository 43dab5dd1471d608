// Keeps a server-rendered page current: new event log lines arrive by server-sent events (/live),
// and each batch of them triggers one refetch of the page's fragment (the fleet, the queue, a claim).
(function () {
  "use strict";
  const pad = (n) => String(n).padStart(2, "0");

  // Local ISO 8601 with the browser's offset, e.g. 2026-11-03T14:02:11+01:00.
  function localIso(date) {
    const offset = -date.getTimezoneOffset();
    const sign = offset >= 0 ? "+" : "-";
    const abs = Math.abs(offset);
    return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T` +
      `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}` +
      `${sign}${pad(Math.floor(abs / 60))}:${pad(abs % 60)}`;
  }

  function localiseTimes(root) {
    root.querySelectorAll("time[datetime]").forEach((t) => {
      t.textContent = localIso(new Date(t.getAttribute("datetime")));
    });
  }

  const overview = document.getElementById("overview");
  let refreshing = null;
  function refreshSoon() {
    if (!overview || refreshing) return;
    refreshing = setTimeout(async () => {
      try {
        const response = await fetch(overview.dataset.fragment, { cache: "no-store" });
        overview.innerHTML = await response.text();
        localiseTimes(overview);
      } finally {
        refreshing = null;
      }
    }, 300);
  }

  const log = document.getElementById("log");
  const events = document.getElementById("events");
  const after = log ? log.dataset.seq : "0";
  const badge = document.getElementById("live");
  const source = new EventSource(`/live?after=${after}`);
  source.addEventListener("lines", (message) => {
    if (events) {
      for (const html of JSON.parse(message.data)) {
        events.insertAdjacentHTML("afterbegin", html);
      }
      while (events.children.length > 200) events.lastElementChild.remove();
      localiseTimes(events);
    }
    refreshSoon();
  });
  source.onopen = () => { badge.textContent = "live"; badge.classList.remove("off"); };
  source.onerror = () => {
    // CLOSED: refused (too many pages open: 503), so the browser will not try again by itself
    badge.textContent = source.readyState === EventSource.CLOSED ? "not live: reload later" : "reconnecting";
    badge.classList.add("off");
  };
  localiseTimes(document);
})();
