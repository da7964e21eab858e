// Hover tips: an SVG group with data-tips holds one text per shape (path or use) it draws, in
// drawing order; a single text covers every shape of the group.
(() => {
  const tip = document.getElementById("tip");
  const groups = new WeakMap();

  function tipsOf(group) {
    if (!groups.has(group)) {
      const shapes = Array.from(group.querySelectorAll("path, use")).filter((s) => !s.closest("defs"));
      groups.set(group, { texts: JSON.parse(group.dataset.tips), shapes });
    }
    return groups.get(group);
  }

  function textAt(target) {
    const group = target.closest && target.closest("[data-tips]");
    if (!group) return null;
    const { texts, shapes } = tipsOf(group);
    const i = texts.length === 1 ? 0 : shapes.indexOf(target.closest("path, use"));
    return i >= 0 && i < texts.length ? texts[i] : null;
  }

  function show(event) {
    const text = textAt(event.target);
    if (text === null) {
      tip.hidden = true;
      return;
    }
    tip.textContent = text;
    tip.hidden = false;
    const pad = 14;
    let x = event.clientX + pad;
    let y = event.clientY + pad;
    if (x + tip.offsetWidth > window.innerWidth) x = Math.max(0, event.clientX - tip.offsetWidth - pad);
    if (y + tip.offsetHeight > window.innerHeight) y = Math.max(0, event.clientY - tip.offsetHeight - pad);
    tip.style.left = `${x}px`;
    tip.style.top = `${y}px`;
  }

  document.addEventListener("mousemove", show);
  document.addEventListener("mouseleave", () => { tip.hidden = true; });
})();

// The head view: a click on a label-grid cell (an SVG group with data-heads, one head per shape)
// draws that head in its model's section: the query row over the tokens of a kept probe example,
// shaded by attention, A, B, the previous and the first token marked, one revision at a time
// (slider) or one example at a time (buttons).
(() => {
  const state = new WeakMap(); // .headview -> {data, head, revision, example}

  function dataOf(view) {
    if (!state.has(view)) {
      const script = view.querySelector("script.hv-data");
      state.set(view, { data: script ? JSON.parse(script.textContent) : null, head: null, revision: 0, example: 0 });
    }
    return state.get(view);
  }

  function decode(packed) {
    const [top, text] = packed;
    const bytes = atob(text);
    const values = new Array(bytes.length);
    for (let i = 0; i < bytes.length; i++) values[i] = (bytes.charCodeAt(i) / 255) * top;
    return values;
  }

  function element(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  const CLASSES = ["induction", "duplicate-token", "previous-token", "first-token", "self", "local"];
  const MARKS = { first: "first", A: "A", B: "B", previous: "prev" };

  function draw(view) {
    const s = dataOf(view);
    const body = view.querySelector(".hv-body");
    body.replaceChildren();
    const head = s.data.heads[s.head];
    const title = element("h4", { class: "hv-title" });
    body.appendChild(title);
    if (!head) {
      title.textContent = `${s.head}: unclassified at every revision`;
      body.appendChild(element("p", {}, "Its attention is kept only for heads labelled or in a circuit at some revision."));
      return;
    }
    const stored = s.data.revisions.map((r, i) => [r, i]).filter(([r]) => head.rows[r.name]);
    if (!stored.some(([, i]) => i === s.revision)) s.revision = stored.length ? stored[stored.length - 1][1] : s.revision;
    const revision = s.data.revisions[s.revision];
    const sel = head.sel[s.revision];
    title.textContent = `${s.head} at ${revision.label}: ${head.labels[s.revision] || "not screened"}`;
    body.appendChild(element("p", { class: "hv-sel" },
      "selectivity: " + CLASSES.map((c, i) => `${c} ${sel[i] === null ? "–" : sel[i].toFixed(1) + "x"}`).join(", ")));
    if (stored.length > 1) {
      const slider = element("input", { type: "range", min: 0, max: stored.length - 1, class: "hv-slider",
        value: stored.findIndex(([, i]) => i === s.revision), "aria-label": "revision" });
      slider.addEventListener("input", () => { s.revision = stored[Number(slider.value)][1]; draw(view); });
      body.appendChild(slider);
    }
    const buttons = element("div", { class: "hv-examples" });
    s.data.examples.forEach((ex, k) => {
      const b = element("button", { type: "button", class: k === s.example ? "hv-on" : "" }, `example ${ex.example}`);
      b.addEventListener("click", () => { s.example = k; draw(view); });
      buttons.appendChild(b);
    });
    body.appendChild(buttons);
    const packed = head.rows[revision.name];
    if (!packed) {
      body.appendChild(element("p", { class: "gap" }, `No attention patterns were kept at ${revision.label}.`));
      return;
    }
    const ex = s.data.examples[s.example];
    const values = decode(packed[s.example]);
    const marks = {};
    for (const [key, name] of Object.entries(MARKS)) if (ex[key] >= 0) marks[ex[key]] = name;
    const strip = element("div", { class: "hv-strip", "data-head": s.head, "data-revision": revision.name });
    const top = Math.max(...values) || 1;
    values.forEach((v, pos) => {
      const cell = element("span", { class: "hv-token" + (marks[pos] ? " hv-mark" : "") + (pos === ex.query ? " hv-query" : ""),
        title: `position ${pos}, token ${ex.ids[pos]}: ${v.toFixed(3)}${marks[pos] ? " (" + marks[pos] + ")" : ""}` },
        String(ex.ids[pos]));
      cell.style.background = `rgba(214, 39, 40, ${(v / top).toFixed(3)})`;
      if (marks[pos]) cell.appendChild(element("sup", {}, marks[pos]));
      strip.appendChild(cell);
    });
    body.appendChild(strip);
    const order = values.map((v, i) => [v, i]).sort((a, b) => b[0] - a[0]).slice(0, 3);
    body.appendChild(element("p", { class: "hv-top" }, "most attended: " +
      order.map(([v, i]) => `${i}${marks[i] ? " (" + marks[i] + ")" : ""} ${v.toFixed(3)}`).join(", ")));
  }

  document.addEventListener("click", (event) => {
    const group = event.target.closest && event.target.closest("[data-heads]");
    if (!group) return;
    const shapes = Array.from(group.querySelectorAll("path, use")).filter((p) => !p.closest("defs"));
    const i = shapes.indexOf(event.target.closest("path, use"));
    const heads = JSON.parse(group.dataset.heads);
    if (i < 0 || i >= heads.length) return;
    const section = group.closest("section");
    const view = section && section.querySelector(".headview");
    if (!view) return;
    const s = dataOf(view);
    if (!s.data) return;
    s.head = heads[i];
    s.revision = Math.max(0, s.data.revisions.findIndex((r) => r.name === group.dataset.revision));
    draw(view);
    view.scrollIntoView({ block: "nearest" });
  });
})();
