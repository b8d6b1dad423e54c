// The local try-it page: the coupon center as one user, a press of grab,
// the grant becoming a coupon in the wallet. Every call goes through the
// same-origin proxy (/api/<function>/...), which hands it to the function
// `cargo lambda watch` serves.
"use strict";

const $ = (id) => document.getElementById(id);
let caller = null; // {user, level}
let offers = [];   // the last page of the center
const pressed = new Map(); // couponId -> what the last press said

function headers(extra) {
  return Object.assign({ "x-user-id": caller.user, "x-user-level": String(caller.level) }, extra || {});
}

async function api(method, path, body) {
  const res = await fetch("/api" + path, {
    method,
    headers: headers(body ? { "content-type": "application/json" } : {}),
    body: body ? JSON.stringify(body) : undefined,
  });
  let json = null;
  try { json = await res.json(); } catch (e) { /* no body */ }
  return { status: res.status, body: json || {} };
}

function status(text) { $("status").textContent = text; }

function requestId() {
  if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
  return "r" + Date.now().toString(36) + Math.random().toString(36).slice(2, 10);
}

function countdown(what, ms) {
  const s = Math.max(0, Math.ceil((ms - Date.now()) / 1000));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  return what + " in " + (h ? h + "h " : "") + (h || m ? m + "m " : "") + r + "s";
}

// When the offer's state changes by the clock alone: its window opens, or
// its next release wave is out.
function opensAt(offer) {
  if (offer.state === "NOT_STARTED") return offer.startsAtMs;
  if (offer.state === "BETWEEN_WAVES") return offer.nextWaveAtMs;
  return null;
}

function when(offer) {
  if (offer.state === "NOT_STARTED") return countdown("starts", offer.startsAtMs);
  if (offer.state === "BETWEEN_WAVES") return countdown("next wave", offer.nextWaveAtMs);
  return "until " + new Date(offer.grabEndMs).toLocaleTimeString();
}

function render() {
  const body = $("center");
  body.textContent = "";
  for (const o of offers) {
    const tr = document.createElement("tr");
    tr.dataset.coupon = o.couponId;
    const cells = [
      o.name + " (" + o.couponId + ")",
      (o.amount / 100).toFixed(2),
      o.state,
      o.stock,
      (o.held === null ? "?" : o.held) + " / " + o.limit,
      when(o),
    ];
    cells.forEach((text, i) => {
      const td = document.createElement("td");
      td.textContent = text;
      if (i === 2) td.className = "state " + o.state;
      if (i === 5) td.className = "when";
      tr.appendChild(td);
    });
    const act = document.createElement("td");
    const button = document.createElement("button");
    button.textContent = "Grab";
    button.className = "grab";
    button.disabled = o.state !== "CAN_GRAB";
    button.addEventListener("click", () => grab(o.couponId));
    act.appendChild(button);
    const remind = document.createElement("button");
    remind.textContent = "Remind me";
    remind.className = "remind";
    remind.disabled = opensAt(o) === null;
    remind.addEventListener("click", () => remindMe(o.couponId));
    act.appendChild(remind);
    tr.appendChild(act);
    const said = document.createElement("td");
    said.className = "said";
    said.textContent = pressed.get(o.couponId) || "";
    tr.appendChild(said);
    body.appendChild(tr);
  }
}

async function loadCenter() {
  const res = await api("GET", "/grab/coupons?limit=50");
  if (res.status !== 200) { status("coupon center: " + res.status + " " + (res.body.code || "")); return; }
  offers = res.body.data.coupons;
  render();
  status(offers.length + " coupon(s) for " + caller.user);
}

async function loadWallet() {
  const res = await api("GET", "/wallet/me/coupons");
  const list = $("wallet");
  list.textContent = "";
  if (res.status !== 200) { status("wallet: " + res.status); return []; }
  for (const c of res.body.data.coupons) {
    const li = document.createElement("li");
    li.dataset.grant = c.grantId;
    li.textContent = c.name + " (" + c.couponId + ") " + c.status + ", grant " + c.grantId;
    list.appendChild(li);
  }
  return res.body.data.coupons;
}

// A press: one request id, retried on BUSY with the same id (safe: the
// retry replays the decision), as an app should.
async function grab(coupon) {
  const id = requestId();
  let res = null;
  for (let attempt = 0; attempt < 6; attempt++) {
    res = await api("POST", "/grab/coupons/" + encodeURIComponent(coupon) + "/grab", { requestId: id });
    if (res.status !== 503) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  const code = res.body.code || String(res.status);
  const grant = res.body.data && res.body.data.grantId;
  pressed.set(coupon, code === "SUCCESS" ? "won, grant " + grant + " on its way" : code);
  await loadCenter();
  if (grant) waitForCoupon(coupon, grant);
}

// "Remind me": the wallet stores it; the reconciler's schedule (locally:
// make pump) sends CouponSaleStarting to the event bus at the lead.
async function remindMe(coupon) {
  const res = await api("PUT", "/wallet/me/reminders/" + encodeURIComponent(coupon));
  const at = res.body.data && res.body.data.remindAtMs;
  pressed.set(coupon, res.body.code === "SUCCESS"
    ? "reminder set, sent at " + new Date(Math.max(at, Date.now())).toLocaleTimeString()
    : (res.body.code || String(res.status)));
  render();
}

// The issuer makes the grant a coupon (locally: make pump); watch the
// wallet until it is there.
async function waitForCoupon(coupon, grant) {
  for (let i = 0; i < 120; i++) {
    const coupons = await loadWallet();
    if (coupons.some((c) => c.grantId === grant)) {
      pressed.set(coupon, "won, in the wallet");
      render();
      return;
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

$("who").addEventListener("submit", async (e) => {
  e.preventDefault();
  caller = { user: $("user").value.trim(), level: Number($("level").value) || 0 };
  pressed.clear();
  await loadCenter();
  await loadWallet();
});

$("refresh").addEventListener("click", () => { if (caller) loadWallet(); });

// The center again every 5 s (stock levels move, coupons appear); the
// instance serves it from its copy, so this costs the catalogue nothing.
setInterval(() => { if (caller) loadCenter(); }, 5000);

// Countdowns tick; a coupon whose window opens (or whose next wave is out)
// reloads the center.
setInterval(() => {
  if (!caller) return;
  let opened = false;
  for (const tr of document.querySelectorAll("#center tr")) {
    const o = offers.find((x) => x.couponId === tr.dataset.coupon);
    if (!o) continue;
    tr.querySelector(".when").textContent = when(o);
    const at = opensAt(o);
    if (at !== null && at <= Date.now()) opened = true;
  }
  if (opened) loadCenter();
}, 1000);
