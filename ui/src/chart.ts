// Time-series charts (uPlot) for rates and watermark lag.

import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

export interface Series {
  label: string;
  values: (number | null)[];
  colour: string;
  scale?: string;
}

/** A chart whose data is replaced on every `update`. */
export class TimeChart {
  private plot: uPlot | null = null;
  private key = "";

  constructor(
    private readonly container: HTMLElement,
    private readonly title: string,
    private readonly height = 180,
  ) {}

  update(timesMs: number[], series: Series[]): void {
    const key = series.map((s) => s.label).join("|");
    const data: uPlot.AlignedData = [timesMs.map((t) => t / 1000), ...series.map((s) => s.values)];
    if (this.plot && key === this.key) {
      this.plot.setData(data);
      return;
    }
    this.plot?.destroy();
    this.key = key;
    const width = Math.max(320, this.container.clientWidth || 480);
    const scales = [...new Set(series.map((s) => s.scale ?? "y"))];
    this.plot = new uPlot(
      {
        title: this.title,
        width,
        height: this.height,
        series: [{}, ...series.map((s) => ({ label: s.label, stroke: s.colour, width: 1.5, scale: s.scale ?? "y" }))],
        axes: [{}, ...scales.map((scale, i) => ({ scale, side: i === 0 ? 3 : 1, grid: { show: i === 0 } }))],
      },
      data,
      this.container,
    );
  }

  destroy(): void {
    this.plot?.destroy();
    this.plot = null;
  }
}

/** A small inline SVG line for the overview's rate sparklines. */
export function sparkline(values: number[], width = 120, height = 28): SVGSVGElement {
  const ns = "http://www.w3.org/2000/svg";
  const root = document.createElementNS(ns, "svg");
  root.setAttribute("width", String(width));
  root.setAttribute("height", String(height));
  root.setAttribute("class", "sparkline");
  const max = Math.max(1, ...values);
  const step = values.length > 1 ? width / (values.length - 1) : width;
  const points = values.map((v, i) => `${(i * step).toFixed(1)},${(height - 2 - (v / max) * (height - 4)).toFixed(1)}`);
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", points.join(" "));
  root.append(line);
  return root;
}
