# The framework probe of gpu-selftest (embedded in the binary; framework.rs runs it from a file,
# since Triton reads a kernel's source from its file). It prints one line,
# `GPU_SELFTEST_JSON {...}`, whatever happens inside: a failing step records its error instead of
# raising, so the Rust side never parses a traceback.
#
# Usage: python3 probe.py MODE [ROLE]; MODE is "triton" (a Triton kernel, the compiler that
# torch.compile generates GPU code with) or "compile" (a torch.compile function).
#
# What is on the critical path is what torch itself needs: the interpreter, `import torch`, a
# CUDA context, one kernel. The rest runs beside `import torch`:
# - gpu-selftest writes one line on standard input once it has opened the GPUs: GPU 0's compute
#   capability ("9.0"), or "none"; closing standard input says the same without one. Then a
#   thread makes GPU 0's CUDA primary context through the driver API (ctypes releases the
#   interpreter lock), so torch finds it made. Not before, so that the two processes do not
#   start the driver and make contexts at the same moment;
# - in the triton mode, a second interpreter (ROLE "kernel-compiler", without torch) imports
#   Triton, learns the compute capability from this process, and compiles the Triton kernel, its
#   C launcher and Triton's driver helpers into TRITON_CACHE_DIR, and prints where the kernel's
#   files are; this process then loads and runs that kernel. Should that fail, the kernel is
#   compiled here by Triton's JIT, as before, and the reason is reported.
import json, os, sys, time

started_at = time.time()
MODE = sys.argv[1] if len(sys.argv) > 1 else "triton"
ROLE = sys.argv[2] if len(sys.argv) > 2 else "probe"

# The probe kernel's signature and constants, as triton.compile takes them.
KERNEL_SIGNATURE = {"x_pointer": "*fp32", "y_pointer": "*fp32", "count": "i32", "BLOCK": "constexpr"}
BLOCK = 1024


def error_text(error, limit=600):
    return repr(error)[:limit]


def import_triton():
    global triton, tl
    import triton
    import triton.language as tl
    return triton


def make_kernel():
    import_triton()

    @triton.jit
    def probe_kernel(x_pointer, y_pointer, count, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < count
        value = tl.load(x_pointer + offsets, mask=mask)
        tl.store(y_pointer + offsets, tl.sin(value) * 2.0 + tl.cos(value) * value, mask=mask)

    return probe_kernel


def kernel_source(kernel):
    from triton.compiler import ASTSource
    return ASTSource(kernel, KERNEL_SIGNATURE, constexprs={"BLOCK": BLOCK})


def cuda_driver():
    import ctypes
    return ctypes, ctypes.CDLL("libcuda.so.1")


def capability_number(text):
    """ "9.0" -> 90, as Triton numbers compute capabilities; None for anything else."""
    parts = text.strip().split(".")
    if len(parts) == 2 and all(part.isdigit() for part in parts):
        return int(parts[0]) * 10 + int(parts[1])
    return None


def compute_capability():
    """GPU 0's compute capability as Triton numbers it (90 for 9.0), through the driver API."""
    ctypes, cuda = cuda_driver()
    device, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    for step, status in (("cuInit", lambda: cuda.cuInit(0)),
                         ("cuDeviceGet", lambda: cuda.cuDeviceGet(ctypes.byref(device), 0)),
                         ("major", lambda: cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device)),
                         ("minor", lambda: cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device))):
        code = status()
        if code != 0:
            raise RuntimeError("%s returned CUDA error %d" % (step, code))
    return major.value * 10 + minor.value


