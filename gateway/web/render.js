// chatgate web chat: replies rendered as Markdown, sanitized.
//
// The model's text is untrusted. Two independent layers keep it inert:
// marked is told to escape every piece of raw HTML it meets (so "<b>" is
// shown as text), and its output then goes through DOMPurify with a short
// allowlist of tags and attributes, links limited to http, https and
// mailto and opened in a new tab without an opener or a referrer. Images
// become links, so a reply never makes the page load anything.
//
// window.chatgateRender.markdown(el, text) renders at once;
// window.chatgateRender.append(el, piece, after) adds a streamed piece and
// re-renders the whole text so far on the next animation frame.
(function () {
  "use strict";

  const TAGS = ["p", "br", "strong", "em", "del", "s", "code", "pre", "a", "ul", "ol", "li", "blockquote",
    "h1", "h2", "h3", "h4", "h5", "h6", "hr", "table", "thead", "tbody", "tr", "th", "td"];
  const PROTOCOLS = ["http:", "https:", "mailto:"];

  function escapeHTML(s) {
    return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  }

  // safeURL returns the URL as the browser would follow it, or "" when it
  // is not an absolute http, https or mailto URL. Parsing (rather than
  // matching a prefix) sees through tabs, case and entity tricks.
  function safeURL(href) {
    let u;
    try { u = new URL(href); } catch (e) { return ""; }
    return PROTOCOLS.indexOf(u.protocol) >= 0 ? u.href : "";
  }

  let parse = null;
  let purify = null;
  if (window.marked && window.marked.Marked && window.DOMPurify) {
    const md = new window.marked.Marked({ gfm: true, breaks: true, async: false });
    md.use({
      renderer: {
        // Raw HTML from the model is shown as the text it is.
        html(token) {
          const t = escapeHTML(token.text);
          return token.block ? "<p>" + t.trim().replace(/\n/g, "<br>\n") + "</p>\n" : t;
        },
        // A single newline is a line break, as on Telegram; the newline
        // kept after <br> keeps the text's own line breaks in textContent.
        br() { return "<br>\n"; },
        // An image would be a request to wherever the model points: show
        // a link to it instead.
        image(token) {
          return '<a href="' + escapeHTML(token.href) + '">' + escapeHTML(token.text || token.href) + "</a>";
        },
        checkbox(token) { return token.checked ? "☑ " : "☐ "; },
      },
    });
    parse = function (text) { return md.parse(text); };

    purify = window.DOMPurify(window); // an instance of our own: its hooks touch nothing else
    if (!purify.isSupported) purify = null;
  }
  if (purify) {
    purify.addHook("uponSanitizeAttribute", function (node, data) {
      const name = node.nodeName;
      const v = data.attrValue;
      switch (data.attrName) {
        case "href": {
          const u = name === "A" ? safeURL(v) : "";
          if (u) data.attrValue = u; else data.keepAttr = false;
          break;
        }
        case "class": // only a code block's language
          data.keepAttr = name === "CODE" && /^language-[\w+#.-]{1,40}$/.test(v);
          break;
        case "align":
          data.keepAttr = (name === "TH" || name === "TD") && /^(left|right|center)$/.test(v);
          break;
        case "start":
          data.keepAttr = name === "OL" && /^\d{1,9}$/.test(v);
          break;
      }
    });
    purify.addHook("afterSanitizeAttributes", function (node) {
      if (node.nodeName === "A" && node.hasAttribute("href")) {
        node.setAttribute("target", "_blank");
        node.setAttribute("rel", "noopener noreferrer");
      }
    });
  }

  const config = {
    ALLOWED_TAGS: TAGS,
    ALLOWED_ATTR: ["href", "title", "class", "align", "start"],
    ALLOW_DATA_ATTR: false,
    ALLOW_ARIA_ATTR: false,
    ALLOWED_URI_REGEXP: /^(?:https?|mailto):/i,
    RETURN_DOM_FRAGMENT: true,
  };

  function copyFallback(text) {
    const ta = document.createElement("textarea");
    ta.value = text;
    ta.setAttribute("readonly", "");
    ta.className = "offscreen";
    const focused = document.activeElement;
    document.body.appendChild(ta);
    ta.select();
    let ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    ta.remove();
    if (focused && focused.focus) focused.focus();
    return ok;
  }

  function copy(btn, text) {
    function done(ok) {
      btn.textContent = ok ? "Copied" : "Copy failed";
      btn.classList.toggle("copied", ok);
      clearTimeout(btn.resetTimer);
      btn.resetTimer = setTimeout(function () { btn.textContent = "Copy"; btn.classList.remove("copied"); }, 2000);
    }
    // The clipboard API exists only on https or localhost pages, and may
    // be refused without focus: the old way then still works.
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(function () { done(true); }, function () { done(copyFallback(text)); });
    } else {
      done(copyFallback(text));
    }
  }

  // decorate adds what the sanitized HTML cannot carry: a copy button and
  // language label on each code block, a scroll box around each table.
  function decorate(frag) {
    for (const n of Array.from(frag.childNodes)) {
      if (n.nodeType === Node.TEXT_NODE && !n.nodeValue.trim()) n.remove();
    }
    for (const pre of Array.from(frag.querySelectorAll("pre"))) {
      const code = pre.querySelector("code");
      const box = document.createElement("div");
      box.className = "code";
      const bar = document.createElement("div");
      bar.className = "code-bar";
      const lang = document.createElement("span");
      lang.className = "code-lang";
      const m = code && /^language-(.+)$/.exec(code.className);
      lang.textContent = m ? m[1] : "";
      const btn = document.createElement("button");
      btn.type = "button";
      btn.className = "copy";
      btn.textContent = "Copy";
      btn.setAttribute("aria-label", "Copy code");
      btn.addEventListener("click", function () { copy(btn, (code || pre).textContent); });
      bar.append(lang, btn);
      pre.replaceWith(box);
      box.append(bar, pre);
    }
    for (const table of Array.from(frag.querySelectorAll("table"))) {
      const box = document.createElement("div");
      box.className = "table";
      table.replaceWith(box);
      box.appendChild(table);
    }
    return frag;
  }

  function paint(el, text) {
    const box = document.createElement("div");
    if (parse && purify) {
      box.className = "md";
      box.appendChild(decorate(purify.sanitize(parse(text), config)));
    } else {
      // Without the libraries nothing is interpreted: plain text.
      box.className = "md plain";
      box.textContent = text;
    }
    el.replaceChildren(box);
  }

  const sources = new WeakMap(); // bubble -> its Markdown so far
  const dirty = new Set();
  let frame = 0;
  let after = null;

  function flush() {
    frame = 0;
    for (const el of dirty) paint(el, sources.get(el) || "");
    dirty.clear();
    const f = after;
    after = null;
    if (f) f();
  }

  window.chatgateRender = {
    // markdown renders text into el now, replacing what streamed before.
    markdown(el, text) {
      sources.set(el, text);
      dirty.delete(el);
      paint(el, text);
    },
    // append adds a streamed piece to el's text and renders it all on the
    // next animation frame (once per frame however many pieces came);
    // after runs once that is done.
    append(el, piece, then) {
      sources.set(el, (sources.get(el) || "") + piece);
      dirty.add(el);
      if (then) after = then;
      if (!frame) frame = requestAnimationFrame(flush);
    },
  };
})();
