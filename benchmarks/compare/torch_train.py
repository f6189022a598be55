#!/usr/bin/python3
"""PyTorch peer for kiln's side-by-side training benchmarks.

Same task as eigen_train.cpp / dlib_train.cpp (see BENCHMARKING.md):
Fashion-MNIST (pixels / 255), batch 64, cross-entropy (mean), SGD lr 0.05
momentum 0.9, and the same batch order (a splitmix64-driven Fisher-Yates
permutation with seed 0, taken 64 at a time, partial last batch dropped,
cycling).

Run with Debian's interpreter and OpenBLAS (otherwise torch gets netlib BLAS):

    LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp \\
      /usr/bin/python3 torch_train.py --model mlp --threads 1 --steps 300 --windows 5

--model transformer trains examples/char_transformer.cpp's model (tied
embedding 96x64, learned positions, 3 pre-norm blocks of 4-head causal
nn.MultiheadAttention and a GELU MLP of width 256, final LayerNorm, logits =
h . E^T) on 32 synthetic token windows a step, the same ids as
compare_common.hpp's synthetic_token_windows, with the example's AdamW (lr 2e-3,
weight decay 0.01) and gradient clipping at norm 1.

Prints exactly one JSON line on stdout:
    {"system":"pytorch","model":..,"threads":N,"samples_per_s":[..],"blas":"..","final_loss":..}
final_loss is the mean training-batch loss over the last timed window.
"""

import argparse
import gzip
import json
import os
import struct
import time

import torch
import torch.nn.functional as F
from torch import nn

DATA_DIR = "/usr/share/datasets/fashion-mnist"
BATCH = 64
LR = 0.05
MOMENTUM = 0.9
MASK64 = (1 << 64) - 1


def read_idx(path):
    """Parse a gzipped IDX file; returns (dims, raw uint8 payload)."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack_from(">I", data, 0)
    if magic >> 8 != 0x08:  # 0x08 = unsigned byte
        raise ValueError(f"{path}: unexpected IDX magic {magic:#x}")
    ndim = magic & 0xFF
    dims = struct.unpack_from(f">{ndim}I", data, 4)
    payload = data[4 + 4 * ndim:]
    expected = 1
    for d in dims:
        expected *= d
    if len(payload) != expected:
        raise ValueError(f"{path}: payload size {len(payload)} != {expected}")
    return dims, payload


def load_train_set():
    dims, pixels = read_idx(os.path.join(DATA_DIR, "train-images-idx3-ubyte.gz"))
    (n_labels,), labels = read_idx(os.path.join(DATA_DIR, "train-labels-idx1-ubyte.gz"))
    n, rows, cols = dims
    assert (rows, cols) == (28, 28) and n_labels == n
    x = torch.frombuffer(bytearray(pixels), dtype=torch.uint8).reshape(n, rows * cols).float() / 255.0
    y = torch.frombuffer(bytearray(labels), dtype=torch.uint8).long()
    return x, y


def splitmix64(seed):
    """splitmix64's outputs in order: bit-identical to compare_common.hpp's SplitMix64."""
    state = seed
    while True:
        state = (state + 0x9E3779B97F4A7C15) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        yield z ^ (z >> 31)


def shuffled_indices(n, seed=0):
    """Fisher-Yates driven by splitmix64: bit-identical to compare_common.hpp."""
    rng = splitmix64(seed)
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        j = next(rng) % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


CONTEXT, VOCAB, WIDTH, HEADS, BLOCKS, TOKEN_BATCH, TOKEN_BATCHES = 64, 96, 64, 4, 3, 32, 64


def synthetic_token_windows():
    """TOKEN_BATCHES * TOKEN_BATCH windows of CONTEXT + 1 ids: splitmix64 with
    seed 0, next() % VOCAB in order (bit-identical to compare_common.hpp)."""
    rng = splitmix64(0)
    out = [next(rng) % VOCAB for _ in range(TOKEN_BATCHES * TOKEN_BATCH * (CONTEXT + 1))]
    return torch.tensor(out, dtype=torch.long).reshape(TOKEN_BATCHES * TOKEN_BATCH, CONTEXT + 1)


class Block(nn.Module):
    """kiln's transformer_block<4>: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(WIDTH)
        self.attention = nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)
        self.norm2 = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x, causal):
        h = self.norm1(x)
        x = x + self.attention(h, h, h, attn_mask=causal, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class CharTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, WIDTH)
        nn.init.normal_(self.embedding.weight, std=0.02)  # GPT-2's; N(0, 1) makes the tied logits huge
        self.positions = nn.Parameter(torch.randn(CONTEXT, WIDTH) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.norm = nn.LayerNorm(WIDTH)
        # True above the diagonal: position i attends to positions <= i only.
        self.register_buffer("causal", torch.triu(torch.ones(CONTEXT, CONTEXT, dtype=torch.bool), diagonal=1))

    def forward(self, tokens):
        x = self.embedding(tokens) + self.positions
        for block in self.blocks:
            x = block(x, self.causal)
        return self.norm(x) @ self.embedding.weight.t()  # the output projection tied to the embedding


def make_model(kind):
    if kind == "transformer":
        return CharTransformer()
    if kind == "mlp":
        return nn.Sequential(
            nn.Linear(784, 256), nn.ReLU(),
            nn.Linear(256, 128), nn.ReLU(),
            nn.Linear(128, 10))
    return nn.Sequential(
        nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),    # 16x14x14
        nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),   # 32x7x7
        nn.Flatten(),
        nn.Linear(32 * 7 * 7, 10))


