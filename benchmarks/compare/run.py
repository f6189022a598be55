#!/usr/bin/python3
"""The side-by-side runner behind scripts/compare-peers.

Every system trains the same model on the same batches (see
compare_common.hpp) in its own process; a round runs each system once, in a
fixed order, and the rounds repeat (A B C A B C ...), so slow drifts of the
machine touch every system alike. Each process warms up, then times a few
windows of steps; its result is the median of its windows, and the table
shows the median over rounds, the ratio to kiln on one core, and the
process's peak resident memory (ru_maxrss from wait4). Every process is
pinned: one-thread systems to one core, two-thread systems to two.

Before the rounds it measures the machine's f32 FMA peak on one pinned core
(fma_peak.cpp) and prints each kiln row's share of it: samples/s times the
model's flops per sample (FLOPS_PER_SAMPLE) over the peak times the row's
threads.

Then it compiles each kiln example once more, alone, with the build's own
command line, and reports the compiler's wall time and peak memory.
"""
import argparse
import glob
import json
import os
import shlex
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"


# Multiply-adds per sample of each model's forward pass, from its layer shapes.
# A training step runs each product three times (forward, input gradient,
# weight gradient) except the first layer's input gradient, which no system
# computes (the data needs none); a multiply-add is 2 flops:
# flops/sample = 2 x (3 x forward MACs - the first layer's MACs).
# (Attention and the element-wise layers are counted as their products only;
# the transformer's first layer is the embedding, a lookup.)
def _dense(n_in, n_out, rows=1):
    return rows * n_in * n_out


def _conv(c_in, c_out, k, h, w):  # 'same' padding, stride 1: one k*k*c_in dot per output
    return h * w * c_out * k * k * c_in


def _transformer(context=64, width=64, blocks=3, hidden=256, vocab=96):
    per_block = (_dense(width, 3 * width, context) + _dense(width, width, context)  # q,k,v and output projection
                 + 2 * context * context * width                                   # scores q.kT and weights.v
                 + _dense(width, hidden, context) + _dense(hidden, width, context))  # the MLP
    return blocks * per_block + _dense(width, vocab, context)  # + the tied unembedding


FORWARD_MACS = {
    "mlp": _dense(784, 256) + _dense(256, 128) + _dense(128, 10),
    "cnn": _conv(1, 16, 5, 28, 28) + _conv(16, 32, 5, 14, 14) + _dense(32 * 7 * 7, 10),
    "transformer": _transformer(),  # per window of 64 tokens, causal attention counted in full
}
FIRST_LAYER_MACS = {"mlp": _dense(784, 256), "cnn": _conv(1, 16, 5, 28, 28), "transformer": 0}
FLOPS_PER_SAMPLE = {k: 2 * (3 * v - FIRST_LAYER_MACS[k]) for k, v in FORWARD_MACS.items()}
FLOPS_FORMULA = ("flops/sample = 2 (flops per multiply-add) x (3 (forward + 2 backward products) x forward MACs"
                 " - the first layer's, whose input gradient no system computes)")


# (vendor, family, first model, last model, the core's name), as Linux's
# arch/x86/kernel/cpu/amd.c and intel-family.h give them: a VM's model name
# ("AMD EPYC") often does not say which generation it is.
CPU_KINDS = [
    ("AuthenticAMD", 23, 0x00, 0x2F, "Zen 1"), ("AuthenticAMD", 23, 0x50, 0x5F, "Zen 1"),
    ("AuthenticAMD", 23, 0x30, 0x4F, "Zen 2"), ("AuthenticAMD", 23, 0x60, 0x7F, "Zen 2"),
    ("AuthenticAMD", 23, 0x90, 0x91, "Zen 2"), ("AuthenticAMD", 23, 0xA0, 0xAF, "Zen 2"),
    ("AuthenticAMD", 25, 0x00, 0x0F, "Zen 3"), ("AuthenticAMD", 25, 0x20, 0x5F, "Zen 3"),
    ("AuthenticAMD", 25, 0x10, 0x1F, "Zen 4"), ("AuthenticAMD", 25, 0x60, 0xAF, "Zen 4"),
    ("AuthenticAMD", 26, 0x00, 0x2F, "Zen 5"), ("AuthenticAMD", 26, 0x40, 0x4F, "Zen 5"),
    ("AuthenticAMD", 26, 0x60, 0x7F, "Zen 5"),
    ("AuthenticAMD", 26, 0x50, 0x5F, "Zen 6"), ("AuthenticAMD", 26, 0x80, 0xAF, "Zen 6"),
    ("AuthenticAMD", 26, 0xC0, 0xCF, "Zen 6"),
    ("GenuineIntel", 6, 0x55, 0x55, "Skylake-SP/Cascade Lake/Cooper Lake"),
    ("GenuineIntel", 6, 0x6A, 0x6A, "Ice Lake-SP"), ("GenuineIntel", 6, 0x6C, 0x6C, "Ice Lake-D"),
    ("GenuineIntel", 6, 0x8F, 0x8F, "Sapphire Rapids"), ("GenuineIntel", 6, 0xCF, 0xCF, "Emerald Rapids"),
]


