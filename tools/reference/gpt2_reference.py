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
  train-steps  trains given weights for S steps on consecutive batches of a
               token file with torch.optim.AdamW and gradient clipping, and
               reports the loss and gradient norm of every step; the check of
               the engine's gradients and optimizer.
  adam-bench   times torch.optim.AdamW steps (foreach) on one tensor of N
               parameters and reports parameters/s; the reference of
               bench/offload_bench's CPU Adam.
  write-foreign
               rewrites GPT-2 safetensors weights the way other tools lay a
               file out (no "transformer." prefix, other tensor order,
               unpadded header, causal-mask buffers, F16/BF16), with json,
               struct and numpy alone; the input of the loader's tests.

Run with Debian's /usr/bin/python3 (python3-torch 1.13, numpy). eval,
train-bench and train-steps print one JSON object on stdout.
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
            future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
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
            x = t.wte(inputs) + t.wpe(torch.arange(T, device=inputs.device))
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


def consecutive_batch(tokens, n, B, T):
    """Batch n of (B, T): the B*T + 1 tokens from n*B*T on, in rows of T,
    targets shifted by one token (the engine's consecutive_batch)."""
    window = tokens[n * B * T: n * B * T + B * T + 1]
    return window[:-1].view(B, T), window[1:].view(B, T)


def check_batches(tokens, path, shape, B, T, batches):
    """Fails unless `batches` consecutive (B, T) batches fit in the tokens
    and every token is inside the model's vocabulary."""
    if T > shape["positions"]:
        fail(f"--seq {T} is longer than the model's {shape['positions']} positions")
    available = (tokens.numel() - 1) // (B * T)
    if batches < 1 or batches > available:
        fail(f"{path}: {tokens.numel()} tokens hold {available} batches of ({B}, {T}), "
             f"{batches} asked for")
    if int(tokens.max()) >= shape["vocab"]:
        fail(f"{path}: token {int(tokens.max())} is outside the vocabulary ({shape['vocab']})")


# --- commands ---


def command_eval(args):
    torch = import_torch(args.threads, args.openblas_coretype)
    model, shape = load_model(torch, args.weights, args.n_head)
    model.eval()
    tokens = read_llmc_tokens(torch, args.tokens)
    B, T = args.batch, args.seq
    batches = (tokens.numel() - 1) // (B * T) if args.batches is None else args.batches
    check_batches(tokens, args.tokens, shape, B, T, batches)
    losses = []
    with torch.no_grad():
        for n in range(batches):
            losses.append(float(model(*consecutive_batch(tokens, n, B, T))))
    print(json.dumps({"loss": sum(losses) / len(losses), "batches": batches,
                      "batch_losses": losses, **shape}))


