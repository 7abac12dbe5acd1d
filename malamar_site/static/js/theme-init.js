/* The theme: the stored choice (light, dark) or the system's. Runs before the first paint (a
   blocking script in <head>) so a page never flashes in the wrong theme; the header's toggle
   and Settings' System / Light / Dark choice change it, in every tab. */
(function () {
  "use strict";

  const KEY = "malamar-theme";
  const dark = window.matchMedia("(prefers-color-scheme: dark)");

  function stored() {
    try {
      return ["light", "dark"].find((theme) => theme === window.localStorage.getItem(KEY)) || null;
    } catch (e) {
      return null; // storage refused: a choice lasts for this page only
    }
  }

  function apply(forced) {
    const theme = forced || stored() || (dark.matches ? "dark" : "light");
    const label = `Switch to ${theme === "dark" ? "light" : "dark"} theme`;
    document.documentElement.setAttribute("data-theme", theme);
    document.querySelectorAll("[data-theme-toggle]").forEach((button) => {
      button.setAttribute("aria-label", label);
      button.title = label;
    });
    const choice = stored() || "system";
    document.querySelectorAll("[data-theme-choice] input[name=theme]").forEach((input) => (input.checked = input.value === choice));
  }

  function choose(theme) {
    try {
      if (theme) window.localStorage.setItem(KEY, theme);
      else window.localStorage.removeItem(KEY);
    } catch (e) {
      /* see stored() */
    }
    apply(theme);
  }

  document.addEventListener("click", (event) => {
    if (!event.target.closest || !event.target.closest("[data-theme-toggle]")) return;
    choose(document.documentElement.getAttribute("data-theme") === "dark" ? "light" : "dark");
  });
  document.addEventListener("change", (event) => {
    if (!event.target.matches("[data-theme-choice] input[name=theme]")) return;
    choose(event.target.value === "system" ? null : event.target.value);
  });
  dark.addEventListener("change", () => apply());
  window.addEventListener("storage", (event) => event.key === KEY && apply());
  document.addEventListener("DOMContentLoaded", () => apply());
  apply();
})();