def cpu_info():
    """The first processor's fields in /proc/cpuinfo."""
    info = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            if not line.strip():
                break
            key, _, value = line.partition(":")
            info[key.strip()] = value.strip()
    return info


def cpu_flags():
    return set(cpu_info().get("flags", "").split())


def cpu_model():
    """The model name, and what tells two machines apart where it does not:
    family and model, the core's name where known, the vector instruction
    sets kiln chooses kernels by, and the L2 a core (its GEMM blocking)."""
    info = cpu_info()
    name = info.get("model name", "unknown CPU")
    try:
        vendor, family, model = info["vendor_id"], int(info["cpu family"]), int(info["model"])
    except (KeyError, ValueError):
        return name
    kind = next((k for v, fam, lo, hi, k in CPU_KINDS if (v, fam) == (vendor, family) and lo <= model <= hi), None)
    flags = set(info.get("flags", "").split())
    isa = ("AVX-512" + (" with AVX512-BF16" if "avx512_bf16" in flags else " without AVX512-BF16")
           if "avx512f" in flags else "AVX2 + FMA" if {"avx2", "fma"} <= flags else "no AVX2 + FMA")
    parts = [f"family {family}, model {model}" + (f" ({kind})" if kind else ""), isa]
    for index in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            with open(os.path.join(index, "level")) as f:
                if f.read().strip() != "2":
                    continue
            with open(os.path.join(index, "size")) as f:
                parts.append(f"L2 {f.read().strip()} (cpu0's)")
            break
        except OSError:
            continue
    return f"{name}; " + "; ".join(parts)


def fma_peak(build):
    """The best f32 GFLOP/s of 8-24 independent FMA chains on one pinned core."""
    exe = os.path.join(build, "benchmarks", "compare", "kiln_compare_fma_peak")
    out, _, _ = measure([exe, "--cpu", str(pinned_cpus(1)[0])], dict(os.environ))
    return json.loads(out.strip().splitlines()[-1])


