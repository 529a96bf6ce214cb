"""Hardware detection: the real detectors on this machine, the GPU doctor's words, parsers fed real-shaped output,
recorded profiles of machines we do not have, and `modeldeck hw` as a user runs it."""

from __future__ import annotations

import ctypes
import json
import logging
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pynvml
import pytest

from app.hardware.apple import apple_gpu, chip_bandwidth, chip_name, metal_available
from app.hardware.bandwidth import cached_memory_bandwidth
from app.hardware.cpu import FEATURE_ORDER, detect_cpu, normalize_architecture, parse_macos_features, parse_proc_cpuinfo
from app.hardware.detect import detect_hardware, disk_free
from app.hardware.detector import GPUDetection
from app.hardware.nvidia import cuda_version_text, detect_nvidia, memory_bandwidth
from app.hardware.nvidia_doctor import (
    FALLBACK_ADVICE,
    NVML_ADVICE,
    explain_nvml_error,
    no_devices_problem,
    nvidia_device_present,
)
from app.hardware.profile import GPUProblem, HardwareProfile
from app.hardware.summary import format_profile
from app.hardware.sysctl import parse_sysctl
from tests.support.service import REPO

FIXTURES = REPO / "tests" / "fixtures" / "hardware"
GB = 1e9


def load_fixture(name: str) -> HardwareProfile:
    return HardwareProfile.from_dict(json.loads((FIXTURES / f"{name}.json").read_text()))


def nvml_library_loads() -> bool:
    """Asked of the dynamic loader directly, not of the code under test."""
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


# --- this machine ------------------------------------------------------------------------------------------


def test_cpu_of_this_machine() -> None:
    cpu = detect_cpu()
    assert cpu.logical_cores == psutil.cpu_count(logical=True)
    assert cpu.physical_cores == psutil.cpu_count(logical=False)
    assert cpu.architecture == normalize_architecture(platform.machine())
    assert set(cpu.features) <= set(FEATURE_ORDER)
    if sys.platform == "linux" and cpu.architecture == "x86_64":
        assert cpu.features, "every x86_64 Linux CPU reports at least SSE3 in /proc/cpuinfo"
        assert cpu.model


def test_profile_of_this_machine(tmp_path: Path) -> None:
    models_dir = tmp_path / "not" / "created" / "models"
    started = time.perf_counter()
    profile = detect_hardware(models_dir)
    elapsed = time.perf_counter() - started
    assert elapsed < 3, f"detection took {elapsed:.2f} s"  # about 0.05 s here; generous for a loaded machine
    assert 0 < profile.ram_available <= profile.ram_total
    assert profile.disk_free is not None and profile.disk_free > 0
    assert profile.models_dir == str(models_dir) and not models_dir.exists()
    assert profile.os
    assert HardwareProfile.from_dict(json.loads(profile.to_json())) == profile


@pytest.mark.skipif(sys.platform != "linux", reason="NVML's library name and the PCI evidence are Linux's here")
def test_real_nvml_finds_the_gpus_or_says_the_driver_is_missing() -> None:
    """The real detector: on a GPU machine it lists the GPUs; without a driver it explains, neutrally if no GPU."""
    detection = detect_nvidia()
    present = nvidia_device_present()
    if not nvml_library_loads():
        assert detection.gpus == ()
        [problem] = detection.problems
        assert problem.backend == "nvidia" and problem.device_present == present
        assert "libnvidia-ml.so.1 was not found" in problem.problem
        assert "--gpus all" in problem.advice and "NVIDIA Container Toolkit" in problem.advice
        if present:
            assert "present but its driver is missing" in problem.problem and problem.severity == "problem"
        else:
            assert problem.problem.startswith("No NVIDIA driver is installed") and problem.severity == "note"
            assert problem.advice.startswith("Nothing to fix on a machine without an NVIDIA GPU")
    elif present:
        assert detection.gpus, detection.problems
        assert detection.driver_version and re.fullmatch(r"\d+\.\d+", detection.cuda_version or "")
        for gpu in detection.gpus:
            assert gpu.vendor == "nvidia" and gpu.name and gpu.uuid
            assert gpu.memory_free is not None and 0 < gpu.memory_free <= gpu.memory_total
            assert gpu.compute_capability is not None and gpu.compute_capability >= (3, 0)


