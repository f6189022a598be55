#!/usr/bin/python3
"""The side-by-side runner behind scripts/compare-peers.

Every system trains the same model on the same batches (see
compare_common.hpp) in its own process; a round runs each system once, in a
fixed order, and the rounds repeat (A B C A B C ...), so slow drifts of the
machine touch every system alike. Each process warms up, then times a few
windows of steps; its result is the median of its windows, and the table
shows the median over rounds, the ratio to kiln on one core, and the
process's peak resident memory (ru_maxrss from wait4).

Then it compiles each kiln example once more, alone, with the build's own
command line, and reports the compiler's wall time and peak memory.
"""
import argparse
import json
import os
import shlex
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"


def measure(cmd, env):
    """Runs cmd; returns its stdout, its peak resident memory in MiB (wait4's
    ru_maxrss: the process and the children it waited for) and its wall time."""
    r, w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(w, 1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
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


def systems(build, model):
    cmp = os.path.join(build, "benchmarks", "compare")
    steps, windows = (300, 3) if model == "mlp" else (40, 3)
    common = ["--model", model, "--warmup", "50" if model == "mlp" else "10", "--steps", str(steps), "--windows",
              str(windows)]
    single = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    out = [
        ("kiln", 1, [os.path.join(cmp, "kiln_compare_kiln"), "--threads", "1"] + common, single),
        ("kiln replicate<2>", 2, [os.path.join(cmp, "kiln_compare_kiln"), "--threads", "2"] + common, single),
        ("kiln precision<bf16>", 1, [os.path.join(cmp, "kiln_compare_kiln"), "--bf16"] + common, single),
        ("hand-written Eigen", 1, [os.path.join(cmp, "kiln_compare_eigen")] + common, single),
        ("PyTorch", 1, ["/usr/bin/python3", os.path.join(HERE, "torch_train.py"), "--threads", "1"] + common,
         dict(single, LD_LIBRARY_PATH=OPENBLAS)),
        ("PyTorch", 2, ["/usr/bin/python3", os.path.join(HERE, "torch_train.py"), "--threads", "2"] + common,
         {"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2", "LD_LIBRARY_PATH": OPENBLAS}),
    ]
    dlib = os.path.join(cmp, "kiln_compare_dlib")
    if os.path.exists(dlib):
        out.append(("dlib dnn_trainer", 1, [dlib, "--driver", "trainer"] + common, single))
        out.append(("dlib manual step", 1, [dlib, "--driver", "manual"] + common, single))
    return out


def compare(build, model, reps):
    entries = systems(build, model)
    results = {i: [] for i in range(len(entries))}
    memory = {i: 0.0 for i in range(len(entries))}
    extra = {}
    for rep in range(reps):
        for i, (name, threads, cmd, env_extra) in enumerate(entries):
            env = dict(os.environ, **env_extra)
            out, rss, _ = measure(cmd, env)
            report = json.loads(out.strip().splitlines()[-1])
            results[i].append(statistics.median(report["samples_per_s"]))
            memory[i] = max(memory[i], rss)
            extra[i] = report
        print(f"  {model} round {rep + 1}/{reps} done", file=sys.stderr)
    base = statistics.median(results[0])
    print(f"\n{model.upper()}: median samples/s over {reps} interleaved rounds "
          f"(each the median of its timed windows)")
    print(f"{'system':<22} {'threads':>7} {'samples/s':>11} {'kiln ÷ it':>10} {'peak RSS':>10}  note")
    for i, (name, threads, _, _) in enumerate(entries):
        med = statistics.median(results[i])
        spread = f"{min(results[i]):.0f}–{max(results[i]):.0f}"
        note = extra[i].get("blas", "")
        note = ("BLAS " + os.path.basename(note.split(" + ")[-1])) if note and note != "none" else ""
        print(f"{name:<22} {threads:>7} {med:>11,.0f} {base / med:>9.2f}× {memory[i]:>8.0f} MiB  "
              f"range {spread}{'; ' + note if note else ''}; loss {extra[i]['final_loss']:.3f}")


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
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--no-compile", action="store_true")
    a = p.parse_args()
    print(f"kiln side-by-side comparison, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, "
          f"{open('/proc/loadavg').read().split()[0]} load before the run")
    for model in filter(None, a.models.split(",")):  # --models "" : the compile report alone
        compare(a.build, model, a.reps)
    if not a.no_compile:
        compile_report(a.build)


if __name__ == "__main__":
    main()
