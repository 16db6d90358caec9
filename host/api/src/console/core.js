// slotd operator console, part 1 of 3 (core.js, pools.js, app.js, loaded in that order):
// building the page from text, calling the API, formatting.
//
// Rules this file keeps:
// - Every value from the API reaches the page as text: elements are built with `el()`, which
//   sets strings through text nodes, never `innerHTML` (a task type or a provider's error
//   message is attacker-controlled).
// - Routes live in the URL hash (`#/tasks/ID`), so the back button and shared links work and
//   the server serves the page only at `/`.
// - Writes (cancel, retry) send a JSON content type: the loopback default refuses other
//   writes from a browser (see local_guard.rs).
"use strict";

const REFRESH_MS = 2000;
const STATUSES = ["pending", "submitted", "succeeded", "finalizing", "completed", "failed", "cancelled"];
const SVG_NS = "http://www.w3.org/2000/svg";

// ---- DOM building: text only ---------------------------------------------------------------

/** An element with attributes and children; strings and numbers become text nodes. */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  setAttrs(node, attrs);
  append(node, children);
  return node;
}

/** An SVG element, likewise. */
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  setAttrs(node, attrs);
  append(node, children);
  return node;
}

function setAttrs(node, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "onclick" || k === "onsubmit" || k === "onchange") node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
}

function append(node, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    node.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

function replace(node, ...children) {
  node.replaceChildren();
  append(node, children);
}

// ---- API ---------------------------------------------------------------------------------

const keyInput = document.getElementById("key");
keyInput.value = localStorage.getItem("slotd-key") || "";
keyInput.addEventListener("change", () => {
  localStorage.setItem("slotd-key", keyInput.value);
  me = null;
  render();
});

// A key typed into another tab of the console applies here too.
window.addEventListener("storage", (e) => {
  if (e.key !== "slotd-key") return;
  keyInput.value = e.newValue || "";
  me = null;
  render();
});

function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (keyInput.value) h.Authorization = "Bearer " + keyInput.value;
  return h;
}

class ApiError extends Error {
  constructor(path, status, detail) {
    super(path + ": " + (detail || "HTTP " + status));
    this.status = status;
  }
}

async function api(path, options) {
  const r = await fetch(path, Object.assign({ cache: "no-store" }, options || {}, { headers: headers(options && options.headers) }));
  if (!r.ok) {
    const p = await r.json().catch(() => ({}));
    throw new ApiError(path, r.status, p.detail);
  }
  return r.json();
}

/** A write the loopback rules accept: JSON body, JSON content type. */
function post(path) {
  return api(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
}

function showError(e) {
  const box = document.getElementById("error");
  if (!e) { box.hidden = true; box.textContent = ""; return; }
  box.hidden = false;
  box.textContent = e.status === 401 ? "This slotd needs an API key: type it in the box above. (" + e.message + ")" : e.message;
}

let me = null;
async function whoAmI() {
  if (!me) {
    me = await api("/v1/me");
    replace(document.getElementById("who"), "tenant ", me.tenant, me.admin ? " · admin" : "");
  }
  return me;
}

// ---- formatting ----------------------------------------------------------------------------

const q = encodeURIComponent;
function time(ms) { return ms ? new Date(ms).toLocaleTimeString() : "—"; }
function dateTime(ms) { return ms ? new Date(ms).toLocaleString() : "—"; }
function duration(ms) {
  if (ms === null || ms === undefined) return "—";
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  return (ms / 60000).toFixed(1) + " min";
}
function bytes(n) {
  if (n === null || n === undefined || n === "") return "—";
  const v = Number(n);
  if (!isFinite(v)) return String(n);
  if (v < 1024) return v + " B";
  if (v < 1048576) return (v / 1024).toFixed(1) + " KiB";
  return (v / 1048576).toFixed(1) + " MiB";
}
function badge(status) { return el("span", { class: "badge " + String(status || "").replace(/[^a-z_]/g, "") }, status || "—"); }
function progress(done, total) {
  const bar = el("span", { class: "progress" }, el("span"));
  bar.firstChild.style.width = (total ? Math.round(100 * done / total) : 0) + "%";
  return [bar, done + "/" + total];
}
function taskLink(id) { return el("a", { href: "#/tasks/" + q(id) }, el("code", {}, id)); }
function errorText(e) {
  if (!e) return null;
  if (typeof e === "string") {
    try { e = JSON.parse(e); } catch (_) { return e; }
  }
  if (typeof e !== "object") return String(e);
  return (e.code ? "[" + e.code + "] " : "") + (e.message || JSON.stringify(e));
}
/** A stable hue per task, so one task's bars share a color; from green through blue to
 *  pink, never the orange of an over-capacity refusal. */
function hue(s) {
  let h = 0;
  for (const c of String(s)) h = (h * 31 + c.charCodeAt(0)) % 210;
  return 120 + h;
}