def loaded_blas():
    """BLAS shared objects actually mapped into this process."""
    found = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(None, 5)  # address perms offset dev inode [path]
            if len(fields) < 6:
                continue
            path = fields[5].strip()
            base = os.path.basename(path)
            if base.startswith(("libblas", "libopenblas", "libmkl", "libblis")):
                found.add(path)
    return " + ".join(sorted(found)) or "none"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["mlp", "cnn", "transformer"], required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--windows", type=int, default=5)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)  # weight init (PyTorch's default init for each layer)

    if args.model == "transformer":
        windows = synthetic_token_windows()
        batch = TOKEN_BATCH
        num_batches = TOKEN_BATCHES
        # targets flattened to (batch * context,): the loss is the mean over every position
        batches = [(windows[i * batch:(i + 1) * batch, :-1].contiguous(),
                    windows[i * batch:(i + 1) * batch, 1:].reshape(-1).contiguous()) for i in range(num_batches)]
    else:
        x, y = load_train_set()
        perm = torch.tensor(shuffled_indices(x.shape[0]), dtype=torch.long)
        batch = BATCH
        num_batches = x.shape[0] // BATCH
        used = perm[:num_batches * BATCH]
        xs, ys = x[used].contiguous(), y[used].contiguous()
        if args.model == "cnn":
            xs = xs.reshape(-1, 1, 28, 28)
        # Batches are contiguous views, built before any timing.
        batches = [(xs[i * BATCH:(i + 1) * BATCH], ys[i * BATCH:(i + 1) * BATCH]) for i in range(num_batches)]

    model = make_model(args.model)
    model.train()
    if args.model == "transformer":
        opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
        clip = 1.0
    else:
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        clip = None

    step_counter = 0

    def train_step():
        nonlocal step_counter
        xb, yb = batches[step_counter % num_batches]
        step_counter += 1
        opt.zero_grad(set_to_none=True)
        out = model(xb)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), yb)
        loss.backward()
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        return loss

    for _ in range(args.warmup):
        train_step()

    samples_per_s = []
    window_losses = []
    for _ in range(args.windows):
        window_losses = []  # detached loss tensors; .item() is deferred until after timing
        t0 = time.perf_counter()
        for _ in range(args.steps):
            window_losses.append(train_step().detach())
        t1 = time.perf_counter()
        samples_per_s.append(args.steps * batch / (t1 - t0))

    final_loss = float(torch.stack(window_losses).mean())
    print(json.dumps({
        "system": "pytorch",
        "model": args.model,
        "threads": args.threads,
        "samples_per_s": samples_per_s,
        "blas": loaded_blas(),
        "final_loss": final_loss,
    }, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
