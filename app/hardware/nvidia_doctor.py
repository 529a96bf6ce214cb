"""The GPU doctor for NVIDIA: why NVML failed, in words a user can act on, and whether a GPU is there at all.

A laptop without an NVIDIA GPU has no driver, and that is fine: it is said neutrally. The same missing library on
a machine whose PCI bus shows an NVIDIA display controller is a real problem, and is said so.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from pathlib import Path

import pynvml

from app.hardware.profile import GPUProblem

log = logging.getLogger("modeldeck.hardware")

BACKEND = "nvidia"
PCI_DEVICES = Path("/sys/bus/pci/devices")
DEV_NVIDIA0 = Path("/dev/nvidia0")
NVIDIA_PCI_VENDOR = 0x10DE
PCI_CLASS_DISPLAY = 0x03  # VGA and 3D controllers; NVSwitches (0x0680) and HDMI audio (0x0403) are not GPUs

LIBRARY = "nvml.dll" if sys.platform == "win32" else "libnvidia-ml.so.1"
CONTAINER_HINT = (
    "inside a container, start it with --gpus all (Docker) or the NVIDIA device plugin (Kubernetes), "
    "with the NVIDIA Container Toolkit installed on the host"
)

# NVML error code -> (problem, advice). One row per failure a user can do something about; anything else gets
# the fallback below, which quotes NVML's own message.
NVML_ADVICE: Mapping[int, tuple[str, str]] = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: (
        f"No NVIDIA driver is installed ({LIBRARY} was not found).",
        "Nothing to fix on a machine without an NVIDIA GPU: models run on the CPU. If this machine has one, "
        f"install the NVIDIA driver; {CONTAINER_HINT}.",
    ),
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: (
        "The NVIDIA driver is installed but its kernel module is not loaded.",
        "Reboot. If that does not help, run `sudo modprobe nvidia` and read `dmesg` for the reason; with Secure "
        "Boot on, the module must be signed (enrol the driver's key) or Secure Boot turned off.",
    ),
    pynvml.NVML_ERROR_NO_PERMISSION: (
        "This user is not allowed to use the NVIDIA GPU.",
        "Give this user access to /dev/nvidia* (often by joining the group that owns them, such as `video`); "
        f"{CONTAINER_HINT}.",
    ),
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        "The NVIDIA driver library and the loaded kernel module are different versions.",
        "The driver was updated without a reboot: reboot to load the new kernel module. In a container, do not "
        f"ship {LIBRARY} in the image; let the NVIDIA Container Toolkit mount the host's.",
    ),
    pynvml.NVML_ERROR_GPU_IS_LOST: (
        "An NVIDIA GPU stopped responding (it fell off the bus).",
        "Reboot. If it happens again, check the GPU's power cables, seating and temperature, and `dmesg` for "
        "Xid errors.",
    ),
    pynvml.NVML_ERROR_RESET_REQUIRED: (
        "An NVIDIA GPU must be reset before it can be used.",
        "Stop every program using it and run `sudo nvidia-smi --gpu-reset`, or reboot.",
    ),
    pynvml.NVML_ERROR_GPU_NOT_FOUND: (
        "The NVIDIA driver lost track of a GPU it was given.",
        "Check that the GPU shows in `nvidia-smi`; reboot if it does not. In a container, check that "
        "NVIDIA_VISIBLE_DEVICES names GPUs that exist.",
    ),
    pynvml.NVML_ERROR_UNINITIALIZED: (
        "NVML was asked about the GPU before it was initialized.",
        "This is a ModelDeck bug: please report it with the output of `modeldeck hw --json`.",
    ),
    pynvml.NVML_ERROR_TIMEOUT: (
        "The NVIDIA driver did not answer in time.",
        "The GPU may be resetting or hung: retry in a minute, then reboot if it persists. Persistence mode "
        "(`sudo nvidia-smi -pm 1`) avoids a slow driver start on every use.",
    ),
    pynvml.NVML_ERROR_INSUFFICIENT_POWER: (
        "An NVIDIA GPU is not getting enough external power.",
        "Connect every PCIe power connector of the GPU and check that the power supply is large enough.",
    ),
    pynvml.NVML_ERROR_IRQ_ISSUE: (
        "The NVIDIA driver could not set up the GPU's interrupts.",
        "Reboot and read `dmesg`; in a virtual machine, check the GPU passthrough settings.",
    ),
    pynvml.NVML_ERROR_CORRUPTED_INFOROM: (
        "An NVIDIA GPU's InfoROM (its on-board configuration memory) is corrupted.",
        "The GPU may misbehave: `nvidia-smi -q` shows the InfoROM state; ask the vendor about a repair.",
    ),
    pynvml.NVML_ERROR_OPERATING_SYSTEM: (
        "The operating system blocked access to the NVIDIA driver.",
        "A security policy (SELinux, AppArmor, a container's seccomp or device rules) forbids /dev/nvidia*: "
        "the system log names the rule to relax.",
    ),
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: (
        "The NVIDIA driver is too old for ModelDeck's NVML bindings.",
        "Update the NVIDIA driver to a current release.",
    ),
    pynvml.NVML_ERROR_MEMORY: (
        "The NVIDIA driver ran out of system memory while starting.",
        "Close some programs to free memory and try again.",
    ),
}

# A library that is missing while the PCI bus shows an NVIDIA GPU: the driver is missing for a GPU that is there.
MISSING_DRIVER_FOR_PRESENT_GPU = (
    f"An NVIDIA GPU is present but its driver is missing ({LIBRARY} was not found).",
    f"Install the NVIDIA driver for this GPU and reboot; {CONTAINER_HINT}, so the driver's libraries are mounted in.",
)

NO_DEVICES = (
    "The NVIDIA driver is installed but reports no GPU.",
    f"Nothing to fix if this machine has no NVIDIA GPU. Otherwise check that it shows in `lspci`; {CONTAINER_HINT} "
    "and check that NVIDIA_VISIBLE_DEVICES is not `none` or `void`.",
)

FALLBACK_ADVICE = "Run `nvidia-smi`: if it fails too, reinstall the NVIDIA driver and reboot."


def nvml_error_code(error: pynvml.NVMLError) -> int:
    return int(error.value)


def explain_nvml_error(
    error: pynvml.NVMLError, device_present: bool | None = None, gpu_index: int | None = None
) -> GPUProblem:
    """Turn an NVML error into a GPUProblem; `device_present` is the PCI evidence of an NVIDIA GPU."""
    code = nvml_error_code(error)
    if code != pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        problem, advice = NVML_ADVICE.get(code, (f"NVML failed: {error} (NVML error {code}).", FALLBACK_ADVICE))
        prefix = "" if gpu_index is None else f"GPU {gpu_index}: "
        return GPUProblem(BACKEND, prefix + problem, advice, "problem", device_present)
    if device_present:
        return GPUProblem(BACKEND, *MISSING_DRIVER_FOR_PRESENT_GPU, "problem", device_present)
    # No driver and no sign of an NVIDIA GPU (or no way to look, on Windows): the usual laptop, said neutrally.
    return GPUProblem(BACKEND, *NVML_ADVICE[code], "note", device_present)


def no_devices_problem(device_present: bool | None) -> GPUProblem:
    """A working driver that lists no GPU: a note without one on the PCI bus, a problem with one."""
    return GPUProblem(BACKEND, *NO_DEVICES, "problem" if device_present else "note", device_present)


def _is_nvidia_gpu(device: Path) -> bool:
    try:
        vendor = int((device / "vendor").read_text().strip(), 16)
        device_class = int((device / "class").read_text().strip(), 16)
    except (OSError, ValueError):
        return False  # a device that vanished or a file we cannot parse is no evidence either way
    return vendor == NVIDIA_PCI_VENDOR and device_class >> 16 == PCI_CLASS_DISPLAY


def nvidia_device_present(pci_devices: Path = PCI_DEVICES, dev_node: Path = DEV_NVIDIA0) -> bool | None:
    """Whether this machine shows an NVIDIA GPU without asking the driver: None where the system cannot tell.

    Linux lists every PCI device in sysfs, containers included (it is how a container without `--gpus` still
    sees that the host has a GPU). Elsewhere there is no cheap look, so the answer is None.
    """
    if dev_node.exists():
        return True
    if not pci_devices.is_dir():
        return None
    try:
        return any(_is_nvidia_gpu(device) for device in pci_devices.iterdir())
    except OSError as exc:
        log.warning("cannot list %s: %s", pci_devices, exc)
        return None
