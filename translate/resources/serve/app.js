// The attention explorer: POST /attention, then one heatmap per head of the chosen kind and
// layer. No library: every file the page needs is served by translate.serve itself.
"use strict";

// Cross-attention rows are labelled with the token each query predicts, so that a row reads
// as the alignment does ("soup" looks at "Suppe"); self-attention rows with the query's own.
const KINDS = {
  encoder: { name: "encoder self-attention", rows: "source_tokens", cols: "source_tokens",
    axes: "rows are source tokens, columns the source tokens each looks at" },
  decoder_self: { name: "decoder self-attention", rows: "target_tokens", cols: "target_tokens",
    axes: "rows are the decoder's input tokens, columns the earlier ones each looks at" },
  decoder_cross: { name: "cross-attention", rows: "output_tokens", cols: "source_tokens",
    axes: "rows are the output tokens, as each is predicted; columns the source tokens it looks at" },
};
const CELL = 22; // px per weight: room for a 13 px label beside each row and column
const FONT = "13px system-ui, sans-serif";
const $ = (id) => document.getElementById(id);
const view = { data: null, kind: "decoder_cross", layer: 0 };

function setStatus(text, state) {
  $("status").textContent = text;
  $("status").dataset.state = state;
}

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const answer = await response.json();
  if (!response.ok) throw Object.assign(new Error(answer.error || response.statusText), { status: response.status });
  return answer;
}

async function translate(text) {
  setStatus("translating…", "loading");
  history.replaceState(null, "", "?text=" + encodeURIComponent(text));
  let answer;
  try {
    answer = await post("/attention", { text });
  } catch (err) {
    if (err.status === 501) return translationOnly(text, err.message); // an export alone
    setStatus(err.message, "error");
    return;
  }
  view.data = answer;
  view.kind = "decoder_cross";
  view.layer = answer.best_head.layer;
  show();
  setStatus("", "ready");
}

// A server without our model (a CTranslate2 export alone) translates but shows no heads.
async function translationOnly(text, why) {
  try {
    const answer = await post("/translate", { text: [text] });
    $("result").hidden = false;
    $("translation").textContent = answer.translations[0].translation;
    $("warnings").replaceChildren(...answer.warnings.map((w) => Object.assign(document.createElement("li"), { textContent: w })));
    for (const id of ["best", "controls", "axes", "grid"]) $(id).hidden = true;
    setStatus(why, "no-heads");
  } catch (err) {
    setStatus(err.message, "error");
  }
}

function show() {
  const d = view.data;
  $("result").hidden = false;
  for (const id of ["best", "controls", "axes", "grid"]) $(id).hidden = false;
  $("translation").textContent = d.translation || "(empty translation)";
  $("warnings").replaceChildren(...d.warnings.map((w) => Object.assign(document.createElement("li"), { textContent: w })));
  const b = d.best_head;
  $("best").innerHTML = "";
  $("best").append(
    "Best-aligning head: ",
    Object.assign(document.createElement("b"), { textContent: `cross-attention layer ${b.layer}, head ${b.head}` }),
    ` (chosen by ${b.by}). Its word alignment, source-target: ${d.alignments[b.layer][b.head] || "(none)"}`,
  );
  for (const button of $("kinds").children) {
    button.setAttribute("aria-selected", String(button.dataset.kind === view.kind));
  }
  const layers = d.attention[view.kind].length;
  $("layers").replaceChildren(...Array.from({ length: layers }, (_, n) => {
    const button = Object.assign(document.createElement("button"), { type: "button", textContent: n });
    button.setAttribute("aria-selected", String(n === view.layer));
    button.onclick = () => { view.layer = n; show(); };
    return button;
  }));
  const k = KINDS[view.kind];
  $("axes").textContent = `${k.name}, layer ${view.layer}: ${k.axes}; darker is more weight ` +
    "(each row sums to 1). Hover a cell to read it.";
  drawGrid();
}

