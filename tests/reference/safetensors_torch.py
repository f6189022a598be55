#!/usr/bin/python3
"""kiln's safetensors files against PyTorch (Debian's python3-torch), both ways.

Usage: safetensors_torch.py KILN_SAFETENSORS_TORCH WORK_DIR

1. kiln writes each model's weights (kiln_safetensors_torch export) with its
   outputs on some inputs. PyTorch reads the files directly (json + struct +
   torch.frombuffer: the `safetensors` package is not in Debian), checks that
   their names are exactly the state_dict keys of the equivalent nn.Module
   (the modules of torch_optimizer_steps.py), loads them with load_state_dict
   (a tied weight's other name from the file's __metadata__, as the
   safetensors library's load_model does) and must give kiln's outputs.
2. PyTorch initialises each module, trains it for 3 SGD steps, and writes its
   state_dict (a shared tensor once, as safetensors' save_model does; the
   MLP's also in BF16); kiln loads them (kiln_safetensors_torch import) and
   must give PyTorch's outputs.
Outputs agree when max |kiln - torch| <= 1e-5 * max(1, max |torch|) (1e-12 for float64).
"""
import json
import os
import struct
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_optimizer_steps import build  # noqa: E402  (the modules kiln's reference tests use)

DTYPES = {"F32": torch.float32, "F64": torch.float64, "BF16": torch.bfloat16, "F16": torch.float16,
          "I64": torch.int64, "BOOL": torch.bool}
NAMES = {v: k for k, v in DTYPES.items()}
BATCH = 3


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    tensors = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        tensors[name] = torch.frombuffer(bytearray(data[begin:end]), dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
    return tensors, meta


def write_safetensors(path, tensors, meta):
    header = {"__metadata__": meta}
    blobs, at = [], 0
    for name, t in tensors.items():
        raw = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def shared_once(module):
    """The state_dict with each shared tensor once, its other names in metadata (safetensors' save_model)."""
    out, meta, first = {}, {"format": "pt"}, {}
    for name, t in module.state_dict().items():
        key = (t.data_ptr(), t.dtype, tuple(t.shape))
        if key in first:
            meta[name] = first[key]
        else:
            first[key] = name
            out[name] = t
    return out, meta


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))


def cnn():  # examples/fashion_mnist_cnn.cpp
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 16, 5, padding=2), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 5, padding=2), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(1568, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))


def gpt():  # embedding tied to the output projection
    middle = build([["position_embedding", 8, 16], ["transformer_block", 16, 2, 64, 8],
                    ["transformer_block", 16, 4, 24, 8], ["layer_norm", 16]], torch.float32)
    net = torch.nn.Sequential(torch.nn.Embedding(17, 16), *middle.children(), torch.nn.Linear(16, 17, bias=False))
    net[5].weight = net[0].weight
    return net


def res():
    return build([["dense", 5, 6, True], ["residual", [["dense", 6, 6, True], ["tanh"], ["dense", 6, 6, True]]],
                  ["sequential", [["dense", 6, 6, True], ["gelu"]]], ["dense", 6, 3, True]], torch.float32)


# name: (module, dtype, input shape, token ids?)
CASES = {"mlp": (mlp, torch.float32, [784], False), "mlp_f64": (mlp, torch.float64, [784], False),
         "cnn": (cnn, torch.float32, [1, 28, 28], False), "gpt": (gpt, torch.float32, [8], True),
         "res": (res, torch.float32, [5], False)}


def error(ours, theirs, dtype, what, failures):
    ours = torch.tensor(ours, dtype=torch.float64)
    theirs = theirs.detach().to(torch.float64).reshape(-1)
    if ours.shape != theirs.shape:
        failures.append(f"{what}: {tuple(ours.shape)} outputs, PyTorch {tuple(theirs.shape)}")
        return float("inf")
    err = ((ours - theirs).abs().max() / theirs.abs().max().clamp_min(1.0)).item()
    if not err <= (1e-12 if dtype == torch.float64 else 1e-5):
        failures.append(f"{what}: outputs differ by {err:.3g} (relative to the largest)")
    return err


def run(net, x, tokens):
    net.eval()
    with torch.no_grad():
        return net(x.long() if tokens else x)


