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
  // Replies are Markdown, rendered sanitized by render.js; plain text if it
  // did not load.
  const render = window.chatgateRender || {
    markdown(el, t) { el.textContent = t; },
    append(el, t, then) { el.textContent += t; if (then) then(); },
  };

  let ws = null;
  let backoff = 500;
  let firstConnect = true;
  let lastSeq = store.get("lastSeq", 0);
  let conversation = store.get("conversation", "");
  let pending = store.get("pending", []); // [{id, text}] sent but not acknowledged
  const bubbles = new Map(); // client id -> reply bubble being streamed
  // Attachments — pictures and, when the gateway transcribes, audio: the
  // ones waiting in the composer, and those of messages sent and not yet
  // acknowledged (by id, in memory only: too large for localStorage, so a
  // reload resends such a message without them).
  let composing = []; // [{kind, mime, data (base64), url (object URL; pictures), name (audio)}]
  const sentImages = new Map(); // client id -> attachments
  const shown = new Set(); // seqs already on screen
  // The largest frame the server reads (ready.max_frame_bytes; 0 until
  // known). A larger one closes the connection, and resending it would
  // close it again: such a message is not sent.
  let maxFrame = 0;
  // Whether the model is given pictures (ready.images): if not, the page
  // does not offer to send them, and says so when one is pasted.
  let readsImages = true;
  // Whether audio is transcribed (ready.audio), and its limit
  // (ready.max_audio_bytes): if not, audio files are not offered.
  let readsAudio = false;
  let maxAudioBytes = 0;
  function fits(frame) { return !maxFrame || new TextEncoder().encode(JSON.stringify(frame)).length <= maxFrame; }
  function tooLarge() {
    notice("This message is too large for the server (at most " + Math.floor(maxFrame / 1024) + " KiB with its pictures): send a smaller picture.");
  }

  function setStatus(s, cls) { statusEl.textContent = s; statusEl.className = "status " + (cls || ""); }
  function scroll() { log.scrollTop = log.scrollHeight; }
  function seen(seq) {
    if (seq > lastSeq) { lastSeq = seq; store.set("lastSeq", lastSeq); }
  }
  function bubble(role, body, cls) {
    const el = document.createElement("div");
    el.className = "msg " + role + (cls ? " " + cls : "");
    if (role === "assistant") render.markdown(el, body); else el.textContent = body;
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
  // clear empties the log for another conversation; a reply streaming in
  // the one left sends no more frames here, so Stop goes with its bubble.
  function clear() { dropMedia(); log.textContent = ""; shown.clear(); bubbles.clear(); stopBtn.hidden = true; cancelReply(); }
  function statusClass(status) { return status === "ok" ? "" : status; }
  function newId() { return "c-" + Date.now().toString(36) + "-" + Math.random().toString(36).slice(2, 8); }
  function send(frame) {
    if (ws && ws.readyState === WebSocket.OPEN) { ws.send(JSON.stringify(frame)); return true; }
    return false;
  }
  // A message the gateway could not store (error "internal") is sent
  // again after a pause that doubles, up to 30 s, while it stays pending;
  // a reconnect resends it too.
  const retryWait = new Map(); // id → the next pause, ms
  function resendLater(id) {
    const wait = retryWait.get(id) || 1000;
    retryWait.set(id, Math.min(wait * 2, 30000));
    setTimeout(function () {
      const p = pending.find(function (q) { return q.id === id; });
      if (p) send(withImages(withReply({ type: "message", id: p.id, text: p.text }, p)));
    }, wait);
  }
  function pendingEl(id) { return log.querySelector('[data-id="' + CSS.escape(id) + '"]'); }
  // A user message is "waiting" from its ack until a reply answers it. One
  // reply can answer several: those its covers name (a merged burst), or,
  // in history, every message up to the seq it replies to.
  function answered(ids) {
    for (const id of ids) { const el = pendingEl(id); if (el) el.classList.remove("pending", "waiting", "delayed"); retryWait.delete(id); }
  }
  function answeredUpTo(seq) {
    for (const el of log.querySelectorAll(".msg.user.waiting")) { if (Number(el.dataset.seq) <= seq) el.classList.remove("waiting"); }
  }

  // showPending shows the messages sent and not yet acknowledged that are
  // not on screen: after a switch of conversation they are stored in the
  // new one (their acks come after the switch).
  function showPending() {
    for (const p of pending) {
      if (!p.edits && !pendingEl(p.id)) { const el = bubble("user", p.text, "pending"); el.dataset.id = p.id; showQuote(el, p.quote); showImages(el, sentImages.get(p.id)); }
    }
  }
  function dropPending(id) {
    pending = pending.filter(function (p) { return p.id !== id; });
    store.set("pending", pending);
    sentImages.delete(id);
    const el = pendingEl(id);
    if (el) el.remove();
  }
  function showHistory(items) {
    for (const m of items) {
      if (shown.has(m.seq)) continue;
      shown.add(m.seq);
      if (m.role === "user" && m.id) {
        const el = pendingEl(m.id);
        if (el) { el.classList.remove("pending"); el.classList.add("waiting"); el.dataset.seq = m.seq; offerReply(el); seen(m.seq); continue; }
      }
      if (m.role === "assistant" && m.reply_to) {
        // A reply streamed before the drop: replace the partial bubble.
        for (const [id, el] of bubbles) { if (el.dataset.replyTo === String(m.reply_to)) { el.remove(); bubbles.delete(id); } }
      }
      const el = bubble(m.role, m.text, m.role === "user" ? "waiting" : statusClass(m.status));
      showQuote(el, m.quote);
      if (m.role === "assistant") showMedia(el, m.attachments); // what its tools returned
      else showAttachmentNames(el, m.attachments);
      if (m.id) el.dataset.id = m.id;
      el.dataset.seq = m.seq;
      offerReply(el);
      if (m.role === "assistant") answeredUpTo(m.reply_to);
      seen(m.seq);
    }
  }

  // Pictures in: picked with the + button or pasted into the message,
  // shown as thumbnails until sent, then in the user's own message.
  const imageTypes = ["image/png", "image/jpeg", "image/gif", "image/webp"];
  // Audio types the transcription endpoint takes (docs/protocol.md#audio).
  const audioTypes = ["audio/mpeg", "audio/mp3", "audio/mp4", "audio/m4a", "audio/x-m4a", "audio/wav", "audio/x-wav", "audio/wave",
    "audio/webm", "audio/ogg", "audio/flac", "audio/x-flac"];
  const maxImageBytes = 5 << 20;
  const maxImages = 4;
  // setupAttach offers the + button for what the gateway reads: pictures,
  // audio, or neither.
  function setupAttach() {
    const picker = document.getElementById("file");
    const accept = (readsImages ? imageTypes : []).concat(readsAudio ? audioTypes : []);
    picker.accept = accept.join(",");
    const btn = document.getElementById("attach");
    btn.hidden = accept.length === 0;
    const label = readsAudio ? (readsImages ? "Attach a picture or audio" : "Attach audio") : "Attach a picture";
    btn.setAttribute("aria-label", label);
    btn.title = readsImages ? label + " (or paste a picture into the message)" : label;
  }
  function setupImages() {
    const picker = document.getElementById("file");
    document.getElementById("attach").addEventListener("click", function () { picker.click(); });
    picker.addEventListener("change", function () {
      for (const f of picker.files) { if (f.type.startsWith("audio/")) addAudio(f); else addImage(f); }
      picker.value = "";
    });
    text.addEventListener("paste", function (ev) {
      const items = (ev.clipboardData && ev.clipboardData.items) || [];
      for (const it of items) {
        if (it.kind === "file" && it.type.startsWith("image/")) { const f = it.getAsFile(); if (f) { addImage(f); ev.preventDefault(); } }
      }
    });
  }
  function addImage(file) {
    if (!readsImages) { notice("Pictures are not read here: describe it in words."); return; }
    if (imageTypes.indexOf(file.type) < 0) { notice("Only PNG, JPEG, GIF and WebP pictures can be sent."); return; }
    if (file.size > maxImageBytes) { notice("That picture is over 5 MiB."); return; }
    if (composing.length >= maxImages) { notice("At most " + maxImages + " pictures per message."); return; }
    const reader = new FileReader();
    reader.onload = function () {
      const s = String(reader.result);
      composing.push({ kind: "image", mime: file.type, data: s.slice(s.indexOf(",") + 1), url: URL.createObjectURL(file) });
      renderComposing();
    };
    reader.readAsDataURL(file);
  }
  // addAudio takes an audio file, sent to be transcribed: the transcript is
  // the message (with the text typed after it).
  function addAudio(file) {
    const mime = file.type.split(";")[0].trim().toLowerCase();
    if (!readsAudio) { notice("Voice and audio are not listened to here: type it."); return; }
    if (audioTypes.indexOf(mime) < 0) { notice("Only MP3, M4A, OGG, WAV, WebM and FLAC audio can be sent."); return; }
    if (maxAudioBytes && file.size > maxAudioBytes) { notice("That audio is over " + Math.floor(maxAudioBytes / 1048576) + " MiB."); return; }
    if (composing.length >= maxImages) { notice("At most " + maxImages + " attachments per message."); return; }
    const reader = new FileReader();
    reader.onload = function () {
      const s = String(reader.result);
      composing.push({ kind: "audio", mime: mime, data: s.slice(s.indexOf(",") + 1), name: file.name });
      renderComposing();
    };
    reader.readAsDataURL(file);
  }
  // attachmentsOf is a message's attachments as the protocol sends them.
  function attachmentsOf(items) {
    return items.map(function (i) {
      const a = { kind: i.kind || "image", mime: i.mime, data: i.data };
      if (i.kind === "audio" && i.name) a.name = i.name;
      return a;
    });
  }
  // audioChip shows an audio attachment by its name.
  function audioChip(a, cls) {
    const el = document.createElement("span");
    el.className = cls;
    el.textContent = "🎤 " + (a.name || "audio");
    return el;
  }
  function renderComposing() {
    const box = document.getElementById("images");
    box.textContent = "";
    box.hidden = composing.length === 0;
    composing.forEach(function (img, i) {
      const t = document.createElement("span");
      t.className = "thumb";
      const el = img.kind === "audio" ? audioChip(img, "audio") : document.createElement("img");
      if (img.kind !== "audio") { el.src = img.url; el.alt = "picture to send"; }
      const rm = document.createElement("button");
      rm.type = "button";
      rm.textContent = "×";
      rm.title = "Remove";
      rm.addEventListener("click", function () { composing.splice(i, 1); renderComposing(); });
      t.append(el, rm);
      box.appendChild(t);
    });
  }
  // takeImages moves the composer's pictures to message id.
  function takeImages(id) {
    if (composing.length) sentImages.set(id, composing);
    composing = [];
    renderComposing();
  }
  function withImages(frame) {
    const imgs = sentImages.get(frame.id);
    if (imgs) frame.attachments = attachmentsOf(imgs);
    return frame;
  }
  function showImages(el, imgs) {
    for (const i of imgs || []) {
      if (i.kind === "audio") { el.appendChild(audioChip(i, "attachment")); continue; }
      const img = document.createElement("img");
      img.className = "attached";
      img.src = i.url;
      img.alt = "picture sent";
      el.appendChild(img);
    }
  }
  // Media from tools (docs/protocol.md, "Media from tools"): a reply's
  // attachments, fetched with the session's resume token in a header
  // (never in a URL, where it would land in logs and history) and shown
  // from a blob: URL — pictures inline, audio in a player, other files
  // offered as a download. A fetch that fails leaves a note. Names come
  // from a tool: untrusted text, set as textContent only. The object URLs
  // are revoked when the page drops the messages (clear).
  const mediaURLs = new Set(); // object URLs of tool media on the page
  function fetchMedia(a) {
    const headers = {};
    const session = store.get("session", "");
    if (session) headers.Authorization = "Session " + session;
    else if (token) headers.Authorization = "Bearer " + token;
    return fetch(a.url, { headers: headers, credentials: "omit" }).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.blob();
    });
  }
  function mediaLabel(a) { return (a.name || a.kind) + " (" + (a.mime || "file") + ", " + a.size + " bytes)"; }
  // The types shown in the page (as /ws/media serves inline): pictures a
  // browser draws and audio it plays, never one that can run script. Any
  // other blob is re-typed as bytes, so that a download link opened in a
  // tab of the page's origin cannot render a tool's HTML or SVG there.
  const inlineTypes = ["image/png", "image/jpeg", "image/gif", "image/webp",
    "audio/mpeg", "audio/mp4", "audio/ogg", "audio/wav", "audio/webm", "audio/flac"];
  function showMediaItem(slot, a) {
    fetchMedia(a).then(function (fetched) {
      if (!slot.isConnected) return; // dropped while it loaded
      const shown = (a.kind === "image" || a.kind === "audio") && inlineTypes.includes(fetched.type);
      const blob = shown ? fetched : new Blob([fetched], { type: "application/octet-stream" });
      const url = URL.createObjectURL(blob);
      mediaURLs.add(url);
      let el;
      if (shown && a.kind === "image") {
        el = document.createElement("img");
        el.className = "attached tool-image";
        el.alt = a.name || "picture from a tool";
      } else if (shown) {
        el = document.createElement("audio");
        el.className = "tool-audio";
        el.controls = true;
        el.preload = "metadata";
        el.title = a.name || "audio from a tool";
      } else {
        el = document.createElement("a");
        el.className = "download";
        el.download = a.name || a.kind;
        el.textContent = "⬇ " + mediaLabel(a);
      }
      el.dataset.type = blob.type; // what the object URL is typed as
      if (el.tagName === "A") el.href = url; else el.src = url;
      slot.replaceChildren(el);
    }).catch(function () {
      if (!slot.isConnected) return;
      const note = document.createElement("span");
      note.className = "media-failed";
      note.textContent = "could not load " + mediaLabel(a);
      slot.replaceChildren(note);
    });
  }
  function showMedia(el, atts, unread) {
    if (el.querySelector(":scope > .media")) return;
    if ((!atts || !atts.length) && !unread) return;
    const box = document.createElement("div");
    box.className = "media";
    for (const a of atts || []) {
      const slot = document.createElement("div");
      slot.className = "media-item loading";
      slot.dataset.media = a.id || "";
      slot.textContent = "loading " + mediaLabel(a) + "…";
      box.appendChild(slot);
      showMediaItem(slot, a);
    }
    if (unread) {
      const note = document.createElement("span");
      note.className = "media-failed unread";
      note.textContent = "The files of this reply could not be loaded now: reload the page to see them.";
      box.appendChild(note);
    }
    el.appendChild(box);
  }
  function dropMedia() {
    for (const u of mediaURLs) URL.revokeObjectURL(u);
    mediaURLs.clear();
  }
  // History carries what a message had attached, not the pictures.
  // showQuote puts what a user's message replied to above its text, as
  // text: the message's own words stay its first text node (bodyText).
  function showQuote(el, quote) {
    if (!quote || el.querySelector(":scope > .quoted")) return;
    const q = document.createElement("span");
    q.className = "quoted";
    q.textContent = quote;
    el.insertBefore(q, el.firstChild);
  }
  function showAttachmentNames(el, atts) {
    for (const a of atts || []) {
      const s = document.createElement("span");
      s.className = "attachment";
      s.textContent = a.kind === "image" ? "[picture]" : "[" + (a.name || a.kind) + "]";
      el.appendChild(s);
    }
  }

  // Tool calls (docs/protocol.md, "Tool calls"): a line per call under the
  // message its turn answers — running, then ✓ with its duration, or how
  // it ended — and, for a call that needs the user's approval, a card with
  // the tool's name, its arguments and Allow / Deny, replaced by the
  // outcome once decided. Names and arguments come from the model:
  // untrusted text, set as textContent only.
  function userMsgOfSeq(seq) { return log.querySelector('.msg.user[data-seq="' + CSS.escape(String(seq)) + '"]'); }
  function toolsOf(seq) { return log.querySelector('.tools[data-turn="' + CSS.escape(String(seq)) + '"]'); }
  // toolBox is the box of turn seq's calls: before its reply streaming, or
  // after the message it answers, or last.
  function toolBox(seq) {
    let box = toolsOf(seq);
    if (box) return box;
    box = document.createElement("div");
    box.className = "tools";
    box.dataset.turn = String(seq);
    const msg = userMsgOfSeq(seq);
    const streaming = msg && msg.dataset.id && bubbles.get(msg.dataset.id);
    if (streaming) streaming.before(box);
    else if (msg) (msg.nextSibling === editBtn ? editBtn : msg).after(box);
    else log.appendChild(box);
    return box;
  }
  function toolEl(id) { return log.querySelector('.tool[data-call="' + CSS.escape(String(id)) + '"]'); }
  function msText(ms) {
    if (typeof ms !== "number") return "";
    return ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(1) + " s";
  }
  const toolLabels = {
    asking: "waiting for your approval",
    started: "running…",
    done: "✓",
    failed: "✗ failed",
    denied: "denied",
    expired: "expired, not run",
    cancelled: "cancelled",
    unknown: "stopped; whether it took effect is unknown",
  };
  // showTool shows call f (a tool or tool_request frame) in the state
  // status, and returns its element.
  function showTool(f, status) {
    let el = toolEl(f.id);
    if (!el) {
      el = document.createElement("div");
      el.dataset.call = String(f.id);
      const line = document.createElement("div");
      line.className = "line";
      el.appendChild(line);
      toolBox(f.reply_to).appendChild(el);
    }
    if (f.name) el.dataset.name = f.name;
    el.className = "tool " + status;
    let label = toolLabels[status] || status;
    const took = msText(f.duration_ms);
    if (took && status !== "started" && status !== "asking") label += " " + took;
    el.firstChild.textContent = "🔧 " + (el.dataset.name || "tool") + " — " + label;
    if (status !== "asking") dropCard(el);
    scroll();
    return el;
  }
  function dropCard(el) {
    const card = el.querySelector(".tool-card");
    if (card) card.remove();
  }
  // prettyArguments is the call's arguments as indented JSON, or as sent
  // when they do not parse.
  function prettyArguments(s) {
    try { return JSON.stringify(JSON.parse(s), null, 2); } catch (e) { return String(s || ""); }
  }
  function askTool(f) {
    const el = showTool(f, "asking");
    if (el.querySelector(".tool-card")) return;
    const card = document.createElement("div");
    card.className = "tool-card";
    const title = document.createElement("div");
    title.className = "title";
    const name = document.createElement("strong");
    name.textContent = f.name;
    title.append("Allow ", name, "?");
    const args = document.createElement("pre");
    args.className = "args";
    args.textContent = prettyArguments(f.arguments);
    const actions = document.createElement("div");
    actions.className = "actions";
    const allow = document.createElement("button");
    allow.type = "button";
    allow.className = "allow";
    allow.textContent = "Allow";
    const deny = document.createElement("button");
    deny.type = "button";
    deny.className = "deny";
    deny.textContent = "Deny";
    actions.append(allow, deny);
    card.append(title, args);
    const expires = f.expires_at ? new Date(f.expires_at) : null;
    if (expires && !isNaN(expires)) {
      const when = document.createElement("div");
      when.className = "expires";
      when.textContent = "Denied by itself at " + expires.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) + " if nobody answers.";
      card.appendChild(when);
    }
    card.appendChild(actions);
    function decide(yes) {
      if (!send({ type: "tool_decision", id: f.id, allow: yes })) { notice("offline: try again when connected"); return; }
      allow.disabled = deny.disabled = true;
      card.classList.add("deciding");
    }
    allow.addEventListener("click", function () { decide(true); });
    deny.addEventListener("click", function () { decide(false); });
    el.appendChild(card);
    scroll();
  }
  // toolResolved: the ask is over. A call already further along (its
  // tool frames came first) keeps what it shows.
  function toolResolved(f) {
    const el = toolEl(f.id);
    if (!el) return;
    if (el.classList.contains("asking")) showTool(f, f.status); else dropCard(el);
  }
  // toolRefused: a decision was refused (tool_id). Only a refusal that
  // asks to send it again (it could not be stored, the gateway is going
  // away, too many frames) gives the buttons back; any other means
  // deciding again would be refused too, so the card goes. An expired
  // ask's tool_resolved came before its refusal and showed how it ended.
  const retryDecision = { internal: true, unavailable: true, rate_limited: true };
  function toolRefused(f) {
    const el = toolEl(f.tool_id);
    if (!el) return;
    const card = el.querySelector(".tool-card");
    if (retryDecision[f.code]) {
      if (card) { card.classList.remove("deciding"); for (const b of card.querySelectorAll("button")) b.disabled = false; }
      return;
    }
    dropCard(el);
    if (el.classList.contains("asking")) el.firstChild.textContent = "🔧 " + (el.dataset.name || "tool") + " — " + (f.code === "not_yours" ? "not yours to decide" : f.code === "not_found" ? "no longer open" : "decided already");
  }

  // The model picker and the status panel (docs/protocol.md, "Status and
  // models"). The picker is shown only when the gateway offers a choice
  // (ready.models): it asks for the models with a model frame and chooses
  // with one; every model frame — this page's answer, or another tab's
  // choice — sets it. Status asks with a status frame and shows the answer
  // in a panel under the header, as text (a summary is the model's words).
  const picker = document.getElementById("model-picker");
  const modelSelect = document.getElementById("model");
  const statusPanel = document.getElementById("status-panel");
  const statusLines = document.getElementById("status-lines");
  const statusBtn = document.getElementById("show-status");
  function modelLabel(m) { return m.name ? m.name : "Default (" + m.id + ")"; }
  function setupModels(offered) {
    picker.hidden = true;
    if (offered) send({ type: "model" });
  }
  function showModels(f) {
    modelSelect.textContent = "";
    const choices = f.models.slice();
    if (!f.default.name) choices.push(f.default); // the agent's own model, when none of them
    for (const m of choices) {
      const o = document.createElement("option");
      o.value = m.name;
      o.textContent = modelLabel(m);
      modelSelect.appendChild(o);
    }
    modelSelect.value = f.current.name;
    modelSelect.title = f.gone ? f.chosen + ", the model chosen before, is no longer offered" : "The model that answers your next messages";
    picker.hidden = false;
    if (!statusPanel.hidden) askStatus();
  }
  modelSelect.addEventListener("change", function () {
    if (!send({ type: "model", name: modelSelect.value })) notice("offline: try again when connected");
  });
  function askStatus() { if (!send({ type: "status" })) notice("offline: try again when connected"); }
  function closeStatus() { statusPanel.hidden = true; statusBtn.setAttribute("aria-expanded", "false"); }
  statusBtn.addEventListener("click", function () { if (statusPanel.hidden) askStatus(); else closeStatus(); });
  document.getElementById("close-status").addEventListener("click", closeStatus);
  function when(s, tz) {
    const d = new Date(s);
    const o = { weekday: "short", day: "numeric", month: "short", hour: "2-digit", minute: "2-digit", timeZoneName: "short" };
    if (tz) o.timeZone = tz;
    try { return d.toLocaleString([], o); } catch (e) { return d.toLocaleString(); }
  }
  function count(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }
  function spent(t, tokenLimit, costLimit) {
    let s = count(t.turns || 0, "answer") + ", " + count((t.prompt_tokens || 0) + (t.completion_tokens || 0), "token");
    if (tokenLimit) s += " of " + tokenLimit;
    if (t.estimated_tokens) s += " (" + t.estimated_tokens + " estimated: answers stopped before the model counted them)";
    if (t.cost || costLimit) s += ", cost " + (t.cost || 0).toFixed(4) + (costLimit ? " of " + costLimit.toFixed(2) : "");
    return s;
  }
  const busyTexts = {
    queue: "queue — each message gets its own answer, one after the other",
    collect: "collect — messages sent while it answers are answered together, next",
    interrupt: "interrupt — a new message stops the answer being written",
  };
  function showStatus(f) {
    statusLines.textContent = "";
    function row(name, value, cls) {
      const dt = document.createElement("dt");
      dt.textContent = name;
      const dd = document.createElement("dd");
      dd.textContent = value;
      if (cls) dd.className = cls;
      dd.dataset.row = name.toLowerCase();
      statusLines.append(dt, dd);
    }
    const h = f.history || {};
    row("Conversation", f.conversation ? count(f.messages, "message") + " since " + when(f.started_at) : "none yet: your next message starts one");
    row("History", count(h.messages || 0, "message") + ", about " + count(h.tokens || 0, "token") +
      (typeof h.percent === "number" ? " — " + h.percent + "% of the model's " + h.context_tokens + "-token context" : " — the model's context size is unknown"));
    if (f.summary) row("Summary", "of messages 1–" + f.summary.through + ": " + f.summary.text);
    row("Model", modelLabel(f.model) + (f.model.name && f.model.name !== f.model.id ? " (" + f.model.id + ")" : ""));
    const u = f.usage || {}, b = u.budget || {};
    row("Today", spent(u.day || {}, b.tokens_per_day, b.cost_per_day));
    row("This month", spent(u.month || {}, 0, b.cost_per_month));
    if (u.over) row("Limit", "reached (" + u.over.replace(/_/g, " ") + "): answers again from " + when(u.over === "cost_per_month" ? u.month_ends : u.day_ends), "over");
    row("Busy mode", busyTexts[f.busy_mode] || f.busy_mode);
    const r = f.reset || {};
    let next = "only when you start a new conversation";
    if (r.mode !== "none") {
      if (!r.next) next = "by itself (" + r.mode + ")";
      else if (r.due) next = "due: your next message starts a new conversation (" + r.reason + ")";
      else next = when(r.next, r.timezone) + " (" + r.reason + ")";
    }
    row("Next reset", next);
    statusPanel.hidden = false;
    statusBtn.setAttribute("aria-expanded", "true");
  }

  // The reminders panel (docs/protocol.md, "Reminders"): the Reminders
  // button asks with a reminders frame and shows the answer, each
  // reminder with its next time on its own zone's clock and a Cancel
  // button, which sends reminder_cancel; the list after a cancel comes back
  // as a reminders frame (on every tab of the session) and replaces it.
  // A reminder's text is the model's words: shown as text.
  const remindersPanel = document.getElementById("reminders-panel");
  const remindersList = document.getElementById("reminders-list");
  const remindersEmpty = document.getElementById("reminders-empty");
  const remindersBtn = document.getElementById("show-reminders");
  let remindersAsked = false; // the panel was opened: frames update it
  let cancelling = 0; // the reminder a reminder_cancel was sent for, until the list comes back
  function askReminders() { if (!send({ type: "reminders" })) notice("offline: try again when connected"); else remindersAsked = true; }
  function closeReminders() { remindersPanel.hidden = true; remindersAsked = false; remindersBtn.setAttribute("aria-expanded", "false"); }
  remindersBtn.addEventListener("click", function () { if (remindersPanel.hidden) askReminders(); else closeReminders(); });
  document.getElementById("close-reminders").addEventListener("click", closeReminders);
  function showReminders(f) {
    if (!remindersAsked) return; // another tab's cancel, with the panel closed here
    cancelling = 0;
    remindersList.textContent = "";
    const list = f.reminders || [];
    remindersEmpty.hidden = list.length > 0;
    remindersEmpty.textContent = f.enabled ? "No reminders. Ask me to remind you of something, such as: remind me at 6 pm to call Ann." : "No reminders.";
    list.forEach(function (r) {
      const li = document.createElement("li");
      li.dataset.id = String(r.id);
      const text = document.createElement("span");
      text.className = "reminder-text";
      text.textContent = r.text;
      const at = document.createElement("span");
      at.className = "reminder-when";
      at.textContent = (r.next ? when(r.next, r.timezone) : "") + (r.repeats ? ", " + r.repeats : "");
      const cancel = document.createElement("button");
      cancel.type = "button";
      cancel.className = "reminder-cancel";
      cancel.textContent = "Cancel";
      cancel.title = "Cancel this reminder";
      cancel.addEventListener("click", function () {
        cancel.disabled = true;
        if (send({ type: "reminder_cancel", id: r.id })) cancelling = r.id;
        else { cancel.disabled = false; notice("offline: try again when connected"); }
      });
      li.append(text, at, cancel);
      remindersList.appendChild(li);
    });
    remindersPanel.hidden = false;
    remindersBtn.setAttribute("aria-expanded", "true");
  }

  // The memory panel (docs/protocol.md, "Memory"): the Memory button asks
  // with a memory frame and shows the answer — the notes kept about the
  // user, newest first, each with a Forget button (a forget frame) — a
  // field to add one (remember), and "Forget everything", which asks to
  // confirm before it sends forget all. Each change comes back as a memory
  // frame (on every tab of the session) that replaces the list; a refusal
  // is shown in the panel. A note's text is the model's or the user's
  // words: shown as text.
  const memoryPanel = document.getElementById("memory-panel");
  const memoryList = document.getElementById("memory-list");
  const memoryEmpty = document.getElementById("memory-empty");
  const memoryError = document.getElementById("memory-error");
  const memoryText = document.getElementById("memory-text");
  const memoryBtn = document.getElementById("show-memory");
  const forgetAllBtn = document.getElementById("forget-all");
  const forgetAllConfirm = document.getElementById("forget-all-confirm");
  let memoryAsked = false; // the panel was opened: frames update it
  let memoryPending = ""; // the change sent ("remember", "forget"), until its answer comes back
  const noteAuthors = { model: "by me", user: "by you", operator: "by the operator", reset: "from a past conversation" };
  function memoryFailed(s) { memoryError.textContent = s; memoryError.hidden = !s; }
  function askMemory() { if (!send({ type: "memory" })) notice("offline: try again when connected"); else memoryAsked = true; }
  function changeMemory(kind, frame) {
    if (!send(frame)) { memoryFailed("offline: try again when connected"); return false; }
    memoryPending = kind;
    memoryFailed("");
    return true;
  }
  function confirmForgetAll(on) { forgetAllConfirm.hidden = !on; forgetAllBtn.hidden = on; }
  function closeMemory() { memoryPanel.hidden = true; memoryAsked = false; confirmForgetAll(false); memoryBtn.setAttribute("aria-expanded", "false"); }
  memoryBtn.addEventListener("click", function () { if (memoryPanel.hidden) askMemory(); else closeMemory(); });
  document.getElementById("close-memory").addEventListener("click", closeMemory);
  document.getElementById("memory-add").addEventListener("submit", function (ev) {
    ev.preventDefault();
    const text = memoryText.value.trim();
    if (!text) { memoryFailed("Write the note first."); return; }
    changeMemory("remember", { type: "remember", id: newId(), text: text });
  });
  forgetAllBtn.addEventListener("click", function () {
    const n = memoryList.children.length;
    document.getElementById("forget-all-question").textContent = "Forget " + (n === 1 ? "the one note" : "all " + n + " notes") + " kept about you? This cannot be undone.";
    confirmForgetAll(true);
  });
  document.getElementById("forget-all-no").addEventListener("click", function () { confirmForgetAll(false); });
  document.getElementById("forget-all-yes").addEventListener("click", function () {
    if (changeMemory("forget", { type: "forget", all: true })) confirmForgetAll(false);
  });
  function showMemory(f) {
    if (!memoryAsked) return; // another tab's change, with the panel closed here
    if (memoryPending === "remember") memoryText.value = "";
    memoryPending = "";
    memoryList.textContent = "";
    const list = f.notes || [];
    document.getElementById("memory-off").hidden = f.enabled !== false;
    document.getElementById("memory-add").hidden = f.enabled === false;
    memoryEmpty.hidden = list.length > 0;
    memoryEmpty.textContent = f.enabled ? "No notes. Add one below, or tell me something to remember." : "No notes.";
    forgetAllBtn.disabled = list.length === 0;
    if (list.length === 0) confirmForgetAll(false);
    list.forEach(function (n) {
      const li = document.createElement("li");
      li.dataset.id = String(n.id);
      const text = document.createElement("span");
      text.className = "note-text";
      text.textContent = n.text;
      const meta = document.createElement("span");
      meta.className = "note-meta";
      meta.textContent = (noteAuthors[n.author] || n.author) + ", " + when(n.created_at);
      const forget = document.createElement("button");
      forget.type = "button";
      forget.className = "note-forget";
      forget.textContent = "Forget";
      forget.title = "Forget this note";
      forget.addEventListener("click", function () {
        forget.disabled = true;
        if (!changeMemory("forget", { type: "forget", id: n.id })) forget.disabled = false;
      });
      li.append(text, meta, forget);
      memoryList.appendChild(li);
    });
    memoryPanel.hidden = false;
    memoryBtn.setAttribute("aria-expanded", "true");
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
          maxFrame = f.max_frame_bytes || 0;
          readsImages = f.images !== false;
          readsAudio = f.audio === true;
          maxAudioBytes = f.max_audio_bytes || 0;
          setupAttach();
          setupModels(f.models === true);
          wasAway = !!conversation && f.conversation !== conversation && lastSeq > 0;
          if (firstConnect || f.conversation !== conversation) {
            clear();
            lastSeq = 0;
          }
          if (wasAway) resetWhileAway((f.history || []).length > 0);
          if (f.conversation !== conversation) { conversation = f.conversation; store.set("conversation", conversation); store.set("lastSeq", 0); }
          firstConnect = false;
          showHistory(f.history || []);
          showPending();
          placeEdit();
          setStatus("online as " + f.user, "online");
          if (memoryAsked) askMemory(); // the list as it is now: a change sent before the drop may or may not be in it
          // Resend what was never acknowledged; the ids make it safe.
          for (const p of pending.slice()) {
            if (p.edits) { send({ type: "edit", id: p.id, edits: p.edits, text: p.text }); continue; }
            let frame = withImages(withReply({ type: "message", id: p.id, text: p.text }, p));
            if (!fits(frame) && frame.attachments) {
              // Queued before the limit was known: the text goes alone.
              sentImages.delete(p.id);
              tooLarge();
              frame = { type: "message", id: p.id, text: p.text };
            }
            if (!frame.attachments && !p.text.trim()) {
              // Only pictures, and they are gone (they are kept in memory
              // only, not across a reload): an empty message would be
              // refused on every reconnect.
              dropPending(p.id);
              notice("A picture or audio sent before the page was reloaded was not delivered: send it again.");
              continue;
            }
            if (fits(frame)) send(frame); else tooLarge();
          }
          break;
        case "ack": {
          pending = pending.filter(function (p) { return p.id !== f.id; });
          store.set("pending", pending);
          sentImages.delete(f.id);
          retryWait.delete(f.id);
          const el = pendingEl(f.id);
          if (el) {
            el.classList.remove("pending");
            // Not yet shown as stored (else history said whether it was answered).
            if (!shown.has(f.seq)) { el.classList.add("waiting"); el.dataset.seq = f.seq; offerReply(el); }
          }
          shown.add(f.seq);
          seen(f.seq);
          placeEdit();
          break;
        }
        case "delta": {
          let el = bubbles.get(f.reply_to);
          if (!el) { el = bubble("assistant", "", "streaming"); bubbles.set(f.reply_to, el); stopBtn.hidden = false; }
          render.append(el, f.text, scroll);
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
            // Not streamed: placed after the message it answers, and its tool calls.
            if (last) (last.dataset.seq && toolsOf(last.dataset.seq) || last).after(el);
          }
          el.className = "msg assistant " + statusClass(f.status);
          render.markdown(el, f.text);
          showMedia(el, f.attachments, f.attachments_unread === true);
          el.dataset.seq = f.seq;
          offerReply(el);
          shown.add(f.seq);
          seen(f.seq);
          if (bubbles.size === 0) stopBtn.hidden = true;
          placeEdit();
          scroll();
          if (!statusPanel.hidden) askStatus(); // the counts moved
          break;
        }
        case "tool":
          if (f.status === "asking" && toolEl(f.id) && toolEl(f.id).querySelector(".tool-card")) break;
          showTool(f, f.status);
          break;
        case "tool_request":
          askTool(f);
          break;
        case "model":
          showModels(f);
          break;
        case "status":
          showStatus(f);
          break;
        case "reminders":
          showReminders(f);
          break;
        case "memory":
          showMemory(f);
          break;
        case "tool_resolved":
          toolResolved(f);
          break;
        case "reset":
          switchConversation(f);
          if (!statusPanel.hidden) askStatus();
          break;
        case "notice": {
          // "delayed": stored, and waiting on the gateway's database; the
          // reply follows once it is back (not resent: it was acknowledged).
          const el = f.id && pendingEl(f.id);
          if (el && f.code === "delayed") el.classList.add("delayed");
          notice(f.message);
          break;
        }
        case "error":
          if (f.tool_id) { toolRefused(f); notice(f.message); break; }
          if (memoryPending && !f.id) {
            // The change was refused: said in the panel, and the text of a
            // note stays to be fixed. A forget refused (forgotten already,
            // in another tab?) brings the list as it is now.
            const was = memoryPending;
            memoryPending = "";
            memoryFailed(f.message);
            if (was === "forget") askMemory();
            break;
          }
          if (cancelling && !f.id && (f.code === "not_found" || f.code === "internal")) {
            // The cancel was refused (cancelled already, in another tab?):
            // the list as it is now replaces the one shown.
            cancelling = 0;
            notice(f.message);
            askReminders();
            break;
          }
          if (f.code === "not_found" && !gotReady && store.get("session", "")) {
            // The resume token expired: start a new session without it.
            store.set("session", "");
            ws.send(JSON.stringify(user ? { type: "hello", user: user } : { type: "hello" }));
            break;
          }
          // not_found with a message's id: its reply_to names no message of
          // the conversation (a reset came between).
          if (f.id && (f.code === "bad_frame" || f.code === "too_large" || f.code === "unsupported" || f.code === "transcription_failed" || f.code === "over_budget" || f.code === "not_found")) {
            // Refused for what it is: resending would be refused again (or,
            // for audio that could not be transcribed, or not for a user
            // over their budget, is the user's to decide). The message
            // stays on screen, marked, and is no longer resent.
            const el = pendingEl(f.id);
            pending = pending.filter(function (p) { return p.id !== f.id; });
            store.set("pending", pending);
            sentImages.delete(f.id);
            if (el) { el.classList.remove("pending", "waiting"); el.classList.add("failed"); }
          }
          if (f.id && f.code === "not_found") {
            // An edit of a message the gateway does not have: not resent.
            pending = pending.filter(function (p) { return p.id !== f.id; });
            store.set("pending", pending);
          }
          if (f.id && f.code === "internal" && pending.some(function (p) { return p.id === f.id; })) {
            const again = retryWait.has(f.id);
            resendLater(f.id);
            if (again) break; // said once already
          }
          notice(f.message);
          break;
      }
    };
    ws.onclose = function (ev) {
      ws = null;
      memoryPending = ""; // its answer, if any, is lost with the connection
      stopBtn.hidden = true;
      if (ev.code === 1008) { setStatus("not authorized: open this page with ?token=…", "offline"); return; }
      const wait = Math.min(backoff, 10000) * (0.75 + Math.random() / 2);
      backoff = Math.min(backoff * 2, 10000);
      setStatus("offline — reconnecting in " + Math.ceil(wait / 1000) + " s", "offline");
      setTimeout(connect, wait);
    };
  }

  // Editing the last message (docs/protocol.md, "Edits"): its Edit button
  // puts its text in the composer; sending sends an edit frame, and the
  // message shows the new text, marked edited. Before its turn starts the
  // edit replaces the text; after, the gateway answers it as a new message.
  const editBtn = document.createElement("button");
  editBtn.type = "button";
  editBtn.className = "edit-last";
  editBtn.textContent = "Edit";
  editBtn.title = "Edit your last message";
  let editing = null; // the message bubble being edited
  function bodyNode(el) { for (const n of el.childNodes) { if (n.nodeType === Node.TEXT_NODE) return n; } return null; }
  function bodyText(el) { const n = bodyNode(el); return n ? n.nodeValue : ""; }
  function placeEdit() {
    const users = log.querySelectorAll(".msg.user[data-id]:not(.pending):not(.failed)");
    const last = users[users.length - 1];
    if (!last || !bodyText(last)) { editBtn.remove(); return; }
    if (last.nextSibling !== editBtn) last.after(editBtn); // left in place when it is: no node churn under a click
  }
  function endEditing() {
    editing = null;
    document.getElementById("composer").classList.remove("editing");
    document.getElementById("send").textContent = "Send";
  }
  editBtn.addEventListener("click", function () {
    const users = log.querySelectorAll(".msg.user[data-id]:not(.pending):not(.failed)");
    editing = users[users.length - 1] || null;
    if (!editing) return;
    text.value = bodyText(editing);
    document.getElementById("composer").classList.add("editing");
    document.getElementById("send").textContent = "Save edit";
    text.focus();
  });
  function sendEdit(body) {
    const el = editing;
    endEditing();
    if (!body || body === bodyText(el)) { text.value = ""; return; }
    const id = newId();
    pending.push({ id: id, edits: el.dataset.id, text: body });
    store.set("pending", pending);
    bodyNode(el).nodeValue = body;
    el.classList.add("edited");
    text.value = "";
    send({ type: "edit", id: id, edits: el.dataset.id, text: body });
  }

  // Replies (docs/protocol.md): each stored message offers a Reply button;
  // the message it names is shown above the input until the next message
  // is sent (with reply_to, its seq) or the reply is cancelled.
  let replying = null; // { seq, text }
  const replyBar = document.getElementById("replying");
  function offerReply(el) {
    if (!el.dataset.seq || el.querySelector(":scope > button.reply")) return;
    const b = document.createElement("button");
    b.type = "button";
    b.className = "reply";
    b.title = "Reply to this message";
    b.setAttribute("aria-label", "Reply");
    el.appendChild(b);
  }
  function withReply(frame, p) {
    if (p && p.replyTo) frame.reply_to = p.replyTo;
    return frame;
  }
  function cancelReply() {
    replying = null;
    if (replyBar) { replyBar.hidden = true; replyBar.querySelector(".quote").textContent = ""; }
  }
  log.addEventListener("click", function (ev) {
    const b = ev.target.closest("button.reply");
    if (!b) return;
    const el = b.parentElement;
    // A message that quotes another is quoted by its own words.
    const quoted = (el.querySelector(":scope > .quoted") ? bodyText(el) : (el.innerText || el.textContent)).trim();
    replying = { seq: Number(el.dataset.seq), text: quoted };
    replyBar.querySelector(".quote").textContent = quoted.length > 200 ? quoted.slice(0, 199) + "…" : quoted;
    replyBar.hidden = false;
    text.focus();
  });
  document.getElementById("cancel-reply").addEventListener("click", cancelReply);

  document.getElementById("composer").addEventListener("submit", function (ev) {
    ev.preventDefault();
    const body = text.value.trim();
    if (editing) { sendEdit(body); return; }
    if (!body && composing.length === 0) return;
    const id = newId();
    const atts = attachmentsOf(composing);
    if (!fits(atts.length ? { type: "message", id: id, text: body, attachments: atts } : { type: "message", id: id, text: body })) {
      tooLarge(); // the text and the pictures stay in the composer
      return;
    }
    takeImages(id);
    const p = { id: id, text: body };
    if (replying) { p.replyTo = replying.seq; p.quote = replying.text; }
    cancelReply();
    pending.push(p);
    store.set("pending", pending);
    const el = bubble("user", body, "pending");
    el.dataset.id = id;
    showQuote(el, p.quote);
    showImages(el, sentImages.get(id));
    text.value = "";
    send(withImages(withReply({ type: "message", id: id, text: body }, p)));
  });
  text.addEventListener("keydown", function (ev) {
    if (ev.key === "Escape" && editing) { endEditing(); text.value = ""; return; }
    if (ev.key === "Escape" && replying) { cancelReply(); return; }
    if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); document.getElementById("send").click(); }
  });
  document.getElementById("reset").addEventListener("click", function () {
    if (!send({ type: "reset" })) notice("offline: try again when connected");
  });
  stopBtn.addEventListener("click", function () { send({ type: "stop" }); });
  setupImages();

  // Resets and going back (docs/protocol.md): a reset frame says why the
  // conversation is new; unless this page asked for it, a notice line says
  // so and offers the previous conversation back. A reset with reason
  // "resume" carries the reopened conversation's history.
  let ownReset = false; // this page's "New conversation" awaits its reset frame
  let wasAway = false; // ready: the conversation shown before was closed meanwhile
  function switchConversation(f) {
    const had = shown.size > 0; // an empty conversation's reset needs no word
    clear();
    announce(f, had);
    showPending();
  }
  function announce(f, had) {
    conversation = f.conversation;
    lastSeq = 0;
    store.set("conversation", conversation);
    store.set("lastSeq", 0);
    if (f.reason === "resume") {
      notice("Back to your previous conversation");
      showHistory(f.history || []);
      return;
    }
    if (f.reason === "manual" && ownReset) {
      ownReset = false;
      notice("New conversation");
      return;
    }
    if (had) noticeWithPrevious(resetWhy(f));
  }
  function resetWhy(f) {
    switch (f.reason) {
      case "idle":
        return f.idle_minutes ? "New conversation: the last one was idle for " + duration(f.idle_minutes) + "." : "New conversation: the last one was idle.";
      case "daily": return "New conversation for the new day.";
      case "manual": return "New conversation: reset from another device.";
      default: return "New conversation.";
    }
  }
  function duration(minutes) {
    const h = Math.floor(minutes / 60), m = minutes % 60;
    const part = function (n, w) { return n + " " + w + (n === 1 ? "" : "s"); };
    if (h === 0) return part(m, "minute");
    return m === 0 ? part(h, "hour") : part(h, "hour") + " " + part(m, "minute");
  }
  function noticeWithPrevious(s) {
    const el = document.createElement("div");
    el.className = "notice";
    el.textContent = s + " ";
    const btn = document.createElement("button");
    btn.type = "button";
    btn.className = "previous";
    btn.textContent = "Previous conversation";
    btn.addEventListener("click", askPrevious);
    el.appendChild(btn);
    log.appendChild(el);
    scroll();
  }
  // resetWhileAway says that the conversation shown before is no longer
  // the session's: a new, empty one after a reset, or — with history — one
  // another device went back to or wrote in meanwhile.
  function resetWhileAway(hasHistory) {
    noticeWithPrevious(hasHistory ? "The conversation changed while you were away." : "New conversation: the last one was closed while you were away.");
  }
  function askPrevious() {
    if (!send({ type: "resume_previous" })) notice("offline: try again when connected");
  }
  document.getElementById("previous").addEventListener("click", askPrevious);
  document.getElementById("reset").addEventListener("click", function () { ownReset = !!ws && ws.readyState === WebSocket.OPEN; });
  connect();
})();
