"""Theoretical occupancy of a kernel launch: the CUDA Occupancy Calculator's arithmetic.

Source: NVIDIA's CUDA Occupancy Calculator (the spreadsheet shipped with the CUDA toolkit, now
the occupancy calculator of Nsight Compute) and the CUDA C++ Programming Guide, "Hardware
Multithreading" and "Compute Capabilities" (technical specifications per compute capability).
Units: registers per thread, threads per block, bytes of shared memory per block; the GPU's
limits come from the trace's ``deviceProperties`` (per SM: ``regsPerMultiprocessor`` registers,
``maxThreadsPerMultiprocessor`` threads, ``sharedMemPerMultiprocessor`` bytes; ``warpSize``
threads). The result is a fraction (0-1) of the SM's maximum resident warps.
"""

from __future__ import annotations

import math

#: Registers are allocated per warp in units of this many registers (compute capability 8.x and 9.0).
REGISTER_ALLOCATION_UNIT = 256
#: Most resident blocks per SM (compute capability 8.0 and 9.0; 8.6 and 8.9 allow fewer).
MAX_BLOCKS_PER_SM = 32


def block_threads(block) -> int:
    """Threads per block of a kernel table's ``block`` ("128x1x1": x, y and z threads); 0 where it is not recorded."""
    return math.prod(int(x) for x in block.split("x")) if isinstance(block, str) and block else 0


def theoretical_occupancy(registers_per_thread: float, threads_per_block: int, shared_memory_bytes: float, props: dict) -> float | None:
    """Occupancy limit (fraction of max resident warps) from registers, shared memory and
    warps, as in NVIDIA's CUDA Occupancy Calculator: registers are allocated per warp in
    units of 256 (:data:`REGISTER_ALLOCATION_UNIT`), at most :data:`MAX_BLOCKS_PER_SM` blocks
    reside on an SM; limits from ``props`` (the trace's deviceProperties: regsPerMultiprocessor,
    maxThreadsPerMultiprocessor, sharedMemPerMultiprocessor, warpSize). ``registers_per_thread``
    in registers, ``threads_per_block`` in threads, ``shared_memory_bytes`` in bytes per block
    (0 or None: no shared-memory limit). None if a limit or the launch is unknown."""
    regs_sm = props.get("regsPerMultiprocessor")
    threads_sm = props.get("maxThreadsPerMultiprocessor")
    warp = props.get("warpSize", 32)
    if not (regs_sm and threads_sm and registers_per_thread and threads_per_block):
        return None
    warps_block = math.ceil(threads_per_block / warp)
    regs_warp = math.ceil(registers_per_thread * warp / REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
    limits = [regs_sm // (regs_warp * warps_block), (threads_sm // warp) // warps_block, MAX_BLOCKS_PER_SM]
    smem_sm = props.get("sharedMemPerMultiprocessor")
    if smem_sm and shared_memory_bytes:
        limits.append(int(smem_sm // shared_memory_bytes))
    return min(limits) * warps_block / (threads_sm // warp)
