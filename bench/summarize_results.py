#!/usr/bin/env python3
"""Prints one markdown row per run_bench.py --all-formats result file (bench/README.md §6).

Usage: python3 bench/summarize_results.py bench/results-real-*.json

Columns: the input, its size, the load average over the rounds, the median pickle.load wall time
and the wall-time ratios pickle.load / memsnap for the read, the JSON, text and HTML reports; then
the same JSON ratio by CPU time (pickle.load's process time against every thread of memsnap's
child), the largest analysis stage's share of the JSON report, peak RSS / file size of the
JSON report with every event kept and with the default --max-trace-events, and memsnap's read
time over the runner's plain read() of the file (read / scan; "-" in files from before stop 33),
how much of the file the page cache held in huge folios at the rounds' starts ("-" in files
from before stop 36; bench/README §21), and the runner's CPU probe at the rounds' starts and ends,
fastest-slowest in ms (how fast the machine was; "-" in files from before stop 45, §30).
"""
import json
import os
import sys


def huge_folios(rounds):
    shares = [x["page_cache_huge_fraction"] for x in rounds if x.get("page_cache_huge_fraction") is not None]
    return f"{min(shares):.0%}-{max(shares):.0%}" if shares else "-"


def probes(rounds):
    ms = [1e3 * x[k] for x in rounds for k in ("probe_start_s", "probe_end_s") if x.get(k) is not None]
    return f"{min(ms):.0f}-{max(ms):.0f}" if ms else "-"


def row(path):
    r = json.load(open(path))
    size = r["file_size_bytes"]
    loads = [x.get("load_average_1min", float("nan")) for x in r["rounds"]]
    ratio = r.get("ratio_python_load_over", {})
    cpu = r.get("ratio_python_cpu_over", {})
    share = {k: v for k, v in r.get("report_stage_share", {}).items() if k not in ("read", "analyze")}
    top = max(share.items(), key=lambda kv: kv[1]) if share else ("-", float("nan"))
    rss = r["peak_rss_kib"]
    name = os.path.basename(r["snapshot"]).rsplit(".", 1)[0]
    cells = [
        name, f"{size / 1e6:,.0f} MB", f"{min(loads):.1f}-{max(loads):.1f}",
        f"{r['median_python_load_s']:.1f} s",
        f"{r['ratio_python_load_over_read']:.1f}x", f"{r['ratio_python_load_over_report']:.1f}x",
        f"{ratio.get('report_text', float('nan')):.1f}x", f"{ratio.get('report_html', float('nan')):.1f}x",
        f"{cpu.get('report', float('nan')):.1f}x",
        f"{top[0]} {top[1]:.0%}",
        f"{rss['report'] * 1024 / size:.2f} / {rss.get('report_capped', float('nan')) * 1024 / size:.2f}",
        f"{r['median_s']['read'] / r['median_scan_s']:.1f}x" if r.get("median_scan_s") else "-",
        huge_folios(r["rounds"]),
        probes(r["rounds"]),
    ]
    return "| " + " | ".join(cells) + " |"


def main():
    print("| input | size | load | pickle.load | / read | / JSON | / text | / HTML | / JSON (CPU) | top stage | RSS all / default (x file) | read / scan | huge folios | probe (ms) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for path in sys.argv[1:]:
        print(row(path))


if __name__ == "__main__":
    main()
