/* Clock times (`<time data-clock="time|minutes|weekday">`, e.g. a failing task's next retry) in the
   browser's time zone; the server renders them in UTC as a fallback. */
(function () {
  "use strict";

  const formats = {
    time: new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" }),
    minutes: new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" }),
    // Within the week ahead (a usage limit's reset): "Tue 17:40".
    weekday: new Intl.DateTimeFormat(undefined, {
      weekday: "short",
      hour: "2-digit",
      minute: "2-digit",
    }),
  };
  const full = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" });

  function localise(root) {
    (root || document).querySelectorAll("time[data-clock]").forEach((el) => {
      const date = new Date(el.getAttribute("datetime"));
      if (Number.isNaN(date.getTime())) return;
      el.textContent = (formats[el.dataset.clock] || formats.time).format(date);
      el.title = full.format(date);
    });
  }

  if (window.htmx) window.htmx.onLoad(localise);
  else document.addEventListener("DOMContentLoaded", () => localise(document));
})();