# --- the GPU doctor ----------------------------------------------------------------------------------------


def test_every_mapped_nvml_error_gets_its_own_advice() -> None:
    named_in_the_issue = {
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED, pynvml.NVML_ERROR_NO_PERMISSION,
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_UNINITIALIZED,
        pynvml.NVML_ERROR_TIMEOUT,
    }  # fmt: skip
    assert named_in_the_issue <= set(NVML_ADVICE)
    problems = []
    for code in NVML_ADVICE:
        error = pynvml.NVMLError(code)
        assert type(error) is not pynvml.NVMLError, "pynvml maps each code to its own subclass"
        problem = explain_nvml_error(error, device_present=None)
        assert problem.backend == "nvidia"
        assert problem.advice != FALLBACK_ADVICE and not problem.problem.startswith("NVML failed")
        assert len(problem.advice) > 30
        assert problem.severity == ("note" if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND else "problem")
        problems.append(problem)
    problems.append(explain_nvml_error(pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND), device_present=True))
    problems.append(no_devices_problem(device_present=None))
    assert len({p.problem for p in problems}) == len(problems)
    assert len({p.advice for p in problems}) == len(problems)


def test_unmapped_nvml_error_quotes_nvml() -> None:
    error = pynvml.NVMLError(pynvml.NVML_ERROR_IN_USE)
    problem = explain_nvml_error(error)
    assert str(error) in problem.problem and f"NVML error {pynvml.NVML_ERROR_IN_USE}" in problem.problem
    assert problem.advice == FALLBACK_ADVICE


def test_missing_library_with_a_gpu_present_is_a_missing_driver() -> None:
    missing = pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    no_gpu = explain_nvml_error(missing, device_present=False)
    with_gpu = explain_nvml_error(missing, device_present=True)
    assert "present but its driver is missing" in with_gpu.problem and "Install the NVIDIA driver" in with_gpu.advice
    assert no_gpu.problem.startswith("No NVIDIA driver is installed") and no_gpu.severity == "note"
    assert with_gpu.severity == "problem" and with_gpu.device_present
    assert explain_nvml_error(missing, device_present=None).severity == "note", "Windows cannot tell: neutral"
    assert no_devices_problem(device_present=False).severity == "note"
    assert no_devices_problem(device_present=True).severity == "problem"
    lost = explain_nvml_error(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST), device_present=True, gpu_index=3)
    assert lost.problem.startswith("GPU 3: ")


def _pci_device(root: Path, name: str, vendor: str, device_class: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "vendor").write_text(f"{vendor}\n")
    (root / name / "class").write_text(f"{device_class}\n")


def test_pci_evidence_of_an_nvidia_gpu(tmp_path: Path) -> None:
    pci, dev = tmp_path / "devices", tmp_path / "nvidia0"
    assert nvidia_device_present(pci, dev) is None, "no sysfs: the system cannot tell"
    _pci_device(pci, "0000:00:02.0", "0x8086", "0x030000")  # an Intel iGPU
    _pci_device(pci, "0000:05:00.0", "0x10de", "0x068000")  # an NVSwitch: NVIDIA, but not a GPU
    assert nvidia_device_present(pci, dev) is False
    _pci_device(pci, "0000:41:00.0", "0x10de", "0x030200")  # a 3D controller (A100, H100)
    assert nvidia_device_present(pci, dev) is True
    dev.touch()
    assert nvidia_device_present(tmp_path / "absent", dev) is True


