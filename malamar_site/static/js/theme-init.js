/* The theme: the stored choice (light, dark) or the system's. Runs before the first paint (a
   blocking script in <head>) so a page never flashes in the wrong theme; the header's toggle
   (app.css names it after the other theme) and Settings' System / Light / Dark choice change
   it, in every tab. */
(function () {
  "use strict";

  const KEY = "malamar-theme";
  const dark = window.matchMedia("(prefers-color-scheme: dark)");
  let choice = null; // light, dark or null (the system's); if storage is refused, this page's

  function apply() {
    try {
      choice = ["light", "dark"].find((theme) => theme === window.localStorage.getItem(KEY)) || null;
    } catch (e) {
      /* storage refused: the choice lasts for this page only */
    }
    document.documentElement.setAttribute("data-theme", choice || (dark.matches ? "dark" : "light"));
    const radios = document.querySelectorAll("[data-theme-choice] input[name=theme]");
    radios.forEach((input) => (input.checked = input.value === (choice || "system")));
  }

  function choose(theme) {
    choice = theme;
    try {
      if (theme) window.localStorage.setItem(KEY, theme);
      else window.localStorage.removeItem(KEY);
    } catch (e) {
      /* see apply() */
    }
    apply();
  }

  document.addEventListener("click", (event) => {
    if (!event.target.closest || !event.target.closest("[data-theme-toggle]")) return;
    choose(document.documentElement.getAttribute("data-theme") === "dark" ? "light" : "dark");
  });
  document.addEventListener("change", (event) => {
    if (!event.target.matches("[data-theme-choice] input[name=theme]")) return;
    choose(event.target.value === "system" ? null : event.target.value);
  });
  dark.addEventListener("change", apply);
  window.addEventListener("storage", (event) => event.key === KEY && apply());
  document.addEventListener("DOMContentLoaded", apply);
  apply();
})();
