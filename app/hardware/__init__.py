"""This machine: NVIDIA GPUs (NVML), Apple Silicon (unified memory, Metal), the CPU and RAM -> one HardwareProfile."""
