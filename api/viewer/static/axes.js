// Plot areas with labelled axes on a canvas, drawn by hand (no chart library): "nice" tick values
// (1, 2 or 5 × 10^n), grid lines, tick labels, axis titles, and lines in data coordinates.

const GRID = "#2a303b";
const AXIS = "#8a93a3";
const FONT = "11px system-ui, sans-serif";

// Evenly spaced round values covering [min, max], about `count` of them.
export function niceTicks(min, max, count = 5) {
  if (!(max > min)) max = min + 1;
  const raw = (max - min) / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw * 0.999);
  const ticks = [];
  for (let v = Math.ceil(min / step) * step; v <= max + step * 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

// A short label: 950, 12.5k, 3.2M.
export function shortNumber(v) {
  const a = Math.abs(v);
  if (a >= 1e6) return `${Number((v / 1e6).toFixed(1))}M`;
  if (a >= 1e4) return `${Number((v / 1e3).toFixed(1))}k`;
  return String(Number(v.toFixed(2)));
}

// The top of a y scale from 0 that holds `max`: the first nice tick at or above it.
export function niceTop(max, floor = 1) {
  const ticks = niceTicks(0, Math.max(floor, max), 4);
  const top = ticks[ticks.length - 1];
  return top >= max ? top : top + (ticks[1] - ticks[0]);
}

// Draws the background, grid and axes of a plot and returns its scales and the labels it wrote.
// x: {min, max, title}; left and right (optional): {max, title, colour} scales from 0 to max.
export function drawAxes(ctx, canvas, { pad, x, left, right }) {
  const w = canvas.width, h = canvas.height;
  const x0 = pad.l, x1 = w - pad.r, y0 = h - pad.b, y1 = pad.t;
  const sx = (v) => x0 + ((v - x.min) / Math.max(1, x.max - x.min)) * (x1 - x0);
  const scaleY = (axis) => (v) => y0 - (v / axis.max) * (y0 - y1);
  ctx.fillStyle = "#0b0d11";
  ctx.fillRect(0, 0, w, h);
  ctx.font = FONT;
  ctx.lineWidth = 1;
  const labels = { x: [], left: [], right: [] };

  const leftTicks = niceTicks(0, left.max, 4).filter((v) => v <= left.max);
  for (const v of leftTicks) {
    const y = Math.round(scaleY(left)(v)) + 0.5;
    ctx.strokeStyle = GRID;
    line(ctx, x0, y, x1, y);
    ctx.fillStyle = left.colour ?? AXIS;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    ctx.fillText(shortNumber(v), x0 - 5, y);
    labels.left.push(shortNumber(v));
  }
  if (right) {
    for (const v of niceTicks(0, right.max, 4).filter((t) => t <= right.max)) {
      const y = Math.round(scaleY(right)(v)) + 0.5;
      ctx.fillStyle = right.colour ?? AXIS;
      ctx.textAlign = "left";
      ctx.textBaseline = "middle";
      ctx.fillText(shortNumber(v), x1 + 5, y);
      labels.right.push(shortNumber(v));
    }
  }
  for (const v of niceTicks(x.min, x.max, 8)) {
    if (v < x.min || v > x.max) continue;
    const px = Math.round(sx(v)) + 0.5;
    ctx.strokeStyle = AXIS;
    line(ctx, px, y0, px, y0 + 4);
    ctx.fillStyle = AXIS;
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    ctx.fillText(shortNumber(v), px, y0 + 6);
    labels.x.push(shortNumber(v));
  }
  ctx.strokeStyle = AXIS;
  line(ctx, x0 + 0.5, y1, x0 + 0.5, y0 + 0.5);
  line(ctx, x0, y0 + 0.5, x1, y0 + 0.5);
  if (right) line(ctx, x1 + 0.5, y1, x1 + 0.5, y0 + 0.5);

  // Axis titles: x under its labels at the right, y titles above their scales.
  ctx.textBaseline = "alphabetic";
  ctx.fillStyle = AXIS;
  ctx.textAlign = "right";
  ctx.fillText(x.title, x1, h - 3);
  ctx.fillStyle = left.colour ?? AXIS;
  ctx.textAlign = "left";
  ctx.fillText(left.title, 4, y1 - 10);
  if (right) {
    ctx.fillStyle = right.colour ?? AXIS;
    ctx.textAlign = "right";
    ctx.fillText(right.title, w - 4, y1 - 10);
  }
  ctx.textAlign = "left";
  return { x: sx, left: scaleY(left), right: right ? scaleY(right) : null, labels, titles: [x.title, left.title, right?.title].filter(Boolean) };
}

// A polyline through points mapped by fx, fy.
export function drawLine(ctx, points, fx, fy, colour) {
  ctx.strokeStyle = colour;
  ctx.lineWidth = 2;
  ctx.beginPath();
  points.forEach((p, i) => (i ? ctx.lineTo(fx(p), fy(p)) : ctx.moveTo(fx(p), fy(p))));
  ctx.stroke();
}

// A note in an empty plot.
export function drawWaiting(ctx, canvas, text) {
  ctx.fillStyle = "#0b0d11";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  ctx.font = FONT;
  ctx.fillStyle = AXIS;
  ctx.textAlign = "left";
  ctx.textBaseline = "alphabetic";
  ctx.fillText(text, 50, canvas.height / 2);
}

function line(ctx, ax, ay, bx, by) {
  ctx.beginPath();
  ctx.moveTo(ax, ay);
  ctx.lineTo(bx, by);
  ctx.stroke();
}
