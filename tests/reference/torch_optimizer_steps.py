#!/usr/bin/python3
"""Replays kiln's optimizer steps (SGD, Adam, AdamW) in PyTorch and compares them.

Runs the kiln_reference_step binary (argv[1]), which prints JSON: models
(most small, one of the example transformer's sizes), their batch size and
initial parameters, three batches, and for each step the loss
and gradients kiln computed, then kiln's parameters after the last step.
PyTorch (Debian's python3-torch) builds the same network from the same
parameters, takes the same steps with torch.optim.SGD, and every number must
agree to 1e-5 relative (float64 cases element-wise; float32 cases relative to
each tensor's norm, since float32 rounding differs between the two).
"""
import json
import subprocess
import sys

import torch


class Residual(torch.nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        return x + self.body(x)


class CausalSelfAttention(torch.nn.Module):
    """nn.MultiheadAttention over [batch, L, D] with a causal mask."""

    def __init__(self, width, heads, length):
        super().__init__()
        self.mha = torch.nn.MultiheadAttention(width, heads, batch_first=True)
        self.register_buffer("mask", torch.triu(torch.ones(length, length, dtype=torch.bool), 1))

    def forward(self, x):
        return self.mha(x, x, x, attn_mask=self.mask, need_weights=False)[0]


class PositionEmbedding(torch.nn.Module):
    def __init__(self, length, width):
        super().__init__()
        self.table = torch.nn.Parameter(torch.zeros(length, width))

    def forward(self, x):
        return x + self.table


def build(layers, dtype, ties=None):
    """The network of `layers`; a dense entry may end with a tie name, and
    every dense layer with the same name shares one weight Parameter."""
    mods = []
    ties = {} if ties is None else ties
    for layer in layers:
        kind = layer[0]
        if kind == "dense":
            linear = torch.nn.Linear(layer[1], layer[2], bias=layer[3])
            if len(layer) > 4:
                if layer[4] in ties:
                    linear.weight = ties[layer[4]]
                else:
                    ties[layer[4]] = linear.weight
            mods.append(linear)
        elif kind == "relu":
            mods.append(torch.nn.ReLU())
        elif kind == "tanh":
            mods.append(torch.nn.Tanh())
        elif kind == "sigmoid":
            mods.append(torch.nn.Sigmoid())
        elif kind == "flatten":
            mods.append(torch.nn.Flatten())
        elif kind == "gelu":
            mods.append(torch.nn.GELU())
        elif kind == "layer_norm":
            mods.append(torch.nn.LayerNorm(layer[1]))
        elif kind == "softmax":
            mods.append(torch.nn.Softmax(dim=-1))
        elif kind == "conv2d":
            mods.append(torch.nn.Conv2d(layer[1], layer[2], layer[3], stride=layer[4], padding=layer[5]))
        elif kind == "max_pool":
            mods.append(torch.nn.MaxPool2d(layer[1], layer[2]))
        elif kind == "avg_pool":
            mods.append(torch.nn.AvgPool2d(layer[1], layer[2]))
        elif kind == "batch_norm":  # channels, rank of the sample
            mods.append(torch.nn.BatchNorm2d(layer[1]) if layer[2] == 3 else torch.nn.BatchNorm1d(layer[1]))
        elif kind == "residual":
            mods.append(Residual(build(layer[1], dtype, ties)))
        elif kind == "sequential":
            mods.append(build(layer[1], dtype, ties))
        elif kind == "attention":  # width, heads, length
            mods.append(CausalSelfAttention(layer[1], layer[2], layer[3]))
        elif kind == "position_embedding":
            mods.append(PositionEmbedding(layer[1], layer[2]))
        elif kind == "transformer_block":  # width, heads, hidden, length
            d, h, hidden, length = layer[1:]
            mods.append(torch.nn.Sequential(
                Residual(torch.nn.Sequential(torch.nn.LayerNorm(d), CausalSelfAttention(d, h, length))),
                Residual(torch.nn.Sequential(torch.nn.LayerNorm(d), torch.nn.Linear(d, hidden), torch.nn.GELU(),
                                             torch.nn.Linear(hidden, d)))))
        else:
            raise ValueError(kind)
    return torch.nn.Sequential(*mods).to(dtype)


def compare(what, ours, theirs, dtype, failures, tolerance=1e-5):
    ours = torch.tensor(ours, dtype=torch.float64)
    theirs = theirs.detach().to(torch.float64).reshape(-1)
    if ours.shape != theirs.shape:
        failures.append(f"{what}: shape {tuple(ours.shape)} vs {tuple(theirs.shape)}")
        return
    if dtype == torch.float64:
        err = ((ours - theirs).abs() / theirs.abs().clamp_min(1e-8)).max().item()
    else:
        err = ((ours - theirs).norm() / theirs.norm().clamp_min(1e-12)).item()
    if not err <= tolerance:
        failures.append(f"{what}: relative error {err:.3g}")
    return err


def main():
    out = subprocess.run([sys.argv[1]], check=True, capture_output=True, text=True).stdout
    cases = json.loads(out)["cases"]
    failures = []
    worst = {}
    for case in cases:
        dtype = torch.float64 if case["dtype"] == "float64" else torch.float32
        net = build(case["layers"], dtype)
        params = list(net.parameters())  # a shared Parameter appears once, at its first use
        assert len(params) == len(case["initial"]), case["name"]
        with torch.no_grad():
            for p, init in zip(params, case["initial"]):
                p.copy_(torch.tensor(init, dtype=dtype).reshape(p.shape))
        o = case["optimizer"]
        if o["name"] == "sgd":
            opt = torch.optim.SGD(params, lr=o["lr"], momentum=o["momentum"], weight_decay=o["weight_decay"],
                                  nesterov=o["nesterov"])
        else:
            kind = torch.optim.Adam if o["name"] == "adam" else torch.optim.AdamW
            opt = kind(params, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"],
                       weight_decay=o["weight_decay"])
        for k, step in enumerate(case["steps"]):
            x = torch.tensor(step["x"], dtype=dtype).reshape([case["batch"]] + case["input_shape"])
            opt.zero_grad()
            y = net(x)
            if case["loss"].startswith("softmax_cross_entropy"):  # a sequence: every position is one classification
                loss = torch.nn.functional.cross_entropy(y.reshape(-1, y.shape[-1]),
                                                         torch.tensor(step["t"], dtype=torch.long))
            else:
                loss = torch.nn.functional.mse_loss(y, torch.tensor(step["t"], dtype=dtype).reshape(y.shape))
            loss.backward()
            name = case["name"]
            # batch_norm divides by the batch's standard deviation, which amplifies the f32 rounding of its
            # statistics (kiln sums them in double, PyTorch in float): its f32 cases get 5e-5.
            tol = 5e-5 if dtype == torch.float32 and "batch_norm" in name else 1e-5
            e = [compare(f"{name} step {k + 1} loss", [step["loss"]], loss.reshape(1), dtype, failures, tol)]
            for i, (p, g) in enumerate(zip(params, step["grads"])):
                e.append(compare(f"{name} step {k + 1} gradient {i}", g, p.grad, dtype, failures, tol))
            opt.step()
            worst[name] = max([worst.get(name, 0.0)] + [v for v in e if v is not None])
        for i, (p, w) in enumerate(zip(params, case["final"])):
            worst[case["name"]] = max(worst[case["name"]],
                                      compare(f"{case['name']} final parameter {i}", w, p, dtype, failures, tol) or 0)
        # batch_norm's running statistics (mean, then variance, per layer) after the steps
        running = [b for name, b in net.named_buffers() if name.endswith(("running_mean", "running_var"))]
        assert len(running) == len(case["state"]), case["name"]
        for i, (b, s) in enumerate(zip(running, case["state"])):
            worst[case["name"]] = max(worst[case["name"]],
                                      compare(f"{case['name']} running statistic {i}", s, b, dtype, failures, tol) or 0)
    for name, err in worst.items():
        print(f"{name}: worst relative difference from PyTorch {err:.3g}")
    if failures:
        print("\n".join(failures))
        print(f"0 passed, {len(failures)} failed")
        sys.exit(1)
    print(f"{len(cases)} passed, 0 failed")


if __name__ == "__main__":
    main()