def test_nvml_numbers() -> None:
    assert cuda_version_text(12040) == "12.4"
    assert cuda_version_text(11080) == "11.8"
    assert cuda_version_text(13000) == "13.0"
    assert memory_bandwidth(384, 10501) == pytest.approx(1008 * GB, rel=1e-3)  # RTX 4090
    assert memory_bandwidth(5120, 1593) == pytest.approx(2039 * GB, rel=1e-3)  # A100-SXM4-80GB
    assert memory_bandwidth(None, 1593) is None
    assert memory_bandwidth(5120, 0) is None


# --- parsers on output as the systems print it ------------------------------------------------------------

GRAVITON3_CPUINFO = """\
processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc \
dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg dcpodp svei8mm svebf16 i8mm \
bf16 dgh rng
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd40
CPU revision\t: 1
"""

XEON_CPUINFO = """\
processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss \
ht syscall nx pdpe1gb rdtscp lm constant_tsc pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt \
aes xsave avx f16c rdrand hypervisor lahf_lm abm 3dnowprefetch avx_vnni avx2 bmi2 avx512f avx512dq avx512bw \
avx512vl avx512_bf16 avx512_vnni amx_bf16 amx_tile amx_int8

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu
"""

M2_MAX_SYSCTL = """\
machdep.cpu.brand_string: Apple M2 Max
hw.memsize: 34359738368
hw.physicalcpu: 12
hw.optional.arm.FEAT_FlagM: 1
hw.optional.arm.FEAT_FP16: 1
hw.optional.arm.FEAT_DotProd: 1
hw.optional.arm.FEAT_I8MM: 1
hw.optional.arm.FEAT_BF16: 1
hw.optional.arm.FEAT_SME: 0
hw.optional.AdvSIMD: 1
hw.optional.neon: 1
hw.optional.neon_hpfp: 1
hw.optional.neon_fp16: 1
hw.optional.floatingpoint: 1
hw.optional.arm64: 1
"""

INTEL_MAC_SYSCTL = """\
machdep.cpu.brand_string: Intel(R) Core(TM) i9-9880H CPU @ 2.30GHz
hw.memsize: 17179869184
hw.physicalcpu: 8
hw.optional.sse3: 1
hw.optional.supplementalsse3: 1
hw.optional.sse4_1: 1
hw.optional.sse4_2: 1
hw.optional.avx1_0: 1
hw.optional.f16c: 1
hw.optional.fma: 1
hw.optional.avx2_0: 1
hw.optional.avx512f: 0
"""


def test_proc_cpuinfo_x86_and_arm() -> None:
    model, features = parse_proc_cpuinfo(XEON_CPUINFO)
    assert model == "Intel(R) Xeon(R) Platinum 8480+"
    assert features == (
        "sse3", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni",
        "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8",
    )  # fmt: skip
    model, features = parse_proc_cpuinfo(GRAVITON3_CPUINFO)
    assert model is None, "arm kernels print part numbers, not a name: unknown, not guessed"
    assert features == ("neon", "fp16", "dotprod", "i8mm", "bf16", "sve")


def test_architecture_names() -> None:
    assert [normalize_architecture(m) for m in ("x86_64", "AMD64", "aarch64", "arm64", "riscv64")] == [
        "x86_64", "x86_64", "arm64", "arm64", "riscv64"
    ]  # fmt: skip


def test_macos_cpu_features() -> None:
    assert parse_macos_features(parse_sysctl(M2_MAX_SYSCTL)) == ("neon", "fp16", "dotprod", "i8mm", "bf16")
    assert parse_macos_features(parse_sysctl(INTEL_MAC_SYSCTL)) == (
        "sse3", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c"
    )  # fmt: skip


