// The tidings console's one script: live values over server-sent events.
// The page names its stream in <body data-live-src>; each "update" event carries
// {key: text}, written into every element marked data-live="key" as text (never as
// HTML). An "end" event (the session ended) stops the stream for good.
(function () {
  "use strict";
  var source = document.body.getAttribute("data-live-src");
  if (!source || typeof EventSource === "undefined") {
    return;
  }
  var marked = {};
  document.querySelectorAll("[data-live]").forEach(function (element) {
    var key = element.getAttribute("data-live");
    (marked[key] = marked[key] || []).push(element);
  });
  var stream = new EventSource(source);
  stream.addEventListener("update", function (event) {
    var values;
    try {
      values = JSON.parse(event.data);
    } catch (error) {
      return;
    }
    Object.keys(values).forEach(function (key) {
      (marked[key] || []).forEach(function (element) {
        if (element.textContent !== String(values[key])) {
          element.textContent = String(values[key]);
          element.classList.add("changed");
        }
      });
    });
    document.body.setAttribute("data-live-updated", String(Date.now()));
  });
  stream.addEventListener("end", function () {
    stream.close();
    document.body.setAttribute("data-live-ended", "true");
  });
})();