def run_kernel_compiler():
    """ROLE kernel-compiler: compile the kernel and Triton's C helpers, print where they are."""
    # Die with the probe: a probe killed at its timeout must not leave this one running.
    try:
        import ctypes, signal
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != int(os.environ.get("GPU_SELFTEST_PROBE_PARENT", os.getppid())):
            os._exit(0)
    except Exception:
        pass
    result = {}
    started = time.time()
    try:
        import_triton()
        result["triton"] = triton.__version__
        result["import_seconds"] = time.time() - started
        # From the probe once gpu-selftest has opened the GPUs; asked of the driver otherwise.
        capability = capability_number(sys.stdin.readline())
        result["capability_from"] = "gpu-selftest" if capability else "cuInit"
        result["capability_wait_seconds"] = time.time() - started - result["import_seconds"]
        if capability is None:
            capability = compute_capability()
        result["capability"] = capability
        if os.environ.get("GPU_SELFTEST_PRIVATE_TRITON_CACHE") == "1":
            # The cache is this run's own and empty: its keys need not name this Triton build,
            # so skip hashing the whole of libtriton (hundreds of MB read from disk and hashed
            # beside torch's import). Where Triton lays this out differently, nothing changes.
            import triton.runtime.cache as cache_module
            if hasattr(cache_module, "triton_key"):
                cache_module.triton_key = lambda: "gpu-selftest-private-cache"
        from triton.backends.compiler import GPUTarget
        kernel = make_kernel()
        source = kernel_source(kernel)
        compile_started = time.time()
        compiled = triton.compile(source, target=GPUTarget("cuda", capability, 32))
        result["compile_seconds"] = time.time() - compile_started
        helpers_started = time.time()
        # The C launcher of this kernel and Triton's driver helpers, built with the host C
        # compiler into the same cache, where the probe's Triton finds them.
        from triton.backends.nvidia.driver import CudaLauncher, CudaUtils
        CudaUtils()
        CudaLauncher(source, compiled.metadata)
        result["helpers_seconds"] = time.time() - helpers_started
        result["metadata_group"] = compiled.metadata_group
        result["hash"] = compiled.hash
    except Exception as error:
        result["error"] = error_text(error)
    result["seconds"] = time.time() - started
    print("GPU_SELFTEST_KERNEL " + json.dumps(result), flush=True)
    sys.stderr.flush()
    os._exit(0)


def start_kernel_compiler():
    import subprocess
    environment = dict(os.environ, GPU_SELFTEST_PROBE_PARENT=str(os.getpid()))
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), MODE, "kernel-compiler"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=environment)


def finish_kernel_compiler(process):
    """Waits for the kernel compiler; its answer, or {"error": why}."""
    try:
        # Its standard input may be closed already (the capability was handed over); an open
        # one is closed here, so the compiler stops waiting for it.
        pipe, process.stdin = process.stdin, None
        if pipe is not None and not pipe.closed:
            pipe.close()
        output, errors = process.communicate()
    except Exception as error:
        return {"error": "waiting for the kernel compiler: " + error_text(error, 300)}
    for line in reversed(output.decode(errors="replace").splitlines()):
        if line.startswith("GPU_SELFTEST_KERNEL "):
            return json.loads(line[len("GPU_SELFTEST_KERNEL "):])
    tail = " | ".join(errors.decode(errors="replace").strip().splitlines()[-3:])
    return {"error": "the kernel compiler printed no result (exit %s; stderr: %s)" % (process.returncode, tail or "empty")}


def start_cuda_early(compiler):
    """On a thread, while torch imports: waits for gpu-selftest to say it opened the GPUs, hands
    GPU 0's compute capability to the kernel compiler, then makes GPU 0's primary context.
    Returns the thread and what it found."""
    import threading
    found = {}

    def work():
        line = sys.stdin.readline()
        found["gpus_open_at"] = time.time() - started_at
        if compiler is not None and compiler.stdin is not None:
            try:
                compiler.stdin.write(line.strip().encode() + b"\n")
                compiler.stdin.flush()
            except Exception as error:
                found["compiler_error"] = error_text(error, 300)
        started = time.time()
        try:
            ctypes, cuda = cuda_driver()
            device, context = ctypes.c_int(), ctypes.c_void_p()
            code = cuda.cuInit(0)
            if code == 0:
                code = cuda.cuDeviceGet(ctypes.byref(device), 0)
            if code == 0:
                code = cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)
            if code != 0:
                found["error"] = "CUDA error %d" % code
        except Exception as error:
            found["error"] = error_text(error, 300)
        found["seconds"] = time.time() - started

    thread = threading.Thread(target=work, name="cuda-early", daemon=True)
    thread.start()
    return thread, found