function drawGrid() {
  const d = view.data;
  const heads = d.attention[view.kind][view.layer];
  const rows = d[KINDS[view.kind].rows];
  const cols = d[KINDS[view.kind].cols];
  const best = view.kind === "decoder_cross" && d.best_head.layer === view.layer ? d.best_head.head : -1;
  $("grid").replaceChildren(...heads.map((weights, h) => {
    const card = document.createElement("div");
    card.className = "head" + (h === best ? " best" : "");
    card.dataset.head = h;
    const title = document.createElement("h3");
    title.textContent = `head ${h}`;
    if (h === best) title.append(Object.assign(document.createElement("span"), { className: "star", textContent: " ★ best aligner" }));
    const meta = document.createElement("p");
    meta.className = "meta";
    const degenerate = d.degenerate[view.kind][view.layer][h];
    meta.textContent = `entropy ${d.entropy[view.kind][view.layer][h].toFixed(2)} nats` +
      (degenerate ? ` · ${degenerate}` : "") +
      (view.kind === "decoder_cross" ? ` · alignment ${d.alignments[view.layer][h] || "-"}` : "");
    card.append(title, meta, heatmap(weights, rows, cols));
    return card;
  }));
}

function heatmap(weights, rows, cols) {
  const canvas = document.createElement("canvas");
  const ctx = canvas.getContext("2d");
  ctx.font = FONT;
  const widest = (tokens) => Math.max(...tokens.map((t) => ctx.measureText(t).width));
  const left = Math.ceil(widest(rows)) + 8;
  const top = Math.ceil(widest(cols) * Math.SQRT1_2) + 14; // labels at 45 degrees
  const width = left + cols.length * CELL + Math.ceil(widest(cols) * Math.SQRT1_2);
  const height = top + rows.length * CELL;
  const scale = window.devicePixelRatio || 1;
  canvas.width = width * scale;
  canvas.height = height * scale;
  canvas.style.width = width + "px";
  canvas.style.height = height + "px";
  ctx.scale(scale, scale);
  ctx.font = FONT;
  ctx.fillStyle = "#1d2430";
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  rows.forEach((t, i) => ctx.fillText(t, left - 6, top + i * CELL + CELL / 2));
  ctx.textAlign = "left";
  cols.forEach((t, j) => {
    ctx.save();
    ctx.translate(left + j * CELL + CELL / 2, top - 6);
    ctx.rotate(-Math.PI / 4);
    ctx.fillText(t, 0, 0);
    ctx.restore();
  });
  weights.forEach((row, i) => row.forEach((w, j) => {
    ctx.fillStyle = color(w);
    ctx.fillRect(left + j * CELL, top + i * CELL, CELL - 1, CELL - 1);
  }));
  canvas.onmousemove = (event) => {
    const box = canvas.getBoundingClientRect();
    const j = Math.floor((event.clientX - box.left - left) / CELL);
    const i = Math.floor((event.clientY - box.top - top) / CELL);
    const tip = $("tip");
    if (i < 0 || j < 0 || i >= rows.length || j >= cols.length) { tip.hidden = true; return; }
    tip.textContent = `${rows[i]} → ${cols[j]}: ${weights[i][j].toFixed(3)}`;
    Object.assign(tip.style, { left: event.clientX + 14 + "px", top: event.clientY + 14 + "px" });
    tip.hidden = false;
  };
  canvas.onmouseleave = () => { $("tip").hidden = true; };
  return canvas;
}

// White to dark blue: weight 0 is the page's white, 1 the darkest.
function color(w) {
  const stops = [[247, 251, 255], [107, 174, 214], [8, 48, 107]];
  const x = Math.min(Math.max(w, 0), 1) * (stops.length - 1);
  const k = Math.min(Math.floor(x), stops.length - 2);
  const f = x - k;
  const c = stops[k].map((a, n) => Math.round(a + (stops[k + 1][n] - a) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

$("form").onsubmit = (event) => {
  event.preventDefault();
  const text = $("source").value.trim();
  if (text) translate(text);
};
$("source").onkeydown = (event) => {
  if (event.key === "Enter" && event.ctrlKey) $("form").requestSubmit();
};
for (const button of $("kinds").children) {
  button.onclick = () => {
    view.kind = button.dataset.kind;
    view.layer = Math.min(view.layer, view.data.attention[view.kind].length - 1);
    show();
  };
}
const initial = new URLSearchParams(location.search).get("text");
if (initial) {
  $("source").value = initial;
  translate(initial);
}
