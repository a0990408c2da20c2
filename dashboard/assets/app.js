// weft dashboard: every action is a call to the REST API (/v1) with the
// session cookie and its CSRF token; pages refresh themselves from the
// event stream (/v1/events).
"use strict";
(function () {
  const csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";

  async function api(method, path, body) {
    const headers = { "X-Weft-CSRF": csrf };
    const init = { method, headers, credentials: "same-origin" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const res = await fetch(path, init);
    if (!res.ok) {
      let msg = res.status + " " + res.statusText;
      try { const e = await res.json(); if (e.error) msg = e.error.message || e.error.code; } catch (_) { /* not JSON */ }
      throw new Error(msg);
    }
    return res.status === 204 ? null : res.json();
  }

  let toastTimer;
  function toast(msg, bad) {
    const t = document.getElementById("toast");
    t.textContent = msg;
    t.className = bad ? "bad" : "good";
    t.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { t.hidden = true; }, 5000);
  }

  function parseJSON(text, field) {
    if (text.trim() === "") return undefined;
    try { return JSON.parse(text); } catch (e) { throw new Error(field + " is not JSON: " + e.message); }
  }

  // Buttons: data-api="METHOD /v1/path", optional data-confirm and
  // data-reason (asks for a reason, recorded in the audit trail).
  async function onButton(b) {
    if (b.dataset.confirm && !window.confirm(b.dataset.confirm)) return;
    const [method, path] = b.dataset.api.split(" ");
    // data-body: the fixed fields of the request, as JSON.
    let body = b.dataset.body ? JSON.parse(b.dataset.body) : {};
    if (b.dataset.reason !== undefined) {
      const reason = window.prompt(b.dataset.reason, "");
      if (reason === null) return;
      if (reason) body.reason = reason;
    }
    b.disabled = true;
    try {
      let res = await api(method, path, body);
      // A bulk action answers after part of its tasks when they take long
      // ("complete": false): go on from its cursor until it is complete.
      let done = res && typeof res.done === "number" ? res.done : null;
      while (res && res.complete === false && res.next > 0) {
        toast(b.textContent.trim() + ": " + done + " done, " + res.remaining + " remaining…");
        res = await api(method, path, Object.assign({}, body, { cursor: res.next }));
        done += res.done;
      }
      toast(b.textContent.trim() + ": " + (done === null ? "done" : done + " done"));
      refresh(true);
    } catch (e) {
      toast(b.textContent.trim() + ": " + e.message, true);
    } finally { b.disabled = false; }
  }

  // Bulk actions loop over the ids the page lists, one REST call each.
  async function onBulk(b) {
    if (b.dataset.confirm && !window.confirm(b.dataset.confirm)) return;
    const ids = b.dataset.ids.split(",").filter(Boolean);
    b.disabled = true;
    let ok = 0; const failed = [];
    for (const id of ids) {
      try { await api("POST", "/v1/tasks/" + id + "/" + b.dataset.bulk, {}); ok++; } catch (e) { failed.push(id + ": " + e.message); }
    }
    toast(b.dataset.bulk + ": " + ok + " of " + ids.length + " done" + (failed.length ? "; failed " + failed.join("; ") : ""), failed.length > 0);
    b.disabled = false;
    refresh(true);
  }

  async function onForm(f, submitter) {
    const v = (n) => (f.elements[n] ? f.elements[n].value : "");
    try {
      if (f.dataset.kind === "policy") {
        const body = { target: v("target").trim() };
        if (v("reason")) body.reason = v("reason");
        if (submitter && submitter.value !== "") body.paused = submitter.value === "true";
        if (v("concurrency") !== "") body.concurrency = parseInt(v("concurrency"), 10);
        if (v("weight") !== "") body.weight = parseInt(v("weight"), 10);
        if (v("rate").trim() !== "") body.rate = v("rate").trim();
        await api("POST", "/v1/policies", body);
        toast("policy of " + body.target + " changed");
      }
      if (f.dataset.kind === "signal") {
        const payload = parseJSON(v("payload"), "payload");
        const res = await api("POST", "/v1/tasks/" + f.dataset.task + "/signals/" + encodeURIComponent(v("name").trim()),
          payload === undefined ? {} : { payload });
        toast("signal " + v("name") + (res && res.delivered ? ": delivered" : ": stored until a step waits for it"));
      } else if (f.dataset.kind === "resolve") {
        const result = parseJSON(v("result"), "result");
        const body = {};
        if (v("reason")) body.reason = v("reason");
        if (result === undefined) {
          await api("POST", "/v1/steps/" + f.dataset.step + "/resolve", body);
        } else {
          body.result = result;
          await api("POST", "/v1/steps/" + f.dataset.step + "/complete", body);
        }
        toast("step resolved");
      }
      f.reset();
      refresh(true);
    } catch (e) { toast(e.message, true); }
  }

  document.addEventListener("click", (ev) => {
    const b = ev.target.closest("button[data-api]");
    if (b) { ev.preventDefault(); onButton(b); return; }
    const bulk = ev.target.closest("button[data-bulk]");
    if (bulk) { ev.preventDefault(); onBulk(bulk); }
  });
  document.addEventListener("submit", (ev) => {
    const f = ev.target.closest("form.api-form");
    if (f) { ev.preventDefault(); onForm(f, ev.submitter); }
  });

  // Live refresh: the page's content is fetched again (?fragment=1) when
  // events arrive, at most once a second, and not while a form is in use.
  const main = document.getElementById("content");
  let pending = false, last = 0;
  async function refresh(now) {
    if (!main) return;
    const busy = main.contains(document.activeElement) && /INPUT|TEXTAREA|SELECT/.test(document.activeElement.tagName);
    const open = main.querySelector("details.resolve[open]");
    if (!now && (busy || open)) { pending = true; setTimeout(() => refresh(false), 1000); return; }
    const wait = now ? 0 : Math.max(0, 1000 - (Date.now() - last));
    if (pending && !now) return;
    pending = true;
    setTimeout(async () => {
      pending = false; last = Date.now();
      const u = new URL(window.location.href);
      u.searchParams.set("fragment", "1");
      try {
        const res = await fetch(u, { credentials: "same-origin" });
        if (res.ok) {
          const kept = place();
          main.innerHTML = await res.text();
          restore(kept);
          main.dispatchEvent(new Event("refreshed"));
        }
      } catch (_) { /* the next event tries again */ }
    }, wait);
  }

  // What a refresh keeps of the page as a person left it: which <details>
  // are open, and the element that has the keyboard's focus (found again by
  // its id, by where it links, else by its place among the focusable
  // elements), so that a live update does not send the focus back to the
  // top of the page.
  const focusable = "a[href], button, input, select, textarea, summary, [tabindex]";
  function place() {
    const details = [...main.querySelectorAll("details")].map((d) => ({ id: d.id, open: d.open }));
    const el = document.activeElement;
    if (!el || el === main || !main.contains(el)) return { details, focus: null };
    return { details, focus: { id: el.id, href: el.getAttribute("href"), tag: el.tagName, index: [...main.querySelectorAll(focusable)].indexOf(el) } };
  }
  function restore(kept) {
    const details = main.querySelectorAll("details");
    details.forEach((d, i) => {
      const was = d.id ? kept.details.find((k) => k.id === d.id) : details.length === kept.details.length ? kept.details[i] : null;
      if (was) d.open = was.open;
    });
    const f = kept.focus;
    if (!f) return;
    const all = [...main.querySelectorAll(focusable)];
    const at = all[f.index];
    const same = (e) => e && e.tagName === f.tag && e.getAttribute("href") === f.href;
    let el = f.id ? document.getElementById(f.id) : null;
    if (!el && same(at)) el = at;
    if (!el && f.href !== null) el = all.find((e) => same(e) && e.tabIndex >= 0);
    if (!el && at && at.tagName === f.tag) el = at;
    if (el && main.contains(el)) el.focus({ preventScroll: true });
  }

  // The graph zooms (the buttons above it, or + - 0 while it has the
  // focus) and pans (drag it, or scroll its box), and keeps its zoom
  // across live updates.
  let zoom = 1;
  function graph() {
    const svg = document.querySelector("#dag svg.dag");
    return svg && { svg, box: svg.parentElement, w: +svg.getAttribute("width"), h: +svg.getAttribute("height") };
  }
  function applyZoom(z) {
    const g = graph();
    if (!g) return;
    zoom = Math.min(4, Math.max(0.1, z));
    g.svg.style.width = (g.w * zoom).toFixed(0) + "px";
    g.svg.style.height = (g.h * zoom).toFixed(0) + "px";
    g.svg.style.maxWidth = "none";
    const level = document.querySelector("[data-zoom-level]");
    if (level) level.textContent = Math.round(zoom * 100) + "%";
  }
  function zoomTo(how) {
    const g = graph();
    if (!g) return;
    if (how === "in") applyZoom(zoom * 1.25);
    else if (how === "out") applyZoom(zoom / 1.25);
    else if (how === "reset") applyZoom(1);
    else if (how === "fit") applyZoom(Math.min((g.box.clientWidth - 4) / g.w, 1));
  }
  function zoomControls() {
    const bar = document.querySelector(".zoom");
    if (!bar || !graph()) return;
    bar.hidden = false;
    applyZoom(zoom);
  }
  document.addEventListener("click", (ev) => {
    const b = ev.target.closest("[data-zoom]");
    if (b) zoomTo(b.getAttribute("data-zoom"));
  });
  document.addEventListener("keydown", (ev) => {
    if (!ev.target.closest || !ev.target.closest("#dag") || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const how = { "+": "in", "=": "in", "-": "out", "0": "reset" }[ev.key];
    if (how) { ev.preventDefault(); zoomTo(how); }
  });
  let drag = null;
  document.addEventListener("pointerdown", (ev) => {
    const box = ev.target.closest && ev.target.closest("#dag");
    if (!box || ev.button !== 0 || ev.target.closest("a")) return;
    drag = { box, x: ev.clientX, y: ev.clientY, left: box.scrollLeft, top: box.scrollTop };
    box.classList.add("dragging");
  });
  document.addEventListener("pointermove", (ev) => {
    if (!drag) return;
    drag.box.scrollLeft = drag.left - (ev.clientX - drag.x);
    drag.box.scrollTop = drag.top - (ev.clientY - drag.y);
  });
  document.addEventListener("pointerup", () => { if (drag) { drag.box.classList.remove("dragging"); drag = null; } });
  zoomControls();
  if (main) main.addEventListener("refreshed", zoomControls);

  const kinds = ["task.submitted", "task.started", "task.retried", "task.completed", "task.failed", "task.cancelled", "task.expired",
    "step.ready", "step.claimed", "step.completed", "step.failed", "step.waiting", "step.skipped", "step.cancelled", "step.expired",
    "step.resolved", "step.pending", "step.running", "step.preempted"];
  if (main && main.hasAttribute("data-live") && window.EventSource) {
    const q = main.getAttribute("data-live");
    const es = new EventSource("/v1/events" + (q ? "?" + q : ""));
    const dot = document.getElementById("live");
    es.onopen = () => { if (dot) dot.hidden = false; };
    es.onerror = () => { if (dot) dot.hidden = true; };
    for (const k of kinds) es.addEventListener(k, () => refresh(false));
    // The server ends the stream when the session has ended (signed out,
    // key revoked): reload, which leads to the sign-in page.
    es.addEventListener("error", (ev) => {
      if (ev.data && ev.data.includes('"unauthenticated"')) { es.close(); window.location.reload(); }
    });
  }
})();
