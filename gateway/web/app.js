// chatgate web chat: protocol v1 over /ws (docs/protocol.md).
// The resume token, the conversation, the last seen seq and messages not yet
// acknowledged live in localStorage, so a reload or a dropped connection
// resumes where it left off and nothing typed is lost.
(function () {
  "use strict";
  const store = {
    get(k, d) { try { const v = localStorage.getItem("chatgate." + k); return v === null ? d : JSON.parse(v); } catch (e) { return d; } },
    set(k, v) { try { localStorage.setItem("chatgate." + k, JSON.stringify(v)); } catch (e) { /* private mode */ } },
  };
  const params = new URLSearchParams(location.search);
  const token = params.get("token") || "";
  const user = params.get("user") || "";
  const log = document.getElementById("log");
  const statusEl = document.getElementById("status");
  const text = document.getElementById("text");
  const stopBtn = document.getElementById("stop");

  let ws = null;
  let backoff = 500;
  let firstConnect = true;
  let lastSeq = store.get("lastSeq", 0);
  let conversation = store.get("conversation", "");
  let pending = store.get("pending", []); // [{id, text}] sent but not acknowledged
  const bubbles = new Map(); // client id -> reply bubble being streamed
  const shown = new Set(); // seqs already on screen

  function setStatus(s, cls) { statusEl.textContent = s; statusEl.className = "status " + (cls || ""); }
  function scroll() { log.scrollTop = log.scrollHeight; }
  function seen(seq) {
    if (seq > lastSeq) { lastSeq = seq; store.set("lastSeq", lastSeq); }
  }
  function bubble(role, body, cls) {
    const el = document.createElement("div");
    el.className = "msg " + role + (cls ? " " + cls : "");
    el.textContent = body;
    log.appendChild(el);
    scroll();
    return el;
  }
  function notice(s) {
    const el = document.createElement("div");
    el.className = "notice";
    el.textContent = s;
    log.appendChild(el);
    scroll();
  }
  function clear() { log.textContent = ""; shown.clear(); bubbles.clear(); }
  function statusClass(status) { return status === "ok" ? "" : status; }
  function newId() { return "c-" + Date.now().toString(36) + "-" + Math.random().toString(36).slice(2, 8); }
  function send(frame) {
    if (ws && ws.readyState === WebSocket.OPEN) { ws.send(JSON.stringify(frame)); return true; }
    return false;
  }
  function pendingEl(id) { return log.querySelector('[data-id="' + CSS.escape(id) + '"]'); }
  // A user message is "waiting" from its ack until a reply answers it. One
  // reply can answer several: those its covers name (a merged burst), or,
  // in history, every message up to the seq it replies to.
  function answered(ids) {
    for (const id of ids) { const el = pendingEl(id); if (el) el.classList.remove("pending", "waiting"); }
  }
  function answeredUpTo(seq) {
    for (const el of log.querySelectorAll(".msg.user.waiting")) { if (Number(el.dataset.seq) <= seq) el.classList.remove("waiting"); }
  }

  function showHistory(items) {
    for (const m of items) {
      if (shown.has(m.seq)) continue;
      shown.add(m.seq);
      if (m.role === "user" && m.id) {
        const el = pendingEl(m.id);
        if (el) { el.classList.remove("pending"); el.classList.add("waiting"); el.dataset.seq = m.seq; seen(m.seq); continue; }
      }
      if (m.role === "assistant" && m.reply_to) {
        // A reply streamed before the drop: replace the partial bubble.
        for (const [id, el] of bubbles) { if (el.dataset.replyTo === String(m.reply_to)) { el.remove(); bubbles.delete(id); } }
      }
      const el = bubble(m.role, m.text, m.role === "user" ? "waiting" : statusClass(m.status));
      if (m.id) el.dataset.id = m.id;
      el.dataset.seq = m.seq;
      if (m.role === "assistant") answeredUpTo(m.reply_to);
      seen(m.seq);
    }
  }

  function connect() {
    setStatus("connecting…");
    const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws" + (token ? "?token=" + encodeURIComponent(token) : "");
    ws = new WebSocket(url);
    let gotReady = false; // this connection's hello was answered
    ws.onopen = function () {
      const hello = { type: "hello", session: store.get("session", "") };
      if (user) hello.user = user;
      if (!firstConnect && conversation) { hello.last_seq = lastSeq; hello.conversation = conversation; }
      ws.send(JSON.stringify(hello));
    };
    ws.onmessage = function (ev) {
      let f;
      try { f = JSON.parse(ev.data); } catch (e) { return; }
      switch (f.type) {
        case "ready":
          gotReady = true;
          backoff = 500;
          store.set("session", f.session);
          if (firstConnect || f.conversation !== conversation) {
            clear();
            lastSeq = 0;
          }
          if (f.conversation !== conversation) { conversation = f.conversation; store.set("conversation", conversation); store.set("lastSeq", 0); }
          firstConnect = false;
          showHistory(f.history || []);
          for (const p of pending) {
            if (!pendingEl(p.id)) { const el = bubble("user", p.text, "pending"); el.dataset.id = p.id; }
          }
          setStatus("online as " + f.user, "online");
          // Resend what was never acknowledged; the ids make it safe.
          for (const p of pending) send({ type: "message", id: p.id, text: p.text });
          break;
        case "ack": {
          pending = pending.filter(function (p) { return p.id !== f.id; });
          store.set("pending", pending);
          const el = pendingEl(f.id);
          if (el) {
            el.classList.remove("pending");
            // Not yet shown as stored (else history said whether it was answered).
            if (!shown.has(f.seq)) { el.classList.add("waiting"); el.dataset.seq = f.seq; }
          }
          shown.add(f.seq);
          seen(f.seq);
          break;
        }
        case "delta": {
          let el = bubbles.get(f.reply_to);
          if (!el) { el = bubble("assistant", "", "streaming"); bubbles.set(f.reply_to, el); stopBtn.hidden = false; }
          el.textContent += f.text;
          scroll();
          break;
        }
        case "reply": {
          // One reply answers every message it covers; it is shown once,
          // after the last of them (reply_to).
          answered(f.covers && f.covers.length ? f.covers : [f.reply_to]);
          let el = bubbles.get(f.reply_to);
          bubbles.delete(f.reply_to);
          if (shown.has(f.seq)) { if (el) el.remove(); break; }
          if (!el) {
            el = bubble("assistant", "");
            const last = f.reply_to && pendingEl(f.reply_to);
            if (last) last.after(el); // not streamed: placed after the message it answers
          }
          el.className = "msg assistant " + statusClass(f.status);
          el.textContent = f.text;
          shown.add(f.seq);
          seen(f.seq);
          if (bubbles.size === 0) stopBtn.hidden = true;
          scroll();
          break;
        }
        case "reset":
          clear();
          conversation = f.conversation;
          lastSeq = 0;
          store.set("conversation", conversation);
          store.set("lastSeq", 0);
          notice(f.reason === "manual" ? "New conversation" : "New conversation (" + f.reason + " reset)");
          break;
        case "error":
          if (f.code === "not_found" && !gotReady && store.get("session", "")) {
            // The resume token expired: start a new session without it.
            store.set("session", "");
            ws.send(JSON.stringify(user ? { type: "hello", user: user } : { type: "hello" }));
            break;
          }
          notice(f.message);
          break;
      }
    };
    ws.onclose = function (ev) {
      ws = null;
      stopBtn.hidden = true;
      if (ev.code === 1008) { setStatus("not authorized: open this page with ?token=…", "offline"); return; }
      const wait = Math.min(backoff, 10000) * (0.75 + Math.random() / 2);
      backoff = Math.min(backoff * 2, 10000);
      setStatus("offline — reconnecting in " + Math.ceil(wait / 1000) + " s", "offline");
      setTimeout(connect, wait);
    };
  }

  document.getElementById("composer").addEventListener("submit", function (ev) {
    ev.preventDefault();
    const body = text.value.trim();
    if (!body) return;
    const id = newId();
    pending.push({ id: id, text: body });
    store.set("pending", pending);
    const el = bubble("user", body, "pending");
    el.dataset.id = id;
    text.value = "";
    send({ type: "message", id: id, text: body });
  });
  text.addEventListener("keydown", function (ev) {
    if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); document.getElementById("send").click(); }
  });
  document.getElementById("reset").addEventListener("click", function () {
    if (!send({ type: "reset" })) notice("offline: try again when connected");
  });
  stopBtn.addEventListener("click", function () { send({ type: "stop" }); });
  connect();
})();
