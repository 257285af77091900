// A physical DAG drawn as a graph: dagre lays it out (left to right), SVG
// draws it. Each node shows its operator's live rate, watermark lag and a
// backpressure colour; `update` refreshes those without a new layout.
// `markChanges` outlines the nodes by what the last ALTER did to them.

import dagre from "@dagrejs/dagre";
import { CHANGES, type Change, type Dag, type DagEdge, type DagOperator } from "./api";
import { backpressureColour, duration, percent, rate } from "./format";

const SVG = "http://www.w3.org/2000/svg";
const NODE_WIDTH = 214;
const NODE_HEIGHT = 92;

function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number> = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

/** A chained edge has no channel: both operators run in one task. */
function edgeLabel(e: DagEdge): string {
  return e.chained ? `${e.partitioning} · chained` : e.partitioning;
}

/**
 * What the layout draws once: operators (with their uid, kind and detail,
 * which an ALTER PIPELINE changes under the same ids) and edges.
 */
function shape(dag: Dag): string {
  return JSON.stringify([dag.operators.map((o) => [o.id, o.uid, o.kind, o.parallelism, o.detail]), dag.edges.map((e) => [e.from, e.to, edgeLabel(e)])]);
}

interface NodeParts {
  group: SVGGElement;
  box: SVGRectElement;
  rate: SVGTextElement;
  watermark: SVGTextElement;
  change: SVGTextElement;
}

export class DagView {
  private readonly root: SVGSVGElement;
  private nodes = new Map<number, NodeParts>();
  private layoutShape = "";
  private selected: number | null = null;
  private changes = new Map<number, Change>();

  constructor(
    container: HTMLElement,
    private readonly onSelect?: (operator: number) => void,
  ) {
    this.root = svg("svg", { class: "dag", "data-testid": "dag" });
    container.replaceChildren(this.root);
  }

  /** Draws `dag`; lays it out again only when its shape changed. */
  update(dag: Dag): void {
    if (shape(dag) !== this.layoutShape) this.layout(dag);
    for (const op of dag.operators) this.refresh(op);
  }

  select(operator: number | null): void {
    this.selected = operator;
    for (const [id, parts] of this.nodes) parts.group.classList.toggle("selected", id === operator);
  }

  /**
   * Outlines each operator in the colour of what the last ALTER did to it
   * (`changes`: operator id → change; empty for a pipeline never altered)
   * and names the change in the node, so it is not told by colour alone.
   */
  markChanges(changes: Map<number, Change>): void {
    this.changes = changes;
    for (const [id, parts] of this.nodes) {
      const change = changes.get(id);
      for (const c of CHANGES) parts.group.classList.toggle(`diff-${c}`, c === change);
      if (change) parts.group.dataset.change = change;
      else delete parts.group.dataset.change;
      parts.change.textContent = change ?? "";
    }
  }

  private layout(dag: Dag): void {
    this.layoutShape = shape(dag);
    const g = new dagre.graphlib.Graph();
    g.setGraph({ rankdir: "LR", nodesep: 30, ranksep: 56, marginx: 12, marginy: 12 });
    g.setDefaultEdgeLabel(() => ({}));
    for (const op of dag.operators) g.setNode(String(op.id), { width: NODE_WIDTH, height: NODE_HEIGHT });
    for (const e of dag.edges) g.setEdge(String(e.from), String(e.to), { label: edgeLabel(e), width: 90, height: 16 });
    dagre.layout(g);
    const { width = 0, height = 0 } = g.graph();
    this.root.replaceChildren();
    this.root.setAttribute("viewBox", `0 0 ${width} ${height}`);
    // Scale down to the page's width, never up.
    this.root.style.width = "100%";
    this.root.style.maxWidth = `${width}px`;
    this.root.style.height = "auto";
    const defs = svg("defs");
    const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" });
    marker.append(svg("path", { d: "M0,0 L10,5 L0,10 z", class: "arrow-head" }));
    defs.append(marker);
    this.root.append(defs);
    for (const e of dag.edges) {
      const edge = g.edge(String(e.from), String(e.to));
      const points = edge.points ?? [];
      const d = points.map((p, i) => `${i === 0 ? "M" : "L"}${p.x},${p.y}`).join(" ");
      const group = svg("g", { class: e.chained ? "dag-edge chained" : "dag-edge", "data-from": e.from, "data-to": e.to });
      group.append(svg("path", { d, "marker-end": "url(#arrow)" }));
      const label = svg("text", { x: edge.x ?? 0, y: (edge.y ?? 0) - 4, "text-anchor": "middle" });
      label.textContent = edgeLabel(e);
      group.append(label);
      this.root.append(group);
    }
    this.nodes.clear();
    for (const op of dag.operators) {
      const pos = g.node(String(op.id));
      const x = pos.x - NODE_WIDTH / 2;
      const y = pos.y - NODE_HEIGHT / 2;
      const group = svg("g", { class: "dag-node", "data-testid": "dag-node", "data-operator": op.id, transform: `translate(${x},${y})` });
      const box = svg("rect", { width: NODE_WIDTH, height: NODE_HEIGHT, rx: 8 });
      const title = svg("text", { x: 10, y: 20, class: "node-title" });
      title.textContent = `${op.id} · ${op.kind}  ×${op.parallelism}`;
      const detail = svg("text", { x: 10, y: 38, class: "node-detail" });
      detail.textContent = op.detail.length > 32 ? `${op.detail.slice(0, 31)}…` : op.detail;
      const tip = svg("title");
      tip.textContent = `${op.kind}: ${op.detail}\n${op.columns.map((c) => `${c.name} ${c.type}`).join(", ")}`;
      const rateText = svg("text", { x: 10, y: 60, class: "node-rate", "data-testid": "node-rate" });
      const watermark = svg("text", { x: 10, y: 80, class: "node-watermark" });
      const change = svg("text", { x: NODE_WIDTH - 8, y: 80, "text-anchor": "end", class: "node-change", "data-testid": "node-change" });
      group.append(box, title, detail, rateText, watermark, change, tip);
      if (this.onSelect) group.addEventListener("click", () => this.onSelect?.(op.id));
      this.root.append(group);
      this.nodes.set(op.id, { group, box, rate: rateText, watermark, change });
    }
    this.select(this.selected);
    this.markChanges(this.changes);
  }

  private refresh(op: DagOperator): void {
    const parts = this.nodes.get(op.id);
    if (!parts) return;
    const m = op.metrics;
    if (!m) {
      const cols = op.columns.map((c) => c.name).join(", ");
      parts.rate.textContent = cols.length > 32 ? `${cols.slice(0, 31)}…` : cols;
      parts.watermark.textContent = "";
      parts.box.style.fill = "";
      return;
    }
    const shown = op.kind === "source" ? m.rows_out_per_s : m.rows_in_per_s;
    parts.group.dataset.rate = String(shown);
    parts.group.dataset.backpressure = String(m.backpressure_share);
    parts.rate.textContent =
      op.kind === "source"
        ? `out ${rate(m.rows_out_per_s)} · bp ${percent(m.backpressure_share)}`
        : `in ${rate(m.rows_in_per_s)} · out ${rate(m.rows_out_per_s)} · bp ${percent(m.backpressure_share)}`;
    parts.watermark.textContent =
      m.watermark_lag_ms === null ? "watermark –" : `watermark lag ${duration(m.watermark_lag_ms)}`;
    parts.box.style.fill = backpressureColour(m.backpressure_share);
  }
}
