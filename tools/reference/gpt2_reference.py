#!/usr/bin/python3
"""An independent PyTorch implementation of GPT-2, to check dslaunch against.

Written from the architecture alone with torch.nn primitives (no
transformers): token and position embeddings, pre-LayerNorm blocks with
causal self-attention through a fused c_attn projection, a 4x MLP with the
tanh GELU, a final LayerNorm and an output layer tied to the token
embedding. Linear weights are Conv1D-shaped (in, out), as in Hugging Face's
GPT-2 and dslaunch's parameter table.

  eval         the mean cross-entropy of safetensors weights on the first N
               consecutive (B, T) windows of an llm.c token file; the check
               of `dslaunch eval`.
  train-bench  trains a randomly initialised model of the given shape with
               AdamW and reports tokens/s; the PyTorch side of the benchmark.

Run with Debian's /usr/bin/python3 (python3-torch 1.13, numpy). Both print
one JSON object on stdout.
"""

import argparse
import json
import math
import os
import re
import struct
import sys
import time


# --- BLAS kernels: must be settled before torch (and its OpenBLAS) loads ---


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def choose_openblas_coretype(requested):
    """Sets OPENBLAS_CORETYPE for the OpenBLAS torch links (Debian's torch
    takes its BLAS from libblas.so.3, which is OpenBLAS). OpenBLAS 0.3.21
    does not know every AVX-512 CPU model and falls back to slow kernels,
    and a stale variable can pin old ones (Haswell's sgemm runs at about a
    quarter of SkylakeX's on these machines). "auto" picks the widest
    kernels the CPU runs; "keep" leaves the environment alone."""
    if requested == "keep":
        return
    if requested != "auto":
        os.environ["OPENBLAS_CORETYPE"] = requested
        return
    flags = cpu_flags()
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"} <= flags:
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    elif {"avx2", "fma"} <= flags:
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"
    else:
        os.environ.pop("OPENBLAS_CORETYPE", None)


def openblas_core():
    """The kernels the loaded OpenBLAS uses, e.g. "SkylakeX"."""
    import ctypes

    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return "unknown"


def import_torch(threads, coretype):
    choose_openblas_coretype(coretype)
    if threads:
        for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ[variable] = str(threads)
    import torch

    # Before any parallel region, so that OpenMP's workers, created later
    # from this thread, inherit flush-to-zero: denormals slowed a run on
    # these machines tenfold.
    torch.set_flush_denormal(True)
    if threads:
        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
    return torch


# --- the model ---


def define_model(torch):
    nn = torch.nn
    F = torch.nn.functional

    class Conv1D(nn.Module):
        """y = x W + b with W of shape (in, out)."""

        def __init__(self, n_in, n_out):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(n_in, n_out))
            self.bias = nn.Parameter(torch.zeros(n_out))

        def forward(self, x):
            out = torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight)
            return out.view(*x.shape[:-1], self.weight.shape[1])

    class CausalSelfAttention(nn.Module):
        def __init__(self, channels, heads):
            super().__init__()
            self.heads = heads
            self.c_attn = Conv1D(channels, 3 * channels)
            self.c_proj = Conv1D(channels, channels)

        def forward(self, x):
            B, T, C = x.shape
            hs = C // self.heads
            q, k, v = self.c_attn(x).split(C, dim=2)
            q, k, v = (t.view(B, T, self.heads, hs).transpose(1, 2) for t in (q, k, v))
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
            scores = scores.masked_fill(future, float("-inf"))
            y = F.softmax(scores, dim=-1) @ v
            return self.c_proj(y.transpose(1, 2).reshape(B, T, C))

    class Mlp(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.c_fc = Conv1D(channels, 4 * channels)
            self.c_proj = Conv1D(4 * channels, channels)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self, channels, heads):
            super().__init__()
            self.ln_1 = nn.LayerNorm(channels, eps=1e-5)
            self.attn = CausalSelfAttention(channels, heads)
            self.ln_2 = nn.LayerNorm(channels, eps=1e-5)
            self.mlp = Mlp(channels)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class Transformer(nn.Module):
        def __init__(self, layers, channels, heads, vocab, positions):
            super().__init__()
            self.wte = nn.Embedding(vocab, channels)
            self.wpe = nn.Embedding(positions, channels)
            self.h = nn.ModuleList(Block(channels, heads) for _ in range(layers))
            self.ln_f = nn.LayerNorm(channels, eps=1e-5)

    class Gpt2(nn.Module):
        """Parameter names are Hugging Face's: transformer.wte.weight, ..."""

        def __init__(self, layers, channels, heads, vocab, positions):
            super().__init__()
            self.transformer = Transformer(layers, channels, heads, vocab, positions)

        def forward(self, inputs, targets):
            t = self.transformer
            T = inputs.shape[1]
            x = t.wte(inputs) + t.wpe(torch.arange(T))
            for block in t.h:
                x = block(x)
            logits = t.ln_f(x) @ t.wte.weight.t()  # tied output layer
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))

        def init_gpt2(self, layers):
            """GPT-2's scheme: weights and embeddings N(0, 0.02), the residual
            projections N(0, 0.02/sqrt(2*layers)), biases 0, LayerNorm 1/0."""
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
                elif p.dim() == 2:
                    nn.init.normal_(p, 0.0, 0.02)
                elif ".ln_" in name and name.endswith("weight"):
                    nn.init.ones_(p)
                else:
                    nn.init.zeros_(p)

    return Gpt2