def test_apple_silicon_gpu_from_sysctl() -> None:
    detection = apple_gpu(parse_sysctl(M2_MAX_SYSCTL), "14.5")
    [gpu] = detection.gpus
    assert (gpu.vendor, gpu.name, gpu.index) == ("apple", "Apple M2 Max", 0)
    assert gpu.memory_total == 32 * 2**30 and gpu.memory_free is None
    assert gpu.memory_bandwidth == 400 * GB
    assert detection.unified_memory and detection.metal and not detection.problems
    assert not apple_gpu(parse_sysctl(M2_MAX_SYSCTL), "11.7.10").metal
    assert apple_gpu(parse_sysctl(INTEL_MAC_SYSCTL), "13.6") == GPUDetection()


def test_apple_chip_table() -> None:
    assert chip_name("Apple M4 Pro") == "M4 Pro" and chip_name("Intel(R) Core(TM) i7") is None
    assert chip_bandwidth("M1", None) == 68.25 * GB
    assert chip_bandwidth("M4 Max", 16) == 546 * GB and chip_bandwidth("M4 Max", 14) == 410 * GB
    assert chip_bandwidth("M3 Max", 16) == 400 * GB and chip_bandwidth("M3 Max", 14) == 300 * GB
    assert chip_bandwidth("M3 Max", None) is None, "two bins, no core count: unknown"
    assert chip_bandwidth("M9 Hyper", 64) is None
    assert metal_available("12.0") and not metal_available("11.7") and not metal_available("")


# --- detection as a whole ----------------------------------------------------------------------------------


def test_disk_free_asks_the_nearest_existing_parent(tmp_path: Path) -> None:
    free = disk_free(tmp_path / "a" / "b" / "c")
    assert free is not None and free > 0
    assert not (tmp_path / "a").exists()


def _broken_detector() -> GPUDetection:
    raise ValueError("unexpected driver answer")


def test_a_detector_bug_becomes_a_visible_problem(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="modeldeck.hardware"):
        profile = detect_hardware(tmp_path, detectors=(("broken", _broken_detector),))
    [problem] = profile.gpu_problems
    assert problem.backend == "broken" and "unexpected driver answer" in problem.problem
    assert "ModelDeck bug" in problem.advice
    assert "Traceback" in caplog.text


# --- recorded machines -------------------------------------------------------------------------------------

FIXTURE_NAMES = ("rtx4090_24gb", "a100_80gb_x2", "h200", "m2max_32gb", "laptop_8core_16gb")


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_loads_and_round_trips(name: str) -> None:
    raw = json.loads((FIXTURES / f"{name}.json").read_text())
    profile = HardwareProfile.from_dict(raw)
    assert json.loads(profile.to_json()) == raw, "the file holds exactly what the profile writes"
    assert HardwareProfile.from_dict(json.loads(profile.to_json())) == profile
    assert 0 < profile.ram_available < profile.ram_total
    for gpu in profile.gpus:
        assert gpu.memory_free is None or 0 < gpu.memory_free < gpu.memory_total


def test_fixture_set_is_complete() -> None:
    assert sorted(path.stem for path in FIXTURES.glob("*.json")) == sorted(FIXTURE_NAMES)


def test_fixtures_describe_their_machines() -> None:
    rtx = load_fixture("rtx4090_24gb")
    [gpu] = rtx.nvidia_gpus
    assert gpu.compute_capability == (8, 9) and gpu.memory_bandwidth == pytest.approx(1008 * GB, rel=1e-3)
    assert rtx.cpu.physical_cores == 16 and rtx.ram_total > 60 * GB
    a100 = load_fixture("a100_80gb_x2")
    assert [g.compute_capability for g in a100.gpus] == [(8, 0), (8, 0)]
    assert a100.cpu.physical_cores == 64 and a100.ram_total > 500 * GB
    [h200] = load_fixture("h200").gpus
    assert h200.compute_capability == (9, 0) and h200.memory_total > 140 * GB
    mac = load_fixture("m2max_32gb")
    assert mac.unified_memory and mac.metal and mac.gpus[0].memory_bandwidth == 400 * GB
    assert "neon" in mac.cpu.features and mac.cpu.logical_cores == 12
    laptop = load_fixture("laptop_8core_16gb")
    assert laptop.gpus == () and "avx2" in laptop.cpu.features and laptop.cpu.physical_cores == 8
    [note] = laptop.gpu_problems
    assert note.severity == "note" and note.device_present is False and "No NVIDIA driver" in note.problem