def command_adam_bench(args):
    torch = import_torch(args.threads, args.openblas_coretype)
    torch.manual_seed(1)
    params = torch.nn.Parameter(torch.randn(args.params) * 0.02)
    params.grad = torch.randn(args.params) * 1e-3
    optimizer = torch.optim.AdamW([params], lr=1e-4, betas=(0.9, 0.999), eps=1e-8,
                                  weight_decay=0.1, foreach=True)
    optimizer.step()  # allocates the moments
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        optimizer.step()
        times.append(time.perf_counter() - start)
    times.sort()
    print(json.dumps({"params_per_s": args.params / times[len(times) // 2]}))


def command_train_bench(args):
    torch = import_torch(args.threads, args.openblas_coretype)
    torch.manual_seed(args.seed)
    L, C, H, V, T, B = args.layers, args.channels, args.heads, args.vocab, args.seq, args.batch
    model = define_model(torch)(L, C, H, V, T)
    model.init_gpt2(L)
    device = torch.device(args.device)
    model.to(device)
    # Matrices and embeddings decay; biases and LayerNorm parameters do not.
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(0.9, 0.999), eps=1e-8, foreach=True)
    batch = torch.randint(V, (B, T + 1), generator=torch.Generator().manual_seed(args.seed))
    inputs = batch[:, :-1].contiguous().to(device)
    targets = batch[:, 1:].contiguous().to(device)
    # bf16 as mixed-precision training runs it on a GPU: autocast's bf16
    # products, fp32 weights and optimizer.
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.bf16)

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize()

    step_seconds, losses = [], []
    for step in range(args.warmup + args.steps):
        synchronize()
        start = time.perf_counter()
        with autocast:
            loss = model(inputs, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize()
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


def command_train_steps(args):
    torch = import_torch(args.threads, args.openblas_coretype)
    model, shape = load_model(torch, args.weights, args.n_head)
    for name, p in model.named_parameters():
        if p.dtype != torch.float32:
            fail(f"parameter {name} is {p.dtype}, not float32")
    tokens = read_llmc_tokens(torch, args.tokens)
    B, T = args.batch, args.seq
    check_batches(tokens, args.tokens, shape, B, T, args.steps)
    # wte is one Parameter used twice (embedding and tied output layer), so
    # autograd sums both gradients into it and it sits in one group once.
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=tuple(args.betas), eps=args.eps, foreach=False)
    losses, grad_norms = [], []
    for step in range(args.steps):
        optimizer.zero_grad(set_to_none=True)
        loss = model(*consecutive_batch(tokens, step, B, T))
        loss.backward()
        # Reported in double, before clipping; clip_grad_norm_ below uses its
        # own float32 norm, as a PyTorch training loop would.
        grad_norms.append(math.sqrt(sum(float(p.grad.double().square().sum())
                                        for p in model.parameters())))
        losses.append(float(loss))
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
    print(json.dumps({"losses": losses, "grad_norms": grad_norms, "steps": args.steps,
                      "threads": torch.get_num_threads(), **shape}))


# --- write-foreign: json, struct and numpy only, independent of torch and of
# dslaunch's writer ---

SAFETENSORS_NUMPY = {"F32": "<f4", "F64": "<f8", "F16": "<f2"}


def read_safetensors_numpy(path):
    """{name: float32 array} of a safetensors file (F32, F64, F16, BF16)."""
    import numpy as np

    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        fail(f"{path}: too short for a safetensors header")
    (header_len,) = struct.unpack("<Q", blob[:8])
    if 8 + header_len > len(blob):
        fail(f"{path}: header length {header_len} runs past the end of the file")
    header = json.loads(blob[8:8 + header_len].decode("utf-8"))
    data = blob[8 + header_len:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = data[begin:end]
        if entry["dtype"] == "BF16":
            values = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif entry["dtype"] in SAFETENSORS_NUMPY:
            values = np.frombuffer(raw, dtype=SAFETENSORS_NUMPY[entry["dtype"]])
        else:
            fail(f"{path}: tensor {name} has dtype {entry['dtype']}, not a float type")
        tensors[name] = values.astype(np.float32).reshape(entry["shape"])
    return tensors


def encode_floats(name, values, dtype):
    """(safetensors dtype, little-endian bytes) of float32 `values` in
    `dtype` (f32, f16 or bf16), rounded to nearest even."""
    import numpy as np

    values = np.ascontiguousarray(values, dtype=np.float32)
    if dtype == "f32":
        return "F32", values.astype("<f4").tobytes()
    if dtype == "f16":
        half = values.astype("<f2")
        if not np.isfinite(half[np.isfinite(values)]).all():
            fail(f"tensor {name} has values beyond F16's range (65504)")
        return "F16", half.tobytes()
    bits = values.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    rounded[np.isnan(values)] = 0x7FC0
    return "BF16", rounded.astype("<u2").tobytes()


def command_write_foreign(args):
    import numpy as np

    tensors = {(n[len("transformer."):] if n.startswith("transformer.") else n): v
               for n, v in read_safetensors_numpy(args.weights).items()
               if n != "lm_head.weight" and not re.search(r"(^|\.)h\.\d+\.attn\.(masked_)?bias$", n)}
    for needed in ("wte.weight", "wpe.weight", "h.0.ln_1.weight"):
        if needed not in tensors:
            fail(f"{args.weights}: no tensor {needed} (or transformer.{needed}); not GPT-2 weights")
    layers = 1 + max(int(m.group(1)) for m in (re.match(r"h\.(\d+)\.", n) for n in tensors) if m)
    positions = tensors["wpe.weight"].shape[0]

    stored = {name: encode_floats(name, values, args.dtype) + (list(values.shape),)
              for name, values in tensors.items()}
    if args.lm_head:
        stored["lm_head.weight"] = stored["wte.weight"]
    # GPT2Attention's causal mask and masked_bias buffers, which older
    # transformers versions saved and the released GPT-2 checkpoints hold;
    # float32 whatever the weights' dtype.
    mask = np.tril(np.ones((positions, positions), dtype="<f4"))
    for layer in range(layers):
        stored[f"h.{layer}.attn.bias"] = ("F32", mask.tobytes(), [1, 1, positions, positions])
        stored[f"h.{layer}.attn.masked_bias"] = ("F32", np.array(-1e4, "<f4").tobytes(), [])

    # Data in name order, not by descending dtype alignment as the
    # safetensors library stores it (F32 masks between F16 tensors); header
    # entries in the reverse order and the metadata last.
    header, offset = {}, 0
    for name in sorted(stored):
        dtype, raw, shape = stored[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    header = {name: header[name] for name in sorted(header, reverse=True)}
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    # Unpadded, and one space longer when it happens to be a multiple of 8,
    # so the tensors start unaligned: the format does not require alignment.
    if len(text) % 8 == 0:
        text += b" "
    partial = args.out + ".partial"
    with open(partial, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in sorted(stored):
            f.write(stored[name][1])
    os.replace(partial, args.out)


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
    tb.add_argument("--device", default="cpu", help="cpu, or cuda for the first GPU")
    tb.add_argument("--bf16", action="store_true", help="bf16 autocast around the forward pass")
    tb.set_defaults(run=command_train_bench)

    ab = commands.add_parser("adam-bench", parents=[common],
                             help="parameters/s of torch.optim.AdamW steps")
    ab.add_argument("--params", type=int, required=True)
    ab.add_argument("--steps", type=int, default=3, help="timed steps (median reported)")
    ab.set_defaults(run=command_adam_bench)

    ts = commands.add_parser("train-steps", parents=[common],
                             help="losses and gradient norms training weights with AdamW")
    ts.add_argument("--weights", required=True, help="initial GPT-2 safetensors weights")
    ts.add_argument("--tokens", required=True,
                    help="llm.c token file; step s trains on consecutive batch s")
    ts.add_argument("--n-head", type=int, default=0,
                    help="attention heads (default: n_head of config.json beside the weights)")
    ts.add_argument("--batch", type=int, required=True)
    ts.add_argument("--seq", type=int, required=True)
    ts.add_argument("--steps", type=int, required=True)
    ts.add_argument("--lr", type=float, required=True, help="constant learning rate")
    ts.add_argument("--betas", type=float, nargs=2, default=[0.9, 0.999], metavar=("B1", "B2"))
    ts.add_argument("--eps", type=float, default=1e-8)
    ts.add_argument("--weight-decay", type=float, default=0.0,
                    help="on matrices and embeddings; biases and LayerNorm never decay")
    ts.add_argument("--clip", type=float, default=0.0,
                    help="max global gradient norm (clip_grad_norm_); 0: no clipping")
    ts.set_defaults(run=command_train_steps)

    wf = commands.add_parser("write-foreign",
                             help="rewrite GPT-2 safetensors as other tools lay them out")
    wf.add_argument("--weights", required=True, help="GPT-2 safetensors file to read")
    wf.add_argument("--out", required=True, help="safetensors file to write")
    wf.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32",
                    help="dtype of the model's tensors (the mask buffers stay F32)")
    wf.add_argument("--lm-head", action="store_true",
                    help="also store lm_head.weight, a copy of wte.weight")
    wf.set_defaults(run=command_write_foreign)

    args = parser.parse_args()
    try:
        args.run(args)
    except (OSError, ValueError, KeyError) as e:  # unreadable or malformed input files
        fail(f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    main()
