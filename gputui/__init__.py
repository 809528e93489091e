"""gputui: a terminal monitor and analyzer for NVIDIA GPUs and the PyTorch jobs on them."""

__version__ = "0.1.0"
