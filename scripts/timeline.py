#!/usr/bin/env python3
"""Per-second table (Markdown) and SVG plot of a `latsdb bench flex --timeline` CSV.

  timeline.py CSV PHASE SVG TITLE [SECOND=LABEL ...]

Each SECOND=LABEL marks an event: a table note and a dashed line in the plot.
"""
import csv
import sys

path, phase, svg, title = sys.argv[1:5]
events = {}
for arg in sys.argv[5:]:
    second, label = arg.split("=", 1)
    events[int(second)] = label
rows = [r for r in csv.DictReader(open(path)) if r["phase"] == phase]
ok = [int(r["ok_ops"]) for r in rows]
bad = [int(r["failed_ops"]) for r in rows]
print("\n| second | ok ops/s | failed ops/s | |")
print("|---|---|---|---|")
for i, (o, b) in enumerate(zip(ok, bad)):
    print(f"| {i} | {o:,} | {b:,} | {events.get(i, '')} |")
w, h, pad = 760, 300, 50
top = max(ok + [1])
x = lambda i: pad + i * (w - 2 * pad) / max(len(ok) - 1, 1)
y = lambda v: h - pad - v * (h - 2 * pad) / top
line = lambda vals: " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(vals))
parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
         f'<rect width="{w}" height="{h}" fill="white"/>',
         f'<text x="{pad}" y="20">{title}</text>',
         f'<line x1="{pad}" y1="{h-pad}" x2="{w-pad}" y2="{h-pad}" stroke="black"/>',
         f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h-pad}" stroke="black"/>',
         f'<text x="{w/2}" y="{h-15}">second</text>', f'<text x="5" y="{pad}">{top:,}</text>', f'<text x="35" y="{h-pad}">0</text>']
for i, (t, label) in enumerate(sorted(events.items())):
    parts.append(f'<line x1="{x(t):.1f}" y1="{pad}" x2="{x(t):.1f}" y2="{h-pad}" stroke="gray" stroke-dasharray="4"/>')
    parts.append(f'<text x="{x(t)+3:.1f}" y="{pad + 12 + 14 * i}" fill="gray">{label}</text>')
parts += [f'<polyline fill="none" stroke="steelblue" stroke-width="2" points="{line(ok)}"/>',
          f'<polyline fill="none" stroke="crimson" stroke-width="2" points="{line(bad)}"/>',
          f'<text x="{w-pad-100}" y="{h-pad-30}" fill="steelblue">ok ops/s</text>',
          f'<text x="{w-pad-100}" y="{h-pad-15}" fill="crimson">failed ops/s</text>', '</svg>']
open(svg, "w").write("\n".join(parts))
print(f"\nplot: {svg}; per-second data: {path}")
