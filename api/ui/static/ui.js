// The console's only script of its own: the upload's progress bar. Everything else is htmx attributes, and every
// page reads without JavaScript.
(function () {
  "use strict";
  document.addEventListener("htmx:xhr:progress", function (event) {
    var form = event.target.closest ? event.target.closest("#submit-form") : null;
    if (!form || !event.detail.lengthComputable) {
      return;
    }
    var percent = Math.round((event.detail.loaded / event.detail.total) * 100);
    var bar = document.getElementById("upload-progress");
    var label = document.getElementById("upload-percent");
    if (bar) {
      bar.hidden = false;
      bar.value = percent;
    }
    if (label) {
      label.textContent = percent < 100 ? "Uploading: " + percent + "%" : "Uploaded; checking the video…";
    }
  });
  document.addEventListener("htmx:beforeRequest", function (event) {
    if (event.target.id === "submit-form") {
      var button = event.target.querySelector("button[type=submit]");
      if (button) {
        button.disabled = true;
      }
    }
  });
})();