def pinned_cpus(threads):
    """The cores a system with `threads` threads is pinned to: the first
    `threads` of the cores this runner may use (the peak is measured on the first)."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < threads:
        sys.exit(f"{threads} threads asked for, but only cores {allowed} are available")
    return allowed[:threads]


def measure(cmd, env, cpus=None):
    """Runs cmd, pinned to `cpus` when given (sched_setaffinity in the child,
    inherited by all its threads); returns its stdout, its peak resident memory
    in MiB (wait4's ru_maxrss: the process and the children it waited for) and
    its wall time."""
    r, w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(w, 1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        os.execvpe(cmd[0], cmd, env)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    _, status, usage = os.wait4(pid, 0)
    if status != 0:
        sys.exit(f"{' '.join(cmd)} failed (status {status})")
    return b"".join(chunks).decode(), usage.ru_maxrss / 1024.0, time.monotonic() - start


# glibc malloc kept from returning memory to the system: "PyTorch tuned", the
# fair peer (in VMs its CNN and transformer run up to 5x faster with it).
MALLOC_TUNED = {"MALLOC_MMAP_THRESHOLD_": "2000000000", "MALLOC_TRIM_THRESHOLD_": "2000000000",
                "MALLOC_TOP_PAD_": "268435456"}


def systems(build, model, quick=False):
    cmp = os.path.join(build, "benchmarks", "compare")
    steps, windows, warmup = {"mlp": (300, 3, 50), "cnn": (40, 3, 10), "transformer": (20, 3, 5)}[model]
    if quick:
        steps, windows, warmup = max(steps // 5, 4), 2, max(warmup // 5, 1)
    common = ["--model", model, "--warmup", str(warmup), "--steps", str(steps), "--windows", str(windows)]
    single = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    kiln = os.path.join(cmp, "kiln_compare_kiln")
    out = [
        ("kiln", 1, [kiln, "--threads", "1"] + common, single),
        ("kiln replicate<2>", 2, [kiln, "--threads", "2"] + common, single),
        ("kiln precision<bf16>", 1, [kiln, "--bf16"] + common, single),
    ]
    # kiln built as for the CPUs this one can stand in for: without
    # AVX512-BF16 (bf16 rounded in software, as on Ice Lake) and with AVX2
    # alone; each only where this CPU has more than that build uses.
    pairs = [("kiln replicate<2>", "kiln"), ("kiln precision<bf16>", "kiln")]
    flags = cpu_flags()
    for exe, label, stands_in in (("kiln_compare_kiln_no_bf16", "-mno-avx512bf16", "avx512_bf16" in flags),
                                  ("kiln_compare_kiln_avx2", "x86-64-v3", "avx512f" in flags)):
        path = os.path.join(cmp, exe)
        if stands_in and os.path.exists(path):
            out.append((f"kiln, {label}", 1, [path, "--threads", "1"] + common, single))
            out.append((f"kiln bf16, {label}", 1, [path, "--bf16"] + common, single))
            pairs.append((f"kiln bf16, {label}", f"kiln, {label}"))
    if model != "transformer":
        out.append(("hand-written Eigen", 1, [os.path.join(cmp, "kiln_compare_eigen")] + common, single))
    torch = ["/usr/bin/python3", os.path.join(HERE, "torch_train.py")]
    for tuned in (False, True):
        for threads in (1, 2):
            env = {"OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads), "LD_LIBRARY_PATH": OPENBLAS}
            out.append(("PyTorch tuned" if tuned else "PyTorch", threads, torch + ["--threads", str(threads)] + common,
                        dict(env, **MALLOC_TUNED) if tuned else env))
    # libtorch C++: the peer a C++ user would pick; malloc-tuned like "PyTorch
    # tuned" (the same glibc behaviour), one and two intra-op threads.
    libtorch = os.path.join(cmp, "kiln_compare_libtorch")
    if os.path.exists(libtorch):
        for threads in (1, 2):
            env = {"OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads), "LD_LIBRARY_PATH": OPENBLAS}
            out.append(("libtorch C++ tuned", threads, [libtorch, "--threads", str(threads)] + common,
                        dict(env, **MALLOC_TUNED)))
    dlib = os.path.join(cmp, "kiln_compare_dlib")
    if os.path.exists(dlib) and model != "transformer":
        out.append(("dlib dnn_trainer", 1, [dlib, "--driver", "trainer"] + common, single))
        out.append(("dlib manual step", 1, [dlib, "--driver", "manual"] + common, single))
    return out, pairs


def compare(build, model, reps, peak, quick=False):
    entries, pairs = systems(build, model, quick)
    results = {i: [] for i in range(len(entries))}
    memory = {i: 0.0 for i in range(len(entries))}
    extra = {}
    for rep in range(reps):
        for i, (name, threads, cmd, env_extra) in enumerate(entries):
            env = dict(os.environ, **env_extra)
            out, rss, _ = measure(cmd, env, pinned_cpus(threads))
            report = json.loads(out.strip().splitlines()[-1])
            results[i].append(statistics.median(report["samples_per_s"]))
            memory[i] = max(memory[i], rss)
            extra[i] = report
        print(f"  {model} round {rep + 1}/{reps} done", file=sys.stderr)
    base = statistics.median(results[0])
    unit = "windows/s" if model == "transformer" else "samples/s"
    print(f"\n{model.upper()}: median {unit} over {reps} interleaved rounds "
          f"(each the median of its timed windows); 1-thread rows pinned to core {pinned_cpus(1)[0]}, "
          f"2-thread rows to cores {pinned_cpus(2)}")
    flops = FLOPS_PER_SAMPLE[model]
    print(f"{flops / 1e6:.2f} MFLOP per {'window of 64 tokens' if model == 'transformer' else 'sample'}; "
          f"% of peak = {unit} x that / ({peak:.1f} GFLOP/s x threads)")
    print(f"{'system':<26} {'threads':>7} {unit:>11} {'kiln ÷ it':>10} {'% peak':>7} {'peak RSS':>10}  note")
    for i, (name, threads, _, _) in enumerate(entries):
        med = statistics.median(results[i])
        spread = f"{min(results[i]):.0f}–{max(results[i]):.0f}"
        note = extra[i].get("blas", "")
        note = ("BLAS " + os.path.basename(note.split(" + ")[-1])) if note and note != "none" else ""
        share = f"{100 * med * flops / (peak * 1e9 * threads):>6.1f}%" if name.startswith("kiln") else f"{'':>7}"
        print(f"{name:<26} {threads:>7} {med:>11,.0f} {base / med:>9.2f}× {share} {memory[i]:>8.0f} MiB  "
              f"range {spread}{'; ' + note if note else ''}; loss {extra[i]['final_loss']:.3f}")
    # kiln's own ratios, paired round by round (each round's ratio, then their
    # median): replicate<2> over one thread, and bf16 over f32 in each build.
    index = {name: i for i, (name, _, _, _) in enumerate(entries)}
    for a, b in pairs:
        r = [x / y for x, y in zip(results[index[a]], results[index[b]])]
        print(f"{a} ÷ {b}: {statistics.median(r):.3f}× by round (range {min(r):.3f}–{max(r):.3f})")


def compile_report(build):
    with open(os.path.join(build, "compile_commands.json")) as f:
        commands = json.load(f)
    print("\nCompile cost of kiln's examples (one TU each, -O3 -march=native, alone on the machine)")
    print(f"{'example':<28} {'seconds':>8} {'peak compiler memory':>22}")
    for entry in commands:
        src = entry["file"]
        if "/examples/" not in src:
            continue
        args = shlex.split(entry["command"]) if "command" in entry else entry["arguments"]
        # compile to /dev/null: the measurement, not the object, is wanted
        out = args.index("-o")
        args = args[:out + 1] + [os.devnull] + args[out + 2:]
        rss, seconds = measure_compile(args, entry["directory"])
        print(f"{os.path.basename(src):<28} {seconds:>8.1f} {rss:>18.0f} MiB")


def measure_compile(args, directory):
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.chdir(directory)
        os.execvp(args[0], args)
    _, status, usage = os.wait4(pid, 0)
    if status != 0:
        sys.exit(f"compiling {args[-1]} failed")
    return usage.ru_maxrss / 1024.0, time.monotonic() - start


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", required=True)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--models", default="mlp,cnn,transformer")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--quick", action="store_true", help="one round of short windows, no compile report: a smoke "
                   "check of the harness, not a measurement")
    a = p.parse_args()
    if a.quick:
        a.reps, a.no_compile = 1, True
    print(f"kiln side-by-side comparison, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, "
          f"{open('/proc/loadavg').read().split()[0]} load before the run")
    models = list(filter(None, a.models.split(",")))  # --models "" : the compile report alone
    if models:
        peak = fma_peak(a.build)
        print(f"CPU: {cpu_model()}\nFMA peak (f32, one pinned core, best of 8-24 independent {peak['isa']} chains): "
              f"{peak['gflops']:.1f} GFLOP/s\n{FLOPS_FORMULA}")
    for model in models:
        compare(a.build, model, a.reps, peak["gflops"], a.quick)
    if not a.no_compile:
        compile_report(a.build)


if __name__ == "__main__":
    main()
