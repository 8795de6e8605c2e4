// Bobbin dashboard: live refresh of the page's [data-live] sections (fetch the same URL, swap those sections by id),
// paused while the tab is hidden or a form field has focus; confirmation for forms with data-confirm. The next
// refresh is scheduled once this one has answered, so a slow server is not sent a new one while it works on the last.
(function () {
  "use strict";
  var INTERVAL = 3000;

  function refresh() {
    var status = document.getElementById("live-status");
    var busy = document.activeElement && /INPUT|SELECT|TEXTAREA/.test(document.activeElement.tagName);
    if (document.hidden || busy || !document.querySelector("[data-live]")) {
      if (status) status.classList.add("paused");
      return schedule();
    }
    fetch(window.location.href, { headers: { "X-Bobbin-Live": "1" }, credentials: "same-origin" })
      .then(function (response) { if (!response.ok) throw new Error(response.status); return response.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (section) {
          var next = fresh.getElementById(section.id);
          if (next) section.replaceWith(document.importNode(next, true));
        });
        if (status) { status.classList.remove("paused"); status.title = "Updated " + new Date().toLocaleTimeString(); }
      })
      .catch(function () { if (status) status.classList.add("paused"); })
      .then(schedule);
  }

  function schedule() { setTimeout(refresh, INTERVAL); }

  document.addEventListener("submit", function (event) {
    var message = event.target.getAttribute("data-confirm");
    if (message && !window.confirm(message)) event.preventDefault();
  });

  schedule();
})();
