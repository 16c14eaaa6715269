// kg review console, screen 3: a branch selector shows the chosen branch as soon as it changes.
// (No inline handler: the console's Content-Security-Policy allows scripts from files only.)
(function () {
  "use strict";
  document.addEventListener("change", function (evt) {
    var select = evt.target.closest("select[data-autosubmit]");
    if (select && select.form) {
      select.form.requestSubmit ? select.form.requestSubmit() : select.form.submit();
    }
  });
})();
