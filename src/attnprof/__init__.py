"""attnprof: profile PyTorch attention variants with torch.profiler and report what the traces show."""

__version__ = "0.1.0"