def probe():
    out = {"probe": MODE}
    compiler = None
    if MODE == "triton":
        try:
            compiler = start_kernel_compiler()
        except Exception as error:
            out["kernel_compiler_error"] = error_text(error)
    early_thread, early = start_cuda_early(compiler)
    started = time.time()
    try:
        import torch
    except Exception as error:
        print("GPU_SELFTEST_JSON " + json.dumps({"probe": MODE, "torch_import_error": error_text(error, 400)}), flush=True)
        os._exit(0)
    out["import_seconds"] = time.time() - started
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    started = time.time()
    try:
        out["cudnn"] = torch.backends.cudnn.version()
    except Exception as error:
        out["cudnn_error"] = error_text(error, 400)
    try:
        version = torch.cuda.nccl.version()
        if isinstance(version, int):
            version = (version // 10000, version % 10000 // 100, version % 100) if version >= 20900 else (version // 1000, version % 1000 // 100, version % 100)
        out["nccl"] = ".".join(str(part) for part in version[:3])
    except Exception as error:
        out["nccl_error"] = error_text(error, 400)
    out["versions_seconds"] = time.time() - started
    started = time.time()
    out["cuda_available"] = bool(torch.cuda.is_available())
    out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
    out["device_query_seconds"] = time.time() - started

    def function(x):
        return torch.sin(x) * 2.0 + torch.cos(x) * x

    x = None
    if out["cuda_available"]:
        try:
            started = time.time()
            early_thread.join()
            out["cuda_early_seconds"] = early.get("seconds")
            out["gpus_open_at_seconds"] = early.get("gpus_open_at")
            if "error" in early:
                out["cuda_early_error"] = early["error"]
            x = torch.randn(1 << 16, device="cuda")
            torch.cuda.synchronize()
            out["cuda_init_seconds"] = time.time() - started
        except Exception as error:
            out["cuda_error"] = error_text(error)
    if x is not None and MODE == "compile":
        try:
            started = time.time()
            compiled = torch.compile(function)
            y = compiled(x)
            torch.cuda.synchronize()
            out["compile_seconds"] = time.time() - started
            out["compile_max_error"] = float((y - function(x)).abs().max())
            out["compile_ok"] = bool(torch.allclose(y, function(x), rtol=1e-5, atol=1e-5))
        except Exception as error:
            out["compile_error"] = error_text(error)
    if x is not None and MODE == "triton":
        try:
            started = time.time()
            built = finish_kernel_compiler(compiler) if compiler is not None else {}
            out["kernel_wait_seconds"] = time.time() - started
            if "seconds" in built:
                out["kernel_compiler_seconds"] = built["seconds"]
            if "compile_seconds" in built:
                out["kernel_compile_seconds"] = built["compile_seconds"]
            if "error" in built:
                out["kernel_compiler_error"] = built["error"]
            import_triton()
            out["triton"] = triton.__version__
            kernel = make_kernel()
            y = torch.full_like(x, float("nan"))
            grid = (triton.cdiv(x.numel(), BLOCK), 1, 1)
            launched = False
            if "metadata_group" in built:
                try:
                    from triton.compiler import CompiledKernel
                    ready = CompiledKernel(kernel_source(kernel), built["metadata_group"], built["hash"])
                    ready[grid](x, y, x.numel(), BLOCK)
                    launched = True
                    out["kernel_path"] = "compiled beside the torch import"
                except Exception as error:
                    out["kernel_load_error"] = error_text(error, 400)
            if not launched:
                kernel[grid[:1]](x, y, x.numel(), BLOCK=BLOCK)
                out["kernel_path"] = "compiled by Triton's JIT after the torch import"
            torch.cuda.synchronize()
            out["triton_seconds"] = time.time() - started
            expected = function(x)
            out["triton_max_error"] = float((y - expected).abs().max())
            out["triton_ok"] = bool(torch.allclose(y, expected, rtol=1e-4, atol=1e-4))
        except Exception as error:
            out["triton_error"] = error_text(error)
    out["python_seconds"] = time.time() - started_at
    print("GPU_SELFTEST_JSON " + json.dumps(out), flush=True)
    # Everything is said: skip the interpreter's teardown (torch's and CUDA's destructors take
    # most of a second), which would only delay the end of the run.
    sys.stderr.flush()
    os._exit(0)


if ROLE == "kernel-compiler":
    run_kernel_compiler()
else:
    probe()
