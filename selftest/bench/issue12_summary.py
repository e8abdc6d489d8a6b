#!/usr/bin/env python3
"""Summarises the runs of issue12_device.sh: wall times and per-check durations of the default
runs, each check's status and summary, matmul and all-reduce figures, and gpu-selftest's NCCL
figures over nccl-tests' (out-of-place busbw) per size and round.

Usage: python3 issue12_summary.py WORK_FOLDER   (the folder issue12_device.sh wrote)
"""
import json
import os
import statistics
import sys

work = sys.argv[1]
runs = os.path.join(work, "runs")


def load(name):
    path = os.path.join(runs, name + ".json")
    status_path = os.path.join(runs, name + ".status")
    if not os.path.exists(path):
        return None, None, None
    code, wall = open(status_path).read().split()
    try:
        report = json.load(open(path))
    except json.JSONDecodeError:
        report = None
    return report, int(code), float(wall)


def checks(report):
    return {check["name"]: check for check in (report or {}).get("checks", [])}


names = sorted(name[:-5] for name in os.listdir(runs) if name.endswith(".json"))

print("== runs: exit code, wall time, the report's duration and each check's")
for name in names:
    report, code, wall = load(name)
    if report is None:
        print(f"{name:18} exit {code}, {wall:.1f} s: no JSON report")
        continue
    durations = ", ".join(
        f"{check['name']} {check['duration_seconds']:.1f}" for check in report["checks"]
    )
    print(
        f"{name:18} exit {code}, {wall:5.1f} s wall, report {report['duration_seconds']:.1f} s, "
        f"loader {report.get('loader_seconds', 0):.2f} s, setup {report['setup_seconds']:.1f} s: {durations}"
    )
    found = checks(report).get("framework", {}).get("found", {})
    if found:
        phases = [
            f"{label} {found[key]:.1f} s"
            for key, label in (
                ("probe_seconds", "probe in all"),
                ("import_seconds", "import torch"),
                ("versions_seconds", "versions"),
                ("device_query_seconds", "devices"),
                ("cuda_init_seconds", "CUDA start"),
                ("triton_seconds", "Triton kernel"),
                ("compile_seconds", "torch.compile"),
            )
            if isinstance(found.get(key), (int, float))
        ]
        print(f"{'':18} framework probe ({found.get('probe')}): " + ", ".join(phases))
    communicator = checks(report).get("nccl", {}).get("communicator_seconds")
    if communicator is not None:
        print(f"{'':18} NCCL communicators created in {communicator:.2f} s (beside the matmul check)")
    if report.get("error"):
        print(f"{'':18} error: {report['error']}")

print()
print("== statuses and summaries")
for name in names:
    report, code, _ = load(name)
    for check in checks(report).values():
        if check["name"] == "inventory" and check["status"] == "pass":
            continue
        print(f"{name:18} [{check['status'].upper():4}] {check['name']}: {check['summary']}")

print()
print("== rules as printed (first healthy run)")
report, _, _ = load("A-fresh")
for check in checks(report).values():
    print(f"{check['name']}: {check['rule']}")
nccl = checks(report).get("nccl", {})
if nccl.get("path"):
    print(f"nccl path: {json.dumps(nccl['path'])}")
inventory = checks(report).get("inventory", {})
for gpu in inventory.get("gpus", []):
    print(
        f"GPU {gpu['index']}: {gpu['name']}, PCIe Gen{gpu['pcie_max_generation']} x{gpu['pcie_max_width']}, "
        f"{gpu['nvlink_active_links']} NVLinks, peers {gpu['nvlink_peers']}"
    )

print()
print("== matmul TFLOP/s back to back (share of the dense peak) and verdicts, per run and GPU")
for name in names:
    report, _, _ = load(name)
    judgements = checks(report).get("matmul", {}).get("judgements", [])
    if not judgements:
        continue
    parts = []
    for judgement in judgements:
        share = judgement.get("share_of_peak")
        share_text = f" ({share * 100:.0f}%)" if share else ""
        verdict = judgement["peak_verdict"]
        base = judgement.get("baseline_verdict")
        parts.append(
            f"GPU{judgement['gpu']} {judgement['precision']} {judgement['tflops']:.0f}{share_text} {verdict}"
            + (f"/baseline {base}" if base else "")
        )
    print(f"{name:18} " + "; ".join(parts))

print()
print("== matmul TFLOP/s: median of single products / back to back, per run and GPU")
for name in names:
    report, _, _ = load(name)
    results = checks(report).get("matmul", {}).get("results", [])
    if results:
        print(f"{name:18} " + "; ".join(
            f"GPU{r['gpu']} {r['precision']} {r['tflops']:.0f}/{r.get('back_to_back_tflops', float('nan')):.0f}"
            for r in results
        ))

print()
print("== all-reduce bus bandwidth GB/s: per call / back to back, per run and size")
for name in names:
    report, _, _ = load(name)
    points = checks(report).get("nccl", {}).get("points", [])
    if not points:
        continue
    parts = [
        f"{point['size_bytes'] >> 20} MiB {point['bus_bytes_per_second'] / 1e9:.1f} / {point['back_to_back_bus_bytes_per_second'] / 1e9:.1f}"
        + (f" ({point['seconds']:.2f} s)" if "seconds" in point else "")
        for point in points
    ]
    print(f"{name:18} " + "; ".join(parts))


def nccl_tests(path):
    """Out-of-place busbw (GB/s) by size from all_reduce_perf's table."""
    figures = {}
    for line in open(path):
        fields = line.split()
        if len(fields) >= 9 and fields[0].isdigit():
            figures[int(fields[0])] = float(fields[7])
    return figures


print()
print("== gpu-selftest back-to-back busbw over nccl-tests out-of-place busbw (target >= 0.95)")
ratios = {}
for round_number in (1, 2, 3):
    report, _, _ = load(f"N-selftest-{round_number}")
    reference_path = os.path.join(runs, f"N-nccl-tests-{round_number}.txt")
    if report is None or not os.path.exists(reference_path):
        continue
    reference = nccl_tests(reference_path)
    for point in checks(report).get("nccl", {}).get("points", []):
        size = point["size_bytes"]
        if size not in reference:
            continue
        ours = point["back_to_back_bus_bytes_per_second"] / 1e9
        per_call = point["bus_bytes_per_second"] / 1e9
        ratio = ours / reference[size]
        ratios.setdefault(size, []).append(ratio)
        print(
            f"round {round_number} {size >> 20:4} MiB: gpu-selftest {ours:6.1f} (per call {per_call:6.1f}), "
            f"nccl-tests {reference[size]:6.1f} GB/s -> {ratio:.3f} (per call {per_call / reference[size]:.3f})"
        )
for size, values in sorted(ratios.items()):
    print(
        f"{size >> 20:4} MiB: median ratio {statistics.median(values):.3f}, lowest {min(values):.3f}, "
        f"{'met' if min(values) >= 0.95 else 'MISSED'} (>= 0.95 in every round)"
    )

baseline_path = os.path.join(work, "baseline.json")
if os.path.exists(baseline_path):
    baseline = json.load(open(baseline_path))
    print()
    print(f"== baseline: {len(baseline['figures'])} figures from {baseline['gpus']}")