def test_summary_of_recorded_machines() -> None:
    rtx = format_profile(load_fixture("rtx4090_24gb"))
    assert "GPU 0    NVIDIA GeForce RTX 4090: 23.5 GiB free of 24.0 GiB, compute capability 8.9, 1008 GB/s" in rtx
    assert "Driver   NVIDIA 550.54.14, CUDA 12.4" in rtx
    mac = format_profile(load_fixture("m2max_32gb"))
    assert "Apple M2 Max: 32.0 GiB unified memory, 400 GB/s" in mac and "Metal    available" in mac
    laptop = format_profile(load_fixture("laptop_8core_16gb"))
    assert "GPU      none found" in laptop and "Note     nvidia: No NVIDIA driver" in laptop
    assert "Problem" not in laptop
    present = replace(
        load_fixture("laptop_8core_16gb"), gpu_problems=(GPUProblem("nvidia", "x", "y", "problem", True),)
    )
    assert "Problem  nvidia: x" in format_profile(present)


# --- the command -------------------------------------------------------------------------------------------


def modeldeck_hw(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", "hw", *args], capture_output=True, text=True, timeout=60, cwd=REPO,
        env={**os.environ, "MODELDECK_HOME": str(home)},
    )  # fmt: skip


def test_hw_json_is_a_hardware_profile(tmp_path: Path) -> None:
    result = modeldeck_hw("--json", home=tmp_path)
    assert result.returncode == 0, result.stderr
    profile = HardwareProfile.from_dict(json.loads(result.stdout))
    assert profile.cpu.logical_cores == psutil.cpu_count(logical=True)
    assert profile.models_dir is not None and Path(profile.models_dir).is_relative_to(tmp_path)
    assert profile.disk_free is not None and profile.disk_free > 0


def test_hw_summary_names_the_cpu_and_the_gpu_doctor_advice(tmp_path: Path) -> None:
    result = modeldeck_hw(home=tmp_path)
    assert result.returncode == 0, result.stderr
    profile = HardwareProfile.from_dict(json.loads(modeldeck_hw("--json", home=tmp_path).stdout))
    text = " ".join(result.stdout.split())
    assert text.startswith(f"CPU {profile.cpu.model or 'unknown model'} ({profile.cpu.architecture})")
    assert "RAM " in text and "Disk " in text
    for problem in profile.gpu_problems:
        assert " ".join(problem.advice.split()) in text
    for gpu in profile.gpus:
        assert gpu.name in text


def test_memory_bandwidth_is_measured_once_per_machine(tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "memory-bandwidth.json"
    first = cached_memory_bandwidth(cache, "cpu-a")
    assert first is not None and 1e9 < first < 5e12  # between a slow laptop and HBM
    assert json.loads(cache.read_text())["machine"] == "cpu-a"
    assert cached_memory_bandwidth(cache, "cpu-a") == first  # read back, not timed again
    cached_memory_bandwidth(cache, "cpu-b")
    assert json.loads(cache.read_text())["machine"] == "cpu-b"


@pytest.mark.parametrize("cached", ["[1]", "[" * 100_000, '"text"'])
def test_a_bandwidth_cache_that_is_no_object_is_measured_again(cached: str, tmp_path: Path) -> None:
    """`modeldeck hw` read the cache with json.loads and called .get on it: AttributeError for an array, and
    RecursionError for one nested too deeply, both as tracebacks."""
    cache = tmp_path / "cache" / "memory-bandwidth.json"
    cache.parent.mkdir()
    cache.write_text(cached)
    result = modeldeck_hw("--json", home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (
        HardwareProfile.from_dict(json.loads(result.stdout)).cpu.memory_bandwidth
        == json.loads(cache.read_text())["bytes_per_second"]
    )
