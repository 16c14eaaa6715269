// kg review console: the little script htmx does not cover. No build step, no network.
(function () {
  "use strict";
  // htmx swaps only 2xx answers by default; the console's 4xx fragments are messages to show.
  document.addEventListener("htmx:beforeSwap", function (evt) {
    var status = evt.detail.xhr.status;
    if (status >= 400 && status < 500) {
      evt.detail.shouldSwap = true;
      evt.detail.isError = false;
    }
  });
  // A confirm() before a destructive action: <button data-confirm="Delete branch x?">.
  document.addEventListener("click", function (evt) {
    var el = evt.target.closest("[data-confirm]");
    if (el && !window.confirm(el.getAttribute("data-confirm"))) {
      evt.preventDefault();
      evt.stopImmediatePropagation();
    }
  }, true);
})();
