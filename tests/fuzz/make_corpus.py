#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets under tests/fuzz/corpus/.

Run from anywhere: python3 tests/fuzz/make_corpus.py. Inputs that several
values share are laid out as FuzzedDataProvider reads them: strings from the
front (a backslash doubled, ended by a backslash and a newline), the rest of
the bytes after them, and integers and booleans from the back, one byte each,
the first one read last.
"""
import json
import pathlib
import struct

ROOT = pathlib.Path(__file__).resolve().parent
CORPUS = ROOT / "corpus"
JOBS = ROOT.parent.parent / "jobs"


def xxh64(data: bytes, seed: int = 0) -> int:
    p1, p2, p3, p4, p5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                          0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)
    mask = (1 << 64) - 1
    rotl = lambda x, r: ((x << r) | (x >> (64 - r))) & mask
    rnd = lambda acc, lane: (rotl((acc + lane * p2) & mask, 31) * p1) & mask
    i, n = 0, len(data)
    if n >= 32:
        v = [(seed + p1 + p2) & mask, (seed + p2) & mask, seed, (seed - p1) & mask]
        while i + 32 <= n:
            for k in range(4):
                v[k] = rnd(v[k], struct.unpack_from("<Q", data, i + 8 * k)[0])
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & mask
        for k in range(4):
            h = ((h ^ rnd(0, v[k])) * p1 + p4) & mask
    else:
        h = (seed + p5) & mask
    h = (h + n) & mask
    while i + 8 <= n:
        h = (rotl(h ^ rnd(0, struct.unpack_from("<Q", data, i)[0]), 27) * p1 + p4) & mask
        i += 8
    if i + 4 <= n:
        h = (rotl(h ^ (struct.unpack_from("<I", data, i)[0] * p1) & mask, 23) * p2 + p3) & mask
        i += 4
    while i < n:
        h = (rotl(h ^ (data[i] * p5) & mask, 11) * p1) & mask
        i += 1
    h = ((h ^ (h >> 33)) * p2) & mask
    h = ((h ^ (h >> 29)) * p3) & mask
    return h ^ (h >> 32)


def fdp(strings=(), rest=b"", ints=()):
    """An input whose strings, remaining bytes and one-byte integers (in the
    order the target reads them) are the given ones."""
    front = b"".join(s.replace(b"\\", b"\\\\") + b"\\\n" for s in strings)
    return front + rest + bytes(reversed(ints))


def write(corpus, name, data):
    folder = CORPUS / corpus
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def compact(value):
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def deepspeed_config():
    real = (JOBS / "gpt2-medium-ds_config.json").read_bytes()
    write("deepspeed_config", "gpt2-medium-ds_config.json", real)
    write("deepspeed_config", "small.json",
          '{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 8,\n'
          ' "zero_optimization": {"stage": 2}, "fp16": {"enabled": true}}\n')
    write("deepspeed_config", "duplicate_key.json",
          '{"train_batch_size": 16,\n "train_batch_size": 32,\n "wandb": {"enabled": true}}\n')
    write("deepspeed_config", "truncated.json", real[: len(real) // 2])
    write("deepspeed_config", "not_object.json", "[1, 2, 3]\n")


def overrides():
    write("overrides", "zero_and_betas",
          "training.zero_optimization.stage=2\ntraining.optimizer.params.betas=[0.9, 0.99]\n")
    write("overrides", "list_index",
          "training.optimizer.params.betas[1]=0.98\ncluster.hosts[0].slots=4\n")
    write("overrides", "null_and_comment", "model.dropout=#5\ntraining.steps=\nmodel.init_seed=~\n")
    write("overrides", "tensor", "parallelism.tensor=2\nmodel=x\nmodel.num_layers={a: 1}\n")


TWO_HOST_SPEC = b"""name: two-host
cluster:
  runner: openmpi
  device: cuda
  hostfile: hostfile
  topology: {cores_per_host: 64, numa_nodes_per_host: 2, device_memory_gb: 80}
parallelism: {tensor: 4, pipeline: 2}
model:
  {num_layers: 24, hidden_size: 1024, num_attention_heads: 16, vocab_size: 50257, seq_length: 1024}
