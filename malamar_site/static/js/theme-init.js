/* Runs before the first paint (a blocking script in <head>): apply the stored theme, or the
   system's, so a page never flashes in the wrong theme. */
(function () {
  var theme = null;
  try {
    theme = window.localStorage.getItem("malamar-theme");
  } catch (e) {
    theme = null;
  }
  if (theme !== "light" && theme !== "dark") {
    theme = window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  }
  document.documentElement.setAttribute("data-theme", theme);
})();
