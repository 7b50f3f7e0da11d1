(function () {
  "use strict";
  // Starts the proof of work in a Web Worker made from the page's own worker source (CSP:
  // worker-src blob:), reports progress in the live region, and posts the answer.
  var form = document.getElementById("challenge-form");
  var status = document.getElementById("challenge-status");
  var fallback = document.getElementById("challenge-fallback");
  var data = form.dataset;
  var said = 0;
  function say(text) {
    status.textContent = text;
  }
  function giveUp() {
    say(data.failed);
    fallback.hidden = false;
  }
  var worker;
  try {
    var source = document.getElementById("challenge-worker").textContent;
    worker = new Worker(URL.createObjectURL(new Blob([source], { type: "text/javascript" })));
  } catch (e) {
    giveUp();
    return;
  }
  worker.onerror = giveUp;
  worker.onmessage = function (event) {
    var message = event.data;
    if (typeof message.nonce === "number") {
      worker.terminate();
      form.elements.nonce.value = String(message.nonce);
      say(data.solved);
      form.submit();
    } else if (typeof message.tried === "number" && Date.now() - said >= 2000) {
      // At most every two seconds: a screen reader reads every change of a live region.
      said = Date.now();
      say(data.progress.replace("{n}", message.tried.toLocaleString(document.documentElement.lang)));
    }
  };
  worker.postMessage({ challenge: form.elements.token.value, difficulty: parseInt(data.difficulty, 10) });
})();