def flops_per_token(layers, channels, vocab, seq):
    """As llm.c and Megatron count them: 6 per matrix parameter (the
    blocks' projections and the tied output layer) plus attention's
    12*L*C*T, forward and backward."""
    matrices = layers * 12 * channels * channels + vocab * channels
    return 6 * matrices + 12 * layers * channels * seq


# --- files ---


def fail(message):
    print(f"gpt2_reference: {message}", file=sys.stderr)
    sys.exit(1)


def read_safetensors(torch, path):
    """{name: float32 tensor} of a safetensors file (F32, F64, F16, BF16)."""
    dtypes = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16,
              "BF16": torch.bfloat16}
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        fail(f"{path}: too short for a safetensors header")
    (header_len,) = struct.unpack("<Q", blob[:8])
    if 8 + header_len > len(blob):
        fail(f"{path}: header length {header_len} runs past the end of the file")
    header = json.loads(blob[8:8 + header_len].decode("utf-8"))
    data = memoryview(blob)[8 + header_len:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        if entry["dtype"] not in dtypes:
            fail(f"{path}: tensor {name} has dtype {entry['dtype']}, not a float type")
        dtype = dtypes[entry["dtype"]]
        if begin == end:
            values = torch.empty(0, dtype=dtype)
        else:
            values = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype)
        tensors[name] = values.to(torch.float32).reshape(entry["shape"])
    return tensors


def gpt2_state_dict(tensors):
    """Hugging Face GPT-2 tensors under this module's names: the
    "transformer." prefix added where a tool left it out; the causal-mask
    buffers of older checkpoints and the tied lm_head dropped."""
    state = {}
    for name, value in tensors.items():
        if name == "lm_head.weight" or re.search(r"(^|\.)h\.\d+\.attn\.(masked_)?bias$", name):
            continue
        state[name if name.startswith("transformer.") else "transformer." + name] = value
    return state


def load_model(torch, weights, heads):
    state = gpt2_state_dict(read_safetensors(torch, weights))
    vocab, channels = state["transformer.wte.weight"].shape
    positions = state["transformer.wpe.weight"].shape[0]
    layers = 1 + max(int(m.group(1)) for m in
                     (re.match(r"transformer\.h\.(\d+)\.", n) for n in state) if m)
    config_path = os.path.join(os.path.dirname(os.path.abspath(weights)), "config.json")
    if not heads and os.path.exists(config_path):
        with open(config_path) as f:
            heads = json.load(f).get("n_head", 0)
    if not heads:
        fail(f"{weights}: give --n-head (no config.json with n_head beside the weights)")
    model = define_model(torch)(layers, channels, heads, vocab, positions)
    model.load_state_dict(state, strict=True)
    return model, dict(layers=layers, channels=channels, heads=heads, vocab=vocab,
                       positions=positions)


def read_llmc_tokens(torch, path):
    """The tokens of an llm.c token file: 256 int32 (magic 20240520,
    version 1, count, ...), then count uint16."""
    import numpy as np

    header = np.fromfile(path, dtype="<i4", count=256)
    if header.size < 256 or header[0] != 20240520 or header[1] != 1:
        fail(f"{path}: not an llm.c token file (magic 20240520, version 1)")
    count = int(header[2])
    tokens = np.fromfile(path, dtype="<u2", offset=256 * 4)
    if tokens.size != count:
        fail(f"{path}: the header counts {count} tokens but the file holds {tokens.size}")
    return torch.from_numpy(tokens.astype(np.int64))


# --- commands ---


