#!/usr/bin/env python3
"""Runs gpu-selftest and a PyTorch reference of the same measurements in one invocation, and
prints the ratios (gpu-selftest / PyTorch).

Same sizes and the same timing method on both sides: CUDA events around each repetition, the
median after warm-up; for NCCL, torch.distributed with one process per GPU, each iteration's
time the slowest rank's. Usage (on the GPU machine):

    NCCL_NVLS_ENABLE=0 python3 bench/gpu/compare.py --binary .gpubin/gpu-selftest-cu13 [--out DIR]

Targets (issue 3, 2xH200): pinned H2D/D2H >= 0.97x PyTorch, bf16 and fp16 matmul >= 0.97x,
NCCL all-reduce bus bandwidth at >= 512 MiB >= 0.97x torch.distributed.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

TARGET = 0.97


def run_selftest(binary, arguments, environment=None):
    started = time.time()
    process = subprocess.run([binary, *arguments], capture_output=True, text=True, env=environment)
    elapsed = time.time() - started
    return process, elapsed


def check_named(report, name):
    return next((check for check in report["checks"] if check["name"] == name), None)


def torch_bandwidth(torch, gpu, sizes, warm_up, repetitions):
    results = []
    device = torch.device("cuda", gpu)
    largest = max(sizes)
    device_buffer = torch.empty(largest, dtype=torch.uint8, device=device)
    pinned = torch.full((largest,), 0x5A, dtype=torch.uint8).pin_memory()
    pageable = torch.full((largest,), 0x5A, dtype=torch.uint8)
    stream = torch.cuda.Stream(device=device)
    for size in sizes:
        for memory, host in (("pinned", pinned), ("pageable", pageable)):
            for direction in ("h2d", "d2h"):
                source, target = (host[:size], device_buffer[:size]) if direction == "h2d" else (device_buffer[:size], host[:size])
                with torch.cuda.stream(stream):
                    for _ in range(warm_up):
                        target.copy_(source, non_blocking=True)
                    stream.synchronize()
                    times = []
                    for _ in range(repetitions):
                        start = torch.cuda.Event(enable_timing=True)
                        end = torch.cuda.Event(enable_timing=True)
                        start.record(stream)
                        target.copy_(source, non_blocking=True)
                        end.record(stream)
                        end.synchronize()
                        times.append(start.elapsed_time(end))
                median = statistics.median(times)
                results.append({"gpu": gpu, "memory": memory, "direction": direction, "size_bytes": size,
                                "median_ms": median, "bytes_per_second": size / (median / 1000)})
    return results


def random_nonzero(torch, size, device):
    """The distribution gpu-selftest draws: magnitude in [0.125, 1), random sign (power draw,
    and so clocks, depend on the data: zeros or all-positive inputs run faster)."""
    magnitude = torch.rand(size, size, device=device) * 0.875 + 0.125
    sign = torch.randint(0, 2, (size, size), device=device, dtype=torch.float32) * 2 - 1
    return magnitude * sign


def torch_matmul(torch, gpu, size, precisions, warm_up, repetitions):
    results = []
    device = torch.device("cuda", gpu)
    for precision in precisions:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}[precision]
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        a = random_nonzero(torch, size, device).to(dtype)
        b = random_nonzero(torch, size, device).to(dtype)
        stream = torch.cuda.Stream(device=device)
        with torch.cuda.stream(stream):
            for _ in range(warm_up):
                torch.matmul(a, b)
            stream.synchronize()
            times = []
            for _ in range(repetitions):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record(stream)
                torch.matmul(a, b)
                end.record(stream)
                end.synchronize()
                times.append(start.elapsed_time(end))
        median = statistics.median(times)
        results.append({"gpu": gpu, "precision": precision, "median_ms": median,
                        "tflops": 2 * size ** 3 / (median / 1000) / 1e12})
    torch.backends.cuda.matmul.allow_tf32 = False
    return results


def nccl_worker(rank, world, sizes, warm_up, repetitions, port, queue):
    import torch
    import torch.distributed as distributed
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    distributed.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    stream = torch.cuda.current_stream()
    per_size = {}
    for size in sizes:
        elements = size // 4
        tensor = (torch.arange(elements, device="cuda", dtype=torch.int64) + 31 * rank) % 251 + 1
        tensor = tensor.to(torch.float32)
        for _ in range(warm_up):
            distributed.all_reduce(tensor)
        torch.cuda.synchronize()
        times = []
        for _ in range(repetitions):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(stream)
            distributed.all_reduce(tensor)
            end.record(stream)
            end.synchronize()
            times.append(start.elapsed_time(end))
        gathered = [None] * world
        distributed.all_gather_object(gathered, times)
        if rank == 0:
            slowest = [max(values) for values in zip(*gathered)]
            per_size[size] = statistics.median(slowest)
        del tensor
    if rank == 0:
        queue.put(per_size)
    distributed.barrier()
    distributed.destroy_process_group()


def torch_nccl(sizes, world, warm_up, repetitions):
    import torch.multiprocessing as multiprocessing
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    port = 29500 + os.getpid() % 1000
    processes = [context.Process(target=nccl_worker, args=(rank, world, sizes, warm_up, repetitions, port, queue))
                 for rank in range(world)]
    for process in processes:
        process.start()
    per_size = queue.get(timeout=300)
    for process in processes:
        process.join(timeout=60)
    results = []
    for size in sizes:
        median = per_size[size]
        algorithm = size / (median / 1000)
        results.append({"size_bytes": size, "median_ms": median, "algorithm_bytes_per_second": algorithm,
                        "bus_bytes_per_second": algorithm * 2 * (world - 1) / world})
    return results


def bandwidth_rounds(torch, arguments, rounds=3):
    """Copies only: gpu-selftest and PyTorch alternated, the median of the rounds per case."""
    mine, theirs = {}, {}
    for _ in range(rounds):
        process, _ = run_selftest(arguments.binary, ["--format", "json", "--checks", "bandwidth"])
        points = check_named(json.loads(process.stdout), "bandwidth")["points"]
        for point in points:
            mine.setdefault((point["gpu"], point["direction"], point["memory"], point["size_bytes"]), []).append(point["bytes_per_second"])
        gpus = sorted({point["gpu"] for point in points})
        sizes = sorted({point["size_bytes"] for point in points})
        for gpu in gpus:
            for point in torch_bandwidth(torch, gpu, sizes, 1, 5):
                theirs.setdefault((point["gpu"], point["direction"], point["memory"], point["size_bytes"]), []).append(point["bytes_per_second"])
    print(f"{'case':<34} {'selftest':>9} {'torch':>9} {'ratio':>6}   ({rounds} rounds, median)")
    summary = {}
    for key in sorted(mine):
        gpu, direction, memory, size = key
        ours, reference = statistics.median(mine[key]), statistics.median(theirs[key])
        summary[f"GPU{gpu} {direction} {memory} {size >> 20} MiB"] = {"selftest": ours, "torch": reference}
        print(f"GPU{gpu} {direction} {memory:<8} {size >> 20:>5} MiB {ours / 1e9:>14.1f} {reference / 1e9:>9.1f} {ours / reference:>6.3f}")
    with open(os.path.join(arguments.out, "bandwidth_rounds.json"), "w") as handle:
        json.dump(summary, handle, indent=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=".gpubin/gpu-selftest-cu13")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--bandwidth-only", action="store_true",
                        help="only the host-device copies, gpu-selftest and PyTorch alternated over 3 rounds")
    arguments = parser.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    import torch
    if arguments.bandwidth_only:
        bandwidth_rounds(torch, arguments)
        return

    # 1. The default run, timed as a user would run it (framework check included), twice: the
    #    first with a cold torch.compile cache (a fresh container), the second warm.
    default_seconds = []
    for attempt in range(2):
        default_process, seconds = run_selftest(arguments.binary, ["--format", "json"])
        default_seconds.append(seconds)
        with open(os.path.join(arguments.out, f"selftest-default-{attempt}.json"), "w") as handle:
            handle.write(default_process.stdout)
        print(f"default run {attempt}: exit {default_process.returncode}, {seconds:.1f} s wall (target < 20 s)")
        if default_process.returncode not in (0, 1):
            print(default_process.stdout[-3000:], default_process.stderr[-3000:])
            sys.exit(1)
        default_report = json.loads(default_process.stdout)
        print(f"  setup {default_report.get('setup_seconds', 0):.1f} s; " + ", ".join(
            f"{check['name']} {check.get('duration_seconds', 0):.1f} s" for check in default_report["checks"]))
    # 2. The measured run, with the framework probe off so nothing else uses GPU 0.
    process, seconds = run_selftest(arguments.binary, ["--format", "json", "--no-framework", "--plot",
                                                      os.path.join(arguments.out, "bandwidth.svg")])
    report = json.loads(process.stdout)
    with open(os.path.join(arguments.out, "selftest.json"), "w") as handle:
        json.dump(report, handle, indent=1)
    print(f"measured run: exit {process.returncode}, {seconds:.1f} s wall, overall {report['overall']}")
    for check in report["checks"]:
        print(f"  [{check['status']}] {check['name']}: {check['summary']}")

    bandwidth = check_named(report, "bandwidth")["points"]
    gpus = sorted({point["gpu"] for point in bandwidth})
    sizes = sorted({point["size_bytes"] for point in bandwidth})
    reference = {"bandwidth": [], "matmul": [], "nccl": []}
    for gpu in gpus:
        reference["bandwidth"] += torch_bandwidth(torch, gpu, sizes, 1, 5)

    # 3. Matmul, interleaved: gpu-selftest then PyTorch, three rounds; the median round counts
    #    (the spread between runs and GPUs is several percent, see gpu-anchors.md).
    matmul_rounds = {"selftest": {}, "torch": {}}
    matmul_size = None
    for _ in range(3):
        round_process, _ = run_selftest(arguments.binary, ["--format", "json", "--checks", "matmul"])
        results = check_named(json.loads(round_process.stdout), "matmul")["results"]
        matmul_size = results[0]["size"]
        precisions = list(dict.fromkeys(entry["precision"] for entry in results))
        for entry in results:
            matmul_rounds["selftest"].setdefault((entry["gpu"], entry["precision"]), []).append(entry["tflops"])
        for gpu in gpus:
            for entry in torch_matmul(torch, gpu, matmul_size, precisions, 3, 20):
                matmul_rounds["torch"].setdefault((gpu, entry["precision"]), []).append(entry["tflops"])
    reference["matmul_rounds"] = {f"{side} GPU{key[0]} {key[1]}": values
                                  for side, table in matmul_rounds.items() for key, values in table.items()}

    # 4. NCCL over a wider sweep, both sides the same sizes.
    nccl = []
    if len(gpus) >= 2:
        nccl_process, _ = run_selftest(arguments.binary, ["--format", "json", "--checks", "nccl",
                                                          "--nccl-sizes", "8M,64M,512M,1G,2G"])
        nccl = check_named(json.loads(nccl_process.stdout), "nccl")["points"]
        torch.cuda.empty_cache()
        reference["nccl"] = torch_nccl([point["size_bytes"] for point in nccl], nccl[0]["ranks"], 5, 20)

    rows = []
    verdicts = []

    def ratio_row(kind, label, mine, theirs, targeted):
        ratio = mine / theirs if theirs else float("nan")
        rows.append((kind, label, mine, theirs, ratio, targeted))
        if targeted:
            verdicts.append(ratio >= TARGET)

    for point in bandwidth:
        match = next(r for r in reference["bandwidth"] if all(r[k] == point[k] for k in ("gpu", "memory", "direction", "size_bytes")))
        label = f"GPU{point['gpu']} {point['direction']} {point['memory']} {point['size_bytes'] >> 20} MiB"
        targeted = point["memory"] == "pinned" and point["size_bytes"] >= 256 << 20
        ratio_row("copy GB/s", label, point["bytes_per_second"] / 1e9, match["bytes_per_second"] / 1e9, targeted)
    for (gpu, precision), values in sorted(matmul_rounds["selftest"].items()):
        theirs = statistics.median(matmul_rounds["torch"][(gpu, precision)])
        ratio_row("matmul TFLOP/s", f"GPU{gpu} {precision} {matmul_size}^3 (3 rounds)", statistics.median(values),
                  theirs, precision in ("bf16", "fp16"))
    for point in nccl:
        match = next(r for r in reference["nccl"] if r["size_bytes"] == point["size_bytes"])
        ratio_row("all-reduce busbw GB/s", f"{point['size_bytes'] >> 20} MiB", point["bus_bytes_per_second"] / 1e9,
                  match["bus_bytes_per_second"] / 1e9, point["size_bytes"] >= 512 << 20)

    with open(os.path.join(arguments.out, "compare.json"), "w") as handle:
        json.dump({"default_run_seconds": default_seconds, "reference": reference,
                   "rows": [dict(zip(("kind", "label", "selftest", "torch", "ratio", "targeted"), row)) for row in rows]},
                  handle, indent=1)
    print()
    print(f"{'measure':<22} {'case':<32} {'selftest':>9} {'torch':>9} {'ratio':>6}  target")
    for kind, label, mine, theirs, ratio, targeted in rows:
        mark = ("ok" if ratio >= TARGET else "MISSED") if targeted else ""
        print(f"{kind:<22} {label:<32} {mine:>9.1f} {theirs:>9.1f} {ratio:>6.3f}  {mark}")
    print()
    print(f"default run {default_seconds[0]:.1f} s cold, {default_seconds[1]:.1f} s warm "
          f"({'ok' if max(default_seconds) < 20 else 'MISSED'} < 20 s); "
          f"targeted ratios met: {sum(verdicts)}/{len(verdicts)}")


if __name__ == "__main__":
    main()
