"""Measured ceilings of the device, once per run: dense GEMM TFLOP/s in bf16 and fp16 and
device-to-device copy bandwidth, next to the datasheet figures they are compared with.

Method (METHOD.md-style): random inputs (zeros run faster), warm-up, then each repetition
between CUDA events, median reported. GEMM: C = A @ B with A, B [n, n], 2*n^3 FLOP. Copy:
``dst.copy_(src)`` of ``copy_bytes`` bytes, counting bytes read plus bytes written (2x).
"""

from __future__ import annotations

import statistics

from attnprof.measure.lock import device_lock

#: Datasheet peaks (dense, no sparsity): GPU name substring -> (bf16/fp16 TFLOP/s, memory TB/s).
#: Sources: NVIDIA H200 datasheet (SXM: 989 TFLOP/s bf16 dense = H100 SXM, 4.8 TB/s HBM3e),
#: NVIDIA H100 datasheet (SXM: 989 TFLOP/s, 3.35 TB/s), NVIDIA A100 datasheet (SXM 80GB: 312 TFLOP/s, 2.039 TB/s).
DATASHEET = {"H200": (989.0, 4.8), "H100": (989.0, 3.35), "A100": (312.0, 2.039)}


def datasheet(gpu_name: str | None) -> dict:
    """Datasheet bf16 dense TFLOP/s and memory TB/s for a GPU name, or {} if unknown."""
    for key, (tflops, tbps) in DATASHEET.items():
        if gpu_name and key in gpu_name:
            return {"datasheet_tflops_bf16": tflops, "datasheet_tb_per_s": tbps, "datasheet_for": key}
    return {}


def _median_ms(fn, repeats: int, warmup: int = 3) -> float:
    import torch

    from attnprof.measure.capture import cuda_event_ms

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    return statistics.median(cuda_event_ms(fn) for _ in range(repeats))


def calibrate(device: str, gpu: dict | None = None, n: int = 8192, copy_bytes: int = 2 << 30, repeats: int = 10) -> dict:
    """Measure the ceilings on ``device`` ('cuda'); on anything else return a record saying
    the calibration was skipped. Keys: gemm_tflops_bf16, gemm_tflops_fp16, copy_tb_per_s,
    gpu_name, method, and the datasheet figures; ``gpu``: the GPU its job assigned
    (:class:`attnprof.measure.gpus.Gpu` as a dict; its UUID names the lock held), recorded as given."""
    if device != "cuda":
        return {"device": device, "skipped": "no GPU: ceilings are measured on CUDA devices only"}
    import torch

    if not torch.cuda.is_available():
        return {"device": device, "skipped": "torch.cuda.is_available() is False"}
    # never beside a capture on its GPU (each would slow the other); on a node of several GPUs, beside the others' captures
    with device_lock(device, (gpu or {}).get("uuid")) as waited_s:
        out = _measure(n, copy_bytes, repeats)
    out["lock_wait_s"] = waited_s
    if gpu:
        out["gpu"] = dict(gpu)
    return out


def _measure(n: int, copy_bytes: int, repeats: int) -> dict:
    import torch

    out = {"device": "cuda", "gpu_name": torch.cuda.get_device_name(), "gemm_n": n, "copy_bytes": copy_bytes, "repeats": repeats,
           "method": "median of CUDA-event timings after 3 warm-ups; random inputs"}
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        operands = [torch.randn(n, n, device="cuda", dtype=dtype, generator=gen) for _ in range(2)]
        ms = _median_ms(lambda: operands[0] @ operands[1], repeats)
        out[f"gemm_tflops_{name}"] = 2 * n**3 / (ms * 1e-3) / 1e12
    src = torch.randint(0, 255, (copy_bytes,), device="cuda", dtype=torch.uint8, generator=gen)
    dst = torch.empty_like(src)
    ms = _median_ms(lambda: dst.copy_(src), repeats)
    out["copy_tb_per_s"] = 2 * copy_bytes / (ms * 1e-3) / 1e12
    out.update(datasheet(out["gpu_name"]))
    return out