data: {train: demo}
training: {steps: 100, train_batch_size: 32, train_micro_batch_size_per_gpu: 8}
"""


def plan():
    demo = (JOBS / "demo.yaml").read_bytes()
    write("plan", "demo", fdp([b"", b"", b""], demo, [0]))
    write("plan", "two_host",
          fdp([b"", b"", b"worker-1 slots=8\nworker-2 slots=8\n"], TWO_HOST_SPEC, [0]))
    slurm = TWO_HOST_SPEC.replace(b"runner: openmpi", b"runner: slurm").replace(
        b"  hostfile: hostfile\n", b"")
    write("plan", "slurm", fdp([b"node[01-02]", b"8(x2)", b""], slurm, [1]))
    write("plan", "commbench", fdp([b"", b"", b""], (JOBS / "commbench.yaml").read_bytes(), [0]))


def safetensors_bytes(tensors, metadata=None):
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        offsets = [len(data), len(data) + len(raw)]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": offsets}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def gpt2_tensors(dtype="F32", layers=1, channels=4, vocab=8, positions=4):
    pattern = {"F32": struct.pack("<f", 0.5), "F16": b"\x00\x38", "BF16": b"\x00\x3f"}[dtype]
    c = channels
    shapes = [("wte.weight", [vocab, c]), ("wpe.weight", [positions, c])]
    for i in range(layers):
        shapes += [(f"h.{i}.ln_1.weight", [c]), (f"h.{i}.ln_1.bias", [c]),
                   (f"h.{i}.attn.c_attn.weight", [c, 3 * c]), (f"h.{i}.attn.c_attn.bias", [3 * c]),
                   (f"h.{i}.attn.c_proj.weight", [c, c]), (f"h.{i}.attn.c_proj.bias", [c]),
                   (f"h.{i}.ln_2.weight", [c]), (f"h.{i}.ln_2.bias", [c]),
                   (f"h.{i}.mlp.c_fc.weight", [c, 4 * c]), (f"h.{i}.mlp.c_fc.bias", [4 * c]),
                   (f"h.{i}.mlp.c_proj.weight", [4 * c, c]), (f"h.{i}.mlp.c_proj.bias", [c])]
    shapes += [("ln_f.weight", [c]), ("ln_f.bias", [c])]
    tensors = []
    for name, shape in shapes:
        count = 1
        for d in shape:
            count *= d
        tensors.append(("transformer." + name, dtype, shape, pattern * count))
    return tensors


def safetensors():
    config = compact({"model_type": "gpt2", "n_embd": 4, "n_head": 2, "n_layer": 1,
                      "n_positions": 4, "vocab_size": 8})
    model = safetensors_bytes(gpt2_tensors(), {"format": "pt"})
    # ints in the order read: num_heads (0..8), multiple (1..64), with config.json
    write("safetensors", "gpt2_with_config", fdp([config], model, [0, 7, 1]))
    write("safetensors", "gpt2_heads_given", fdp([b""], model, [2, 0, 0]))
    write("safetensors", "gpt2_f16",
          fdp([config], safetensors_bytes(gpt2_tensors("F16")), [0, 15, 1]))
    write("safetensors", "gpt2_bf16_lm_head",
          fdp([b""], safetensors_bytes(gpt2_tensors("BF16") +
                                       [("lm_head.weight", "BF16", [8, 4], b"\x00\x3f" * 32)]),
              [2, 0, 0]))
    write("safetensors", "gpt2_truncated", fdp([config], model[:-100], [0, 0, 1]))
    write("safetensors", "mixed_dtypes", fdp([b""], safetensors_bytes(
        [("a", "F64", [2], struct.pack("<2d", 1.5, -2.0)),
         ("b", "I32", [1, 2], b"\x01\0\0\0\x02\0\0\0"),
         ("c", "BOOL", [0], b""), ("d", "F32", [], struct.pack("<f", 3.0))]), [0, 0, 0]))


def manifest(shard: bytes):
    return {
        "format_version": 1, "job_id": "demo-20240101-000000-abcd", "spec_hash": "0123456789abcdef",
        "step": 120, "tokens_seen": 491520, "samples_seen": 1920, "attempt": 1,
        "data_parallel": 1, "tensor_parallel": 1, "pipeline_parallel": 1, "zero_stage": 1,
        "total_parameters": 5,
        "data_positions": [{"rank": 0, "position": 960}], "rng_states": {"seed": 1234},
        "scheduler": {"step": 120}, "loss_scaler": None,
        "model": {"num_layers": 4, "hidden_size": 256},
        "created_unix_ms": 1704067200000,
        "shards": [{"rank": 0, "path": "rank_0.bin", "size_bytes": len(shard),
                    "xxh64": "%016x" % xxh64(shard), "begin": 0, "end": 5}],
    }


def manifests():
    # the shard file's bytes, then manifest.json
    shard = b"shard bytes of rank 0"
    valid = manifest(shard)
    write("manifest", "valid", fdp([shard], compact(valid)))
    write("manifest", "format_2", fdp([shard], compact(dict(valid, format_version=2))))
    write("manifest", "newer_version", fdp([shard], compact(dict(valid, format_version=3))))
    write("manifest", "other_step", fdp([shard], compact(dict(valid, step=100))))
    write("manifest", "bad_checksum", fdp([shard + b"!"], compact(valid)))
    gap = dict(valid, total_parameters=10)
    gap["shards"] = valid["shards"] + [{"rank": 1, "path": "sub/rank_1.bin", "size_bytes": 3,
                                        "xxh64": "0" * 16, "begin": 6, "end": 10}]
    write("manifest", "gap", fdp([shard], compact(gap)))
    two = dict(gap)
    two["shards"] = [valid["shards"][0], dict(gap["shards"][1], begin=5)]
    write("manifest", "two_shards", fdp([shard], compact(two)))


def shard_file(header: dict, data: bytes, version: int = 1) -> bytes:
    fields = compact(header)
    text = compact(dict(header, header_xxh64="%016x" % xxh64(fields)))
    prefix = b"DSLSHRD1" + struct.pack("<II", version, len(text)) + text
    prefix += b"\0" * (-len(prefix) % 64)
    return prefix + data


def layout_tensor(name, shape, offset, view=None, dim=0, index=0, parts=1):
    numel = 1
    for d in shape:
        numel *= d
    return {"name": name, "global_shape": shape, "view": view or shape, "dim": dim,
            "index": index, "parts": parts, "offset": offset, "numel": numel // parts}


def shard_header():
    header = {"step": 100, "rank": 1, "ranks": 2, "total_parameters": 10, "begin": 5, "end": 10,
              "optimizer_step": 100}
    floats = struct.pack("<15f", *[i / 4 for i in range(15)])
    # ints in the order read: wrap the header (1) or not (0), then the array
    # and the range read from an accepted shard
    write("shard_header", "wrapped", fdp([compact(header), floats], b"", [1, 1, 2, 2]))
    write("shard_header", "whole_file", fdp([shard_file(header, floats)], b"", [0, 2, 0, 5]))
    write("shard_header", "empty_range", fdp([compact(dict(header, begin=0, end=0, rank=0)), b""],
                                             b"", [1, 0, 0, 0]))
    write("shard_header", "truncated", fdp([shard_file(header, floats[:-4])], b"", [0]))
    write("shard_header", "bad_rank", fdp([compact(dict(header, rank=2))], b"", [1]))
    # format 2: a layout (here a (4, 4) matrix cut by columns across two
    # tensor ranks, then a vector) and typed arrays, each at a multiple of 64
    # bytes
    v2 = dict(header, total_parameters=10, begin=5, end=10,
              layout=[layout_tensor("w", [4, 4], 0, [4, 4], 1, 1, 2),
                      layout_tensor("b", [2], 8)],
              arrays=[{"kind": "param", "dtype": "fp32"}, {"kind": "adam_m", "dtype": "fp32"}])
    data = floats[:20] + b"\0" * 44 + floats[20:40]
    write("shard_header", "v2_wrapped", fdp([compact(v2), data], b"", [1, 0, 0, 5]))
    write("shard_header", "v2_whole", fdp([shard_file(v2, data, 2)], b"", [0, 1, 0, 5]))
    bf16 = dict(v2, arrays=[{"kind": "param", "dtype": "bf16"}])
    write("shard_header", "v2_wrapped_bf16", fdp([compact(bf16), b"\1" * 10], b"", [1, 0, 0, 5]))
    twice = dict(v2, layout=[layout_tensor("w", [4, 4], 0, [4, 4], 1, 1, 2),
                             layout_tensor("w", [2], 8)])
    write("shard_header", "v2_duplicate_names", fdp([compact(twice), data], b"", [1, 0, 0, 5]))


def megatron_idx(sizes, dtype_code=8, token_bytes=2):
    pointers, offset = [], 0
    for size in sizes:
        pointers.append(offset)
        offset += size * token_bytes
    return (b"MMIDIDX\0\0" + struct.pack("<QBQQ", 1, dtype_code, len(sizes), len(sizes) + 1) +
            struct.pack(f"<{len(sizes)}i", *sizes) + struct.pack(f"<{len(sizes)}q", *pointers) +
            struct.pack(f"<{len(sizes) + 1}q", *range(len(sizes) + 1)))


def token_file():
    tokens = list(range(0, 300, 3))
    llmc = struct.pack("<3i", 20240520, 1, len(tokens)) + b"\0" * (1024 - 12) + struct.pack(
        f"<{len(tokens)}H", *tokens)
    # ints in the order read: Megatron (1) or llm.c (0), format (0 auto, 1 llmc, 2 megatron)
    write("token_file", "llmc_auto", fdp([], llmc, [0, 0]))
    write("token_file", "llmc_wrong_count", fdp([], llmc[:-2], [0, 1]))
    sizes = [5, 7]
    write("token_file", "megatron_uint16", fdp([megatron_idx(sizes)],
                                               struct.pack("<12H", *range(100, 112)), [1, 2]))
    write("token_file", "megatron_int32_auto", fdp([megatron_idx(sizes, 4, 4)],
                                                   struct.pack("<12i", *range(12)), [1, 0]))
    write("token_file", "megatron_float", fdp([megatron_idx(sizes, 7, 4)],
                                              struct.pack("<12f", *range(12)), [1, 2]))


def state_json():
    state = {
        "job_id": "demo-20240101-000000-abcd", "name": "demo", "kind": "train", "state": "RUNNING",
        "attempt": 2, "restarts": 1, "world_size": 2, "step": 150, "total_steps": 300,
        "loss": 2.25, "tokens_per_s": 13624.5, "last_checkpoint_step": 100, "reason": "",
        "controller_address": "127.0.0.1:41000", "tls_ca": "", "started_unix_ms": 1704067200000,
        "updated_unix_ms": 1704067260000,
        "ranks": [{"rank": r, "host": "localhost", "pid": 4000 + r, "device": "cpu",
                   "state": "RUNNING", "heartbeat_age_ms": 120, "step": 150,
                   "memory": {"parameters": 26000000, "gradients": 26000000,
                              "optimizer_states": 26000000, "activations": 1000000,
                              "communication_buffers": 4000000, "gradient_workspace_peak": 0,
                              "parameter_workspace_peak": 0},
                   "exit_code": None if r == 0 else 1, "exit_signal": None} for r in range(2)],
        "attempts": [{"attempt": 1, "state": "FAILED", "reason": "rank 1 exited with code 1",
                      "resumed_from_step": 0, "last_step": 120},
                     {"attempt": 2, "state": "RUNNING", "reason": "", "resumed_from_step": 100,
                      "last_step": 150}],
    }
    text = json.dumps(state, indent=2)
    write("state_json", "running.json", text)
    write("state_json", "truncated.json", text[: len(text) // 3])
    write("state_json", "wrong_types.json", json.dumps(
        {"state": 3, "attempt": "2", "step": 1e30, "world_size": 4294967296, "loss": "x",
         "ranks": [1, {"rank": -1, "memory": [], "exit_code": 2147483648}], "attempts": {}}))
    write("state_json", "not_object.json", '["RUNNING"]')


def rank_output():
    mpirun = [b"[1,0]<stdout>:step 1 loss 5.5\n[1,1]<stderr>:warn", b"ing\n",
              b"launcher line\n[1,1]<stderr>:Traceback\n", b"[1,x]<stdout>:bad\n[1,2]<std"]
    # ints in the order read: mpirun tags (1) or srun's (0), tail lines; then
    # each chunk's pipe (1 stdout, 0 stderr)
    write("rank_output", "mpirun", fdp(mpirun, b"", [1, 2, 1, 0, 1, 0]))
    srun = [b"0: step 1\n 1: step 1\n", b"12: error: x\nsrun: error: task 3\n", b"3:no space"]
    write("rank_output", "srun", fdp(srun, b"", [0, 1, 1, 0, 0]))


if __name__ == "__main__":
    deepspeed_config()
    overrides()
    plan()
    safetensors()
    manifests()
    shard_header()
    token_file()
    state_json()
    rank_output()
