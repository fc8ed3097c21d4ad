// The page of `aiayn serve`: translate what is pasted (sentences, paragraphs) with /v1/translate
// (split: the server cuts it into sentences and rejoins their translations with the text's own
// whitespace), then draw the encoder-decoder attention of one sentence (/v1/attention) as an SVG heat
// map: the translation shown, from the same search. No libraries, no network but this server.
"use strict";
const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
let sentences = [], att = null;

async function post(path, body) {
  const key = $("key").value;
  if (key) body.api_key = key;
  const r = await fetch(path, {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
  const data = await r.json().catch(() => ({error: r.statusText}));
  if (!r.ok) throw new Error(data.error || r.statusText);
  return data;
}

function el(name, attrs, text) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function draw() {
  const box = $("heatmap");
  box.textContent = "";
  if (!att) return;
  const m = att.layers[Number($("layer").value)];
  const src = att.source_tokens, tgt = att.target_tokens;
  // Shade relative to the map's largest weight: a diffuse (or untrained) model still shows its pattern.
  const peak = Math.max(1e-6, ...m.flat());
  const cell = 26, left = 8 + 8 * Math.max(...tgt.map((t) => t.length)), top = 8 + 7 * Math.max(...src.map((t) => t.length));
  const svg = el("svg", {width: left + cell * src.length + 8, height: top + cell * tgt.length + 8, id: "heatmap-svg"});
  src.forEach((t, j) => {
    const x = left + j * cell + cell / 2;
    svg.appendChild(el("text", {class: "tok src-tok", "data-col": j, x, y: top - 6,
                                transform: `rotate(-60 ${x} ${top - 6})`}, t));
  });
  tgt.forEach((t, i) => {
    const y = top + i * cell + cell * 0.65;
    const label = el("text", {class: "tok tgt-tok", "data-row": i, x: left - 6, y, "text-anchor": "end"}, t);
    label.addEventListener("mouseenter", () => highlight(i));
    label.addEventListener("mouseleave", () => highlight(-1));
    svg.appendChild(label);
    (m[i] || []).forEach((w, j) => {
      const r = el("rect", {class: "cell", "data-row": i, "data-col": j, x: left + j * cell, y: top + i * cell,
                            width: cell, height: cell, fill: `rgba(20, 60, 160, ${Math.max(0, Math.min(1, w / peak))})`});
      r.appendChild(el("title", {}, `${t} <- ${src[j]}: ${w.toFixed(3)}`));
      r.addEventListener("mouseenter", () => highlight(i));
      r.addEventListener("mouseleave", () => highlight(-1));
      svg.appendChild(r);
    });
  });
  box.appendChild(svg);
}

// Hovering target piece i outlines its row and marks the source piece it attends to most.
function highlight(i) {
  const svg = $("heatmap-svg");
  if (!svg) return;
  svg.querySelectorAll(".hl, .aligned, .active").forEach((e) => e.classList.remove("hl", "aligned", "active"));
  if (i < 0) return;
  const row = att.layers[Number($("layer").value)][i] || [];
  const best = row.indexOf(Math.max(...row));
  svg.querySelectorAll(`.cell[data-row="${i}"]`).forEach((e) => e.classList.add("hl"));
  svg.querySelector(`.tgt-tok[data-row="${i}"]`).classList.add("active");
  const s = svg.querySelector(`.src-tok[data-col="${best}"]`);
  if (s) s.classList.add("aligned");
  const c = svg.querySelector(`.cell[data-row="${i}"][data-col="${best}"]`);
  if (c) c.classList.add("aligned");
}

async function showAttention(k) {
  document.querySelectorAll("#output .translation").forEach((s, j) => s.classList.toggle("selected", j === k));
  att = await post("/v1/attention", {q: sentences[k], beam: Number($("beam").value)});
  $("att-translation").textContent = att.translation;
  const sel = $("layer");
  sel.textContent = "";
  att.layer_names.forEach((name, j) => sel.appendChild(new Option(name, j)));
  sel.value = att.layers.length - 1;
  $("attention").hidden = false;
  draw();
}

$("form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const text = $("source").value;
  const out = $("output");
  $("status").textContent = "";
  out.textContent = "";
  $("attention").hidden = true;
  $("heatmap").textContent = "";  // the previous text's map must not stand for the new one
  $("att-translation").textContent = "";
  att = null;
  if (!text.trim()) return;
  $("go").disabled = true;
  try {
    const t = (await post("/v1/translate", {q: text, beam: Number($("beam").value), split: true})).translations[0];
    sentences = t.sentences.map((x) => x.source);
    // The text's own whitespace between the translated sentences (the box keeps it: white-space pre-wrap).
    out.appendChild(document.createTextNode(t.gaps[0]));
    t.sentences.forEach((x, k) => {
      const span = document.createElement("span");
      span.textContent = x.text;
      span.className = "translation";
      span.title = x.source;
      span.addEventListener("click", () => showAttention(k).catch((e) => ($("status").textContent = e.message)));
      out.appendChild(span);
      out.appendChild(document.createTextNode(t.gaps[k + 1]));
    });
    if (sentences.length) await showAttention(0);
  } catch (e) {
    $("status").textContent = e.message;
  } finally {
    $("go").disabled = false;
  }
});
$("layer").addEventListener("change", draw);

fetch("/frontend/settings").then((r) => r.json()).then((s) => {
  $("pair").textContent = `${s.language.source.code} → ${s.language.target.code}`;
  $("keyrow").hidden = !s.keyRequired;
});
