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