def kiln_to_torch(work, failures):
    for name, (make, dtype, shape, tokens) in CASES.items():
        tensors, meta = read_safetensors(os.path.join(work, name + ".safetensors"))
        with open(os.path.join(work, name + ".kiln.json")) as f:
            case = json.load(f)
        net = make().to(dtype)
        expected = [k for k in net.state_dict() if not k.endswith(".mask")]  # (a constant of the test's module)
        aliases = {k: v for k, v in meta.items() if v in tensors and k not in tensors}
        if list(tensors) != [k for k in expected if k not in aliases] or sorted(
                list(tensors) + list(aliases)) != sorted(expected):  # the same names, in state_dict order
            failures.append(f"{name}: kiln's names {list(tensors)} + aliases {aliases}, PyTorch's {expected}")
            continue
        wrong = [k for k, t in tensors.items() if t.dtype != (torch.int64 if k.endswith("num_batches_tracked")
                                                              else dtype)]
        if wrong:
            failures.append(f"{name}: tensors of another dtype: {wrong}")
        state = dict(tensors)
        for alias, kept in aliases.items():
            state[alias] = state[kept]
        missing, unexpected = net.load_state_dict(state, strict=False)
        if unexpected or any(not k.endswith(".mask") for k in missing):
            failures.append(f"{name}: load_state_dict: missing {missing}, unexpected {unexpected}")
        counts = {k: t.item() for k, t in tensors.items() if k.endswith("num_batches_tracked")}
        if any(v != 11 for v in counts.values()):
            failures.append(f"{name}: num_batches_tracked {counts}, kiln's step count is 11")
        x = torch.tensor(case["x"], dtype=dtype).reshape([BATCH] + shape)
        err = error(case["y"], run(net, x, tokens), dtype, f"kiln -> PyTorch {name}", failures)
        print(f"kiln -> PyTorch {name}: {len(tensors)} tensors, {len(aliases)} tied alias(es), "
              f"worst output difference {err:.3g}")


def torch_to_kiln(work, kiln, failures):
    expected = {}
    for seed, (name, (make, dtype, shape, tokens)) in enumerate(CASES.items()):
        torch.manual_seed(seed)
        net = make().to(dtype)
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        for _ in range(3):  # trained a little (batch_norm's statistics and counts move too)
            x = torch.randint(0, 17, [4] + shape) if tokens else torch.randn([4] + shape, dtype=dtype)
            net.train()
            y = net(x)
            loss = torch.nn.functional.cross_entropy(y.reshape(-1, y.shape[-1]), torch.randint(0, y.shape[-1],
                                                                                                [y.numel() // y.shape[-1]]))
            opt.zero_grad()
            loss.backward()
            opt.step()
        x = (torch.randint(0, 17, [BATCH] + shape) if tokens else torch.randn([BATCH] + shape)).to(dtype)
        tensors, meta = shared_once(net)
        write_safetensors(os.path.join(work, name + ".torch.safetensors"), tensors, meta)
        with open(os.path.join(work, name + ".torch.json"), "w") as f:
            json.dump({"x": x.reshape(-1).tolist()}, f)
        expected[name] = (run(net, x, tokens), dtype, meta)
        if name == "mlp":  # the same weights in BF16, and PyTorch's outputs with them rounded so
            write_safetensors(os.path.join(work, "mlp_bf16.torch.safetensors"),
                              {k: v.to(torch.bfloat16) for k, v in tensors.items()}, meta)
            net.load_state_dict({k: v.to(torch.bfloat16).float() for k, v in tensors.items()})
            expected["mlp_bf16"] = (run(net, x, tokens), dtype, meta)
    subprocess.run([kiln, "import", work], check=True)
    for name, (y, dtype, meta) in expected.items():
        with open(os.path.join(work, name + ".kiln_out.json")) as f:
            out = json.load(f)
        if out["metadata"] != meta:
            failures.append(f"PyTorch -> kiln {name}: metadata {out['metadata']}, written {meta}")
        err = error(out["y"], y, dtype, f"PyTorch -> kiln {name}", failures)
        print(f"PyTorch -> kiln {name}: worst output difference {err:.3g}")


def main():
    kiln, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    subprocess.run([kiln, "export", work], check=True)
    failures = []
    kiln_to_torch(work, failures)
    torch_to_kiln(work, kiln, failures)
    if failures:
        print("\n".join(failures))
        print(f"{len(failures)} failed")
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    main()
