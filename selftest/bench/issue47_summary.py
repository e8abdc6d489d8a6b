"""Prints issue 47's tables from the folder issue47_device.sh filled: each run's wall time and
where the default run spent it, the medians of cold and warm, and each over the floor of the
same round. Usage: python3 issue47_summary.py WORK_FOLDER"""
import json
import os
import re
import statistics
import sys

work = sys.argv[1]
runs = os.path.join(work, "runs")


def status(name):
    path = os.path.join(runs, name + ".status")
    if not os.path.exists(path):
        return None, None
    code, seconds = open(path).read().split()
    return int(code), float(seconds)


def report(name):
    path = os.path.join(runs, name + ".json")
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None


def check(data, name):
    for entry in (data or {}).get("checks", []):
        if entry["name"] == name:
            return entry
    return {}


def describe(name):
    code, wall = status(name)
    data = report(name)
    if data is None:
        return f"| {name} | {wall} | exit {code} | | | | |"
    durations = " + ".join(
        f"{entry['name']} {entry['duration_seconds']:.2f}"
        for entry in data["checks"]
        if entry["name"] in ("bandwidth", "overlap", "matmul", "nccl", "health")
    )
    found = check(data, "framework").get("found", {})
    probe = ", ".join(
        f"{key.replace('_seconds', '')} {found[key]:.2f}"
        for key in ("probe_seconds", "import_seconds", "versions_seconds", "device_query_seconds",
                    "cuda_init_seconds", "kernel_wait_seconds", "triton_seconds", "kernel_compiler_seconds",
                    "cuda_early_seconds", "gpus_open_at_seconds")
        if isinstance(found.get(key), (int, float))
    )
    statuses = " ".join(f"{entry['name']}:{entry['status']}" for entry in data["checks"])
    return (f"| {name} | {wall:.2f} | {data['overall']} (exit {code}) | loader {data.get('loader_seconds', 0):.2f}, "
            f"setup {data.get('setup_seconds', 0):.2f} | {durations} | {probe} | {found.get('kernel_path', '')} | {statuses} |")


names = sorted(name[:-len(".status")] for name in os.listdir(runs) if name.endswith(".status"))
print("## Every run (wall = the shell's clock, seconds)")
print("| run | wall | outcome | loader, setup | GPU checks | framework probe phases | kernel | statuses |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for name in names:
    if "floor" in name:
        code, wall = status(name)
        print(f"| {name} | {wall:.2f} | exit {code} | | | | | |")
    else:
        print(describe(name))

print()
print("## Medians and ratios over the floor of the same round")
rounds = sorted({int(m.group(1)) for m in (re.match(r"R(\d+)-", n) for n in names) if m})
for program in ("new", "pip", "main"):
    for state in ("cold", "warm"):
        ratios, walls, floors = [], [], []
        for r in rounds:
            _, floor = status(f"R{r}-floor-{state}")
            code, wall = status(f"R{r}-{program}-{state}")
            if floor is None or wall is None:
                continue
            walls.append(wall)
            floors.append(floor)
            ratios.append(wall / floor)
        if not ratios:
            continue
        print(f"- {program} {state}: runs {', '.join(f'{w:.2f}' for w in walls)} s; floors "
              f"{', '.join(f'{f:.2f}' for f in floors)} s; ratios {', '.join(f'{x:.2f}' for x in ratios)}; "
              f"median {statistics.median(walls):.2f} s / {statistics.median(floors):.2f} s = "
              f"{statistics.median(ratios):.2f}x (median of the ratios)")

print()
print("## Health counters of the first run (F-new)")
for counter in check(report("F-new"), "health").get("judgements", []):
    print(f"GPU {counter['gpu']} {counter['counter']:<44} {counter['verdict']:<12} {counter['value']!s:<10} {counter['note']}")
print(check(report("F-new"), "health").get("summary", "no health check"))

print()
print("## import torch, the slowest modules by cumulative time (python3 -X importtime, warm)")
rows = []
for line in open(os.path.join(work, "importtime.txt"), errors="replace"):
    m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(.*)", line)
    if m:
        rows.append((int(m.group(2)), int(m.group(1)), m.group(3)))
for cumulative, own, module in sorted(rows, reverse=True)[:25]:
    print(f"{cumulative / 1e6:6.3f} s cumulative {own / 1e6:6.3f} s own {module}")
