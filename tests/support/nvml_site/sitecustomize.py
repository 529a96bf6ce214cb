"""Run by Python at start-up when this folder is on PYTHONPATH: with MODELDECK_TEST_NVML_PROFILE set, NVML answers
for that recorded machine profile (tests/support/recorded_nvml.py). Processes without `pynvml` (the managed vLLM
environment, which inherits PYTHONPATH) are left alone."""

import importlib.util
import os
from pathlib import Path

_profile = os.environ.get("MODELDECK_TEST_NVML_PROFILE")
if _profile and importlib.util.find_spec("pynvml") is not None and importlib.util.find_spec("tests") is not None:
    import pynvml

    from tests.support.recorded_nvml import nvml_fakes

    for _name, _fake in nvml_fakes(Path(_profile)).items():
        setattr(pynvml, _name, _fake)