def command_eval(args):
    torch = import_torch(args.threads, args.openblas_coretype)
    model, shape = load_model(torch, args.weights, args.n_head)
    model.eval()
    tokens = read_llmc_tokens(torch, args.tokens)
    B, T = args.batch, args.seq
    if T > shape["positions"]:
        fail(f"--seq {T} is longer than the model's {shape['positions']} positions")
    available = (tokens.numel() - 1) // (B * T)
    batches = available if args.batches is None else args.batches
    if batches < 1 or batches > available:
        fail(f"{args.tokens}: {tokens.numel()} tokens hold {available} batches of ({B}, {T}), "
             f"{batches} asked for")
    if int(tokens.max()) >= shape["vocab"]:
        fail(f"{args.tokens}: token {int(tokens.max())} is outside the vocabulary "
             f"({shape['vocab']})")
    losses = []
    with torch.no_grad():
        for n in range(batches):
            window = tokens[n * B * T: n * B * T + B * T + 1]
            inputs = window[:-1].view(B, T)
            targets = window[1:].view(B, T)
            losses.append(float(model(inputs, targets)))
    print(json.dumps({"loss": sum(losses) / len(losses), "batches": batches,
                      "batch_losses": losses, **shape}))


def command_train_bench(args):
    torch = import_torch(args.threads, args.openblas_coretype)
    torch.manual_seed(args.seed)
    L, C, H, V, T, B = args.layers, args.channels, args.heads, args.vocab, args.seq, args.batch
    model = define_model(torch)(L, C, H, V, T)
    model.init_gpt2(L)
    # Matrices and embeddings decay; biases and LayerNorm parameters do not.
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(0.9, 0.999), eps=1e-8, foreach=True)
    batch = torch.randint(V, (B, T + 1), generator=torch.Generator().manual_seed(args.seed))
    inputs, targets = batch[:, :-1].contiguous(), batch[:, 1:].contiguous()

    step_seconds, losses = [], []
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        loss = model(inputs, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        elapsed = time.perf_counter() - start
        losses.append(float(loss))
        if step >= args.warmup:
            step_seconds.append(elapsed)

    ordered = sorted(step_seconds)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    mean = sum(step_seconds) / len(step_seconds)
    flops = flops_per_token(L, C, V, T)
    print(json.dumps({
        "statistic": "median over the timed steps (after warmup)",
        "tokens_per_s": B * T / median,
        "tokens_per_s_mean": B * T / mean,
        "step_ms_median": 1e3 * median,
        "step_ms_mean": 1e3 * mean,
        "step_ms_min": 1e3 * ordered[0],
        "model_tflops": flops * B * T / median / 1e12,
        "flops_per_token": flops,
        "parameters": sum(p.numel() for p in model.parameters()),
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "layers": L, "channels": C, "heads": H, "vocab": V, "seq": T, "batch": B,
        "warmup": args.warmup, "steps": args.steps, "threads": torch.get_num_threads(),
        "torch": torch.__version__, "openblas_core": openblas_core(),
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""),
    }))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--threads", type=int, default=0,
                        help="torch and OpenBLAS threads (0: their defaults)")
    common.add_argument("--openblas-coretype", default="auto",
                        help="OPENBLAS_CORETYPE to load OpenBLAS with: auto (the widest "
                             "kernels this CPU runs), keep (the environment's), or a name")

    ev = commands.add_parser("eval", parents=[common], help="loss of weights on a token file")
    ev.add_argument("--weights", required=True, help="GPT-2 safetensors file")
    ev.add_argument("--tokens", required=True, help="llm.c token file")
    ev.add_argument("--n-head", type=int, default=0,
                    help="attention heads (default: n_head of config.json beside the weights)")
    ev.add_argument("--batch", type=int, required=True)
    ev.add_argument("--seq", type=int, required=True)
    ev.add_argument("--batches", type=int, default=None,
                    help="windows to average over (default: all that fit)")
    ev.set_defaults(run=command_eval)

    tb = commands.add_parser("train-bench", parents=[common],
                             help="tokens/s training a random GPT-2 with AdamW")
    tb.add_argument("--layers", type=int, required=True)
    tb.add_argument("--channels", type=int, required=True)
    tb.add_argument("--heads", type=int, required=True)
    tb.add_argument("--vocab", type=int, required=True,
                    help="rows of the token embedding (pass the padded size to match an "
                         "engine that pads it)")
    tb.add_argument("--seq", type=int, required=True)
    tb.add_argument("--batch", type=int, required=True)
    tb.add_argument("--steps", type=int, required=True, help="timed steps")
    tb.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    tb.add_argument("--lr", type=float, default=1e-4)
    tb.add_argument("--weight-decay", type=float, default=0.1)
    tb.add_argument("--seed", type=int, default=1)
    tb.set_defaults(run=command_train_bench)

    args = parser.parse_args()
    try:
        args.run(args)
    except (OSError, ValueError, KeyError) as e:  # unreadable or malformed input files
        fail(f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    main()
