// Number, time and colour formatting shared by the pages.

export function rate(perSecond: number): string {
  if (perSecond >= 1e6) return `${(perSecond / 1e6).toFixed(1)}M/s`;
  if (perSecond >= 1e3) return `${(perSecond / 1e3).toFixed(1)}k/s`;
  if (perSecond >= 10) return `${perSecond.toFixed(0)}/s`;
  return `${perSecond.toFixed(1)}/s`;
}

export function count(n: number): string {
  return n.toLocaleString("en-US");
}

export function duration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return "–";
  const abs = Math.abs(ms);
  if (abs < 1000) return `${ms} ms`;
  if (abs < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  if (abs < 3_600_000) return `${(ms / 60_000).toFixed(1)} min`;
  if (abs < 86_400_000) return `${(ms / 3_600_000).toFixed(1)} h`;
  return `${(ms / 86_400_000).toFixed(1)} d`;
}

/** Bytes in binary units: "512 B", "88.1 MiB". */
export function bytes(n: number | null | undefined): string {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}

export function timestamp(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return "–";
  return new Date(ms).toISOString().replace("T", " ").replace("Z", "");
}

export function percent(share: number): string {
  return `${(share * 100).toFixed(share < 0.1 ? 1 : 0)}%`;
}

/** Green (no backpressure) through amber to red (always waiting). */
export function backpressureColour(share: number): string {
  const s = Math.max(0, Math.min(1, share));
  const hue = 130 - 130 * Math.min(1, s * 1.6);
  return `hsl(${hue.toFixed(0)}, 62%, ${s < 0.05 ? 88 : 80}%)`;
}

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child);
  return node;
}
