"""`modeldeck export`: plans for clusters (TP within a node, PP across nodes) written for Docker, Kubernetes, the
production-stack Helm chart and Ray, and every vLLM command line checked against vLLM 0.34.0's own command-line
schema (tests/fixtures/engine_cli/vllm-0.34.0.json, extracted from the wheel's source).

No cluster, GPU or Docker exists here: the clusters are described (GPU memory, GPUs per node, nodes), the models by
a folder holding their published config.json and safetensors files that carry only the header (the planner never
reads tensor data). The Kubernetes manifests are validated by kubernetes-validate's offline schemas; the Helm values
by a schema written from the chart's documented values (tests/fixtures/helm, its $comment says how).
"""

from __future__ import annotations

import itertools
import json
import shlex
import socket
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from app.cli import main
from app.export import ExportError, ExportOptions, load_deployment, render
from app.export.deployment import Deployment
from app.export.docker import docker_command
from app.export.helm import CHART_OWNED, VLLM_CONFIG_FLAGS, values
from app.export.kubernetes import manifests
from app.export.ray import head_commands, worker_commands
from app.hardware.profile import HardwareProfile
from app.paths import AppPaths
from app.planner.cluster import ClusterPlanError, ClusterTarget, plan_cluster
from app.planner.facts import facts_from_hf_config
from app.planner.plans import with_command
from app.planner.recommend import recommend
from engines.vllm import VLLMEngine
from tests.engines.cli_schema import check_command, load_schema
from tests.support.hub_server import HubRepo, running_hub

GIB = 2**30
HELM_SCHEMA = Path(__file__).parents[2] / "fixtures" / "helm" / "production-stack-values.schema.json"
HARDWARE = Path(__file__).parents[2] / "fixtures" / "hardware"
VLLM = load_schema("vllm-0.34.0.json")

# Published config.json values (Llama 3.1 8B and 70B Instruct, Qwen2.5 7B) and parameter counts per dtype.
LLAMA_8B = {"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
            "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072}  # fmt: skip
LLAMA_70B = {"num_hidden_layers": 80, "hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
             "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072}  # fmt: skip
QWEN_7B = {"num_hidden_layers": 28, "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
           "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 32768}  # fmt: skip
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128}
FP8 = {"quant_method": "fp8"}


def model_folder(root: Path, name: str, config: dict[str, Any], counts: dict[str, int],
                 quantization: dict[str, Any] | None = None) -> Path:  # fmt: skip
    """A model folder: config.json and one safetensors file with only its header (dtype and shape per tensor)."""
    folder = root / name
    folder.mkdir(parents=True)
    full = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16", **config}
    if quantization:
        full["quantization_config"] = quantization
    (folder / "config.json").write_text(json.dumps(full))
    header = {f"t{i}": {"dtype": dtype, "shape": [n], "data_offsets": [0, 0]} for i, (dtype, n) in
              enumerate(counts.items())}  # fmt: skip
    raw = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    return folder


def facts(config: dict[str, Any], counts: dict[str, int], quantization: dict[str, Any] | None = None) -> Any:
    full = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16", **config}
    if quantization:
        full["quantization_config"] = quantization
    return facts_from_hf_config(full, counts)


MODELS = {
    "llama-8b": facts(LLAMA_8B, {"BF16": 8_030_261_248}),
    "llama-70b": facts(LLAMA_70B, {"BF16": 70_553_706_496}),
    "llama-70b-awq": facts(LLAMA_70B, {"I32": 8_600_000_000, "F16": 2_400_000_000}, AWQ),
    "llama-70b-fp8": facts(LLAMA_70B, {"F8_E4M3": 68_500_000_000, "BF16": 2_100_000_000}, FP8),
    "qwen-7b": facts(QWEN_7B, {"BF16": 7_615_616_512}),
}
TARGETS = {
    "1xH100": ClusterTarget(80 * GIB, 1, 1, (9, 0)),
    "8xH100": ClusterTarget(80 * GIB, 8, 1, (9, 0)),
    "2xL40S-x4": ClusterTarget(48 * GIB, 2, 4, (8, 9)),
    "4xA10-x8": ClusterTarget(24 * GIB, 4, 8, (8, 6)),
    "8xA100-x2": ClusterTarget(80 * GIB, 8, 2, (8, 0)),
}


def deployments() -> list[tuple[str, Deployment]]:
    """Every model on every cluster it fits, for two uses and several user counts."""
    out = []
    for model, model_facts in MODELS.items():
        for target_name, target in TARGETS.items():
            for use, users in (("serve", 8), ("serve", 64), ("chat", None), ("long-context", None)):
                try:
                    plan = plan_cluster(model_facts, target, use, users)
                except ClusterPlanError:
                    continue
                deployment = Deployment(model, f"org/{model}", plan, target.gpus_per_node,
                                        model_facts.weight_bytes or 0)  # fmt: skip
                out.append((f"{model}-{target_name}-{use}-{users}", deployment))
    return out


DEPLOYMENTS = deployments()


# -- the planner ----------------------------------------------------------------------------------------------


def test_a_model_that_fits_one_gpu_gets_no_parallelism() -> None:
    plan = plan_cluster(MODELS["llama-8b"], TARGETS["8xH100"], "serve", 8)
    assert (plan.tensor_parallel_size, plan.pipeline_parallel_size) == (1, 1)


def test_70b_in_16_bit_splits_within_a_node_before_adding_nodes() -> None:
    # 141 GB of weights. TP 2: 70.5 GB a GPU of the 77.3 GB budget (0.9 x 80 GiB), less 1.1 GB activations and
    # 1.6 GB runtime, leaves 4.0 GB of KV cache at 160 KiB a token: 24k tokens, under 8 users x 8192. TP 4 leaves
    # 40 GB: 486k tokens.
    plan = plan_cluster(MODELS["llama-70b"], TARGETS["8xA100-x2"], "serve", 8)
    assert (plan.tensor_parallel_size, plan.nodes) == (4, 1)
    assert 8 * 8192 <= plan.kv_cache_tokens < 500_000


def test_70b_on_small_gpus_adds_pipeline_stages_across_nodes() -> None:
    # 4 x 24 GiB per node = 96 GiB: under the 141 GB of weights, so one stage per node: 2 nodes hold 70 GB each.
    plan = plan_cluster(MODELS["llama-70b"], TARGETS["4xA10-x8"], "serve", 8)
    assert plan.tensor_parallel_size == 4 and plan.pipeline_parallel_size >= 2
    assert plan.weights_per_gpu_bytes * plan.gpus >= MODELS["llama-70b"].weight_bytes * 0.99


def test_what_does_not_fit_the_cluster_says_what_would_help() -> None:
    with pytest.raises(ClusterPlanError, match="allow more nodes"):
        plan_cluster(MODELS["llama-70b"], ClusterTarget(24 * GIB, 2, 2), "serve", 8)
    with pytest.raises(ClusterPlanError, match=r"compute capability 8\.9"):
        plan_cluster(MODELS["llama-70b-fp8"], TARGETS["8xA100-x2"], "serve", 8)
    with pytest.raises(ClusterPlanError, match="GPUs per node must be 1 to 16"):
        ClusterTarget(80 * GIB, 0, 1)


def test_there_are_many_plans_of_every_shape() -> None:
    shapes = {(d.plan.tensor_parallel_size, d.plan.pipeline_parallel_size) for _, d in DEPLOYMENTS}
    assert len(DEPLOYMENTS) >= 40
    assert {(1, 1), (2, 1), (4, 1), (8, 1)} <= shapes and any(pp > 1 for _, pp in shapes)


# -- every command line against vLLM's schema -----------------------------------------------------------------


@pytest.mark.parametrize(("name", "deployment"), DEPLOYMENTS, ids=[n for n, _ in DEPLOYMENTS])
def test_every_export_writes_only_flags_vllm_accepts(name: str, deployment: Deployment) -> None:
    local = VLLMEngine().build_command(deployment.launch_plan(), 8123, "key").argv
    assert local[1] == "serve" and check_command(VLLM, list(local[2:])) == []
    assert check_command(VLLM, deployment.serve_args()) == []
    if deployment.plan.nodes == 1:
        docker = shlex.split(render(deployment, "docker")["docker-run.sh"].splitlines()[-1])
        image_at = docker.index(deployment.image)
        assert check_command(VLLM, docker[image_at + 1 :]) == []
        container = manifests(deployment)[1]["spec"]["template"]["spec"]["containers"][0]
        assert check_command(VLLM, container["args"]) == []
    helm_spec = values(deployment)["servingEngineSpec"]["modelSpec"][0]
    assert check_command(VLLM, [helm_spec["modelURL"], *_chart_flags(helm_spec["vllmConfig"])]) == []
    serve = next(c for c in head_commands(deployment) if c[:2] == ["vllm", "serve"])
    assert check_command(VLLM, serve[2:]) == []
    assert ("--distributed-executor-backend", "ray") in itertools.pairwise(serve)
    if deployment.plan.nodes > 1:
        assert ("--pipeline-parallel-size", str(deployment.plan.nodes)) in itertools.pairwise(serve)


def _chart_flags(config: dict[str, Any]) -> list[str]:
    """The flags the production-stack chart's template writes for vllmConfig, then extraArgs."""
    flags: list[str] = []
    for key, flag in VLLM_CONFIG_FLAGS.items():
        if key in config and config[key] is not False:
            flags += [flag] if config[key] is True else [flag, str(config[key])]
    assert not CHART_OWNED & set(config.get("extraArgs", []))
    return flags + config.get("extraArgs", [])


def test_the_planners_own_vllm_commands_fit_the_schema() -> None:
    """`modeldeck recommend` on recorded NVIDIA machines: each vLLM option's exact command line."""
    checked = 0
    for machine in ("h200", "a100_80gb_x2", "rtx4090_24gb"):
        hardware = HardwareProfile.from_dict(json.loads((HARDWARE / f"{machine}.json").read_text()))
        for name, model_facts in MODELS.items():
            from app.planner.recommend import Variant

            variant = Variant(model_facts.quantization or "BF16", model_facts, f"org/{name}")
            for users in (1, 8, 32):
                result = recommend(hardware, [variant], "serve", users=users)
                for option in [result.best, *result.alternatives]:
                    if option is not None and option.engine == "vllm":
                        argv = with_command(name, option).command
                        assert check_command(VLLM, [a.replace("<port>", "8000") for a in argv[2:]]) == []
                        checked += 1
    assert checked >= 20


# -- the formats ----------------------------------------------------------------------------------------------


def one(name: str, target: str, use: str = "serve", users: int | None = 8) -> Deployment:
    plan = plan_cluster(MODELS[name], TARGETS[target], use, users)
    return Deployment(name, f"org/{name}", plan, TARGETS[target].gpus_per_node, MODELS[name].weight_bytes or 0)


def test_docker_line_passes_secrets_by_name_and_asks_for_the_gpus() -> None:
    deployment = one("llama-70b", "8xA100-x2")
    line = render(deployment, "docker")["docker-run.sh"].splitlines()[-1]
    argv = shlex.split(line)
    assert argv[:2] == ["docker", "run"] and argv[argv.index("--gpus") + 1] == '"device=0,1,2,3"'
    assert argv[argv.index("-p") + 1] == "8000:8000"
    assert {"HF_TOKEN", "VLLM_API_KEY"} <= {argv[i + 1] for i, a in enumerate(argv) if a == "-e"}
    assert "$HOME/.cache/huggingface:/root/.cache/huggingface" in argv
    assert "--api-key" not in argv and argv[argv.index("--host") + 1] == "0.0.0.0"
    whole_node = docker_command(one("llama-8b", "1xH100"))
    assert whole_node[whole_node.index("--gpus") + 1] == "all"


def test_kubernetes_manifests_validate_against_the_kubernetes_schemas(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: object) -> None:
        raise AssertionError("kubernetes-validate tried to reach the network")

    # the schemas ship inside the package: validation must work with no network at all
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    for name, deployment in DEPLOYMENTS:
        if deployment.plan.nodes > 1:
            continue
        objects = list(yaml.safe_load_all(render(deployment, "k8s")["kubernetes.yaml"]))
        assert [o["kind"] for o in objects] == ["PersistentVolumeClaim", "Deployment", "Service"], name
        for obj in objects:
            kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
    container = manifests(one("llama-70b", "8xA100-x2"))[1]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8000}
    assert {e["valueFrom"]["secretKeyRef"]["name"] for e in container["env"]} == {"hf-token", "vllm-api-key"}


def test_the_kubernetes_validation_can_fail() -> None:
    _claim, deployment, service = manifests(one("llama-8b", "1xH100"))
    deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = [1]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, kubernetes_validate.latest_version(), strict=True)
    service["spec"]["portz"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(service, kubernetes_validate.latest_version(), strict=True)


def test_helm_values_validate_and_multi_node_becomes_a_ray_cluster() -> None:
    schema = json.loads(HELM_SCHEMA.read_text())
    for _, deployment in DEPLOYMENTS:
        document = yaml.safe_load(render(deployment, "helm")["values.yaml"])
        jsonschema.validate(document, schema)
    multi = next(d for _, d in DEPLOYMENTS if d.plan.nodes > 1)
    spec = values(multi)["servingEngineSpec"]["modelSpec"][0]
    assert spec["raySpec"]["enabled"] and spec["replicaCount"] == multi.plan.nodes - 1
    assert spec["requestGPU"] == spec["raySpec"]["headNode"]["requestGPU"] == multi.plan.tensor_parallel_size
    broken = values(multi)
    broken["servingEngineSpec"]["modelSpec"][0]["vllmConfig"]["maxModelLength"] = 8192
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_ray_scripts_start_the_head_and_each_worker() -> None:
    deployment = one("llama-70b", "4xA10-x8")
    files = render(deployment, "ray")
    head = [shlex.split(line) for line in files["ray-head.sh"].splitlines() if line.startswith(("ray ", "vllm "))]
    assert head[0][:3] == ["ray", "start", "--head"] and "--num-gpus=4" in head[0]
    worker = [shlex.split(line) for line in files["ray-worker.sh"].splitlines() if line.startswith("ray ")]
    assert worker == [["ray", "start", "--address=$HEAD_IP:6379", "--num-gpus=4", "--block"]]
    assert worker_commands(deployment)[0][:2] == ["ray", "start"]
    # against `ray start`'s own options, extracted from Ray 2.60.0's source (tests/fixtures/engine_cli)
    ray = load_schema("ray-2.60.0-start.json")
    assert check_command(ray, head[0][2:]) == [] and check_command(ray, worker[0][2:]) == []
    assert check_command(ray, ["--num-gpus=four", "--heads"]) == [
        "--num-gpus 'four': not a valid int", "unknown flag --heads"
    ]  # fmt: skip
    assert check_command(VLLM, head[1][2:]) == []


# -- from PLAN to files ---------------------------------------------------------------------------------------


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


def test_export_a_model_folder_then_its_saved_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = model_folder(tmp_path, "llama-70b", LLAMA_70B, {"BF16": 70_553_706_496})
    out = tmp_path / "out"
    code, _, err = run_cli(["export", str(folder), "--format", "ray", "--gpu-memory", "24G",
                                  "--gpus-per-node", "4", "--nodes", "8", "--out", str(out)], capsys)  # fmt: skip
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["plan.json", "ray-head.sh", "ray-worker.sh"]
    assert (out / "ray-head.sh").stat().st_mode & 0o111
    plan = json.loads((out / "plan.json").read_text())
    assert plan["plan"]["pipeline_parallel_size"] >= 2 and plan["model_ref"] == str(folder)
    again = tmp_path / "again"
    code, _, err = run_cli(["export", str(out / "plan.json"), "--format", "helm", "--out", str(again)], capsys)
    assert code == 0, err
    spec = yaml.safe_load((again / "values.yaml").read_text())["servingEngineSpec"]["modelSpec"][0]
    assert spec["vllmConfig"]["tensorParallelSize"] == 4 and spec["modelURL"] == str(folder)
    assert json.loads((again / "plan.json").read_text())["plan"] == plan["plan"]


def test_export_from_a_recommendation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = model_folder(tmp_path, "llama-8b", LLAMA_8B, {"BF16": 8_030_261_248})
    code, printed, _ = run_cli(["recommend", str(folder), "--use", "serve", "--hardware",
                                str(HARDWARE / "h200.json"), "--json"], capsys)  # fmt: skip
    assert code == 0
    saved = tmp_path / "recommendation.json"
    saved.write_text(printed)
    code, printed, err = run_cli(["export", str(saved), "--format", "docker"], capsys)
    assert code == 0, err
    # standard output is one Compose file, as `docker compose -f -` reads it; the `docker run` line only with --out
    [compose] = list(yaml.safe_load_all(printed))
    [(name, service)] = compose["services"].items()
    assert name.startswith("vllm-") and service["image"] == "vllm/vllm-openai:v0.34.0"
    assert check_command(VLLM, service["command"]) == []
    assert service["environment"] == ["HF_TOKEN", "VLLM_API_KEY"] and service["ipc"] == "host"
    [gpus] = service["deploy"]["resources"]["reservations"]["devices"]
    assert gpus["driver"] == "nvidia" and gpus["capabilities"] == ["gpu"]
    out = tmp_path / "out"
    code, _, err = run_cli(["export", str(saved), "--format", "docker", "--out", str(out)], capsys)
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["compose.yaml", "docker-run.sh", "plan.json"]
    argv = shlex.split((out / "docker-run.sh").read_text().splitlines()[-1])
    assert argv[argv.index("vllm/vllm-openai:v0.34.0") + 1 :] == service["command"]


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        ("bundled", ["--format", "k8s"], "export deploys vLLM, which serves Hugging Face models"),
        ("nothing", ["--format", "k8s"], "is neither a model ModelDeck knows"),
        ("bad-json", ["--format", "docker"], "not a readable plan"),
        ("deep-json", ["--format", "docker"], "not a readable plan (nested more than 64 levels deep)"),
        ("other-json", ["--format", "docker"], "neither a plan written by `modeldeck export`"),
        ("70b", ["--format", "k8s", "--gpu-memory", "24G", "--gpus-per-node", "4", "--nodes", "4"],
         "use --format helm"),
        ("70b", ["--format", "docker", "--gpu-memory", "24G", "--gpus-per-node", "4", "--nodes", "4"],
         "use --format ray or --format helm"),
        ("70b", ["--format", "ray", "--gpu-memory", "24G", "--gpus-per-node", "2"], "allow more nodes"),
        ("70b", ["--format", "ray", "--max-model-len", "1000000"], "over the model's trained context"),
        ("70b", ["--format", "ray", "--gpus-per-node", "99"], "argument --gpus-per-node: must be from 1 to 16, got 99"),
        ("70b", ["--format", "ray", "--out", "FILE"], "cannot write into"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_with_a_reason(
    setup: str, args: list[str], message: str, tmp_path: Path, paths: AppPaths, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = {
        "bundled": "smollm2-135m-instruct",
        "nothing": str(tmp_path / "missing"),
        "bad-json": str(tmp_path / "bad.json"),
        "deep-json": str(tmp_path / "deep.json"),
        "other-json": str(tmp_path / "other.json"),
    }.get(setup) or str(model_folder(tmp_path, "llama-70b", LLAMA_70B, {"BF16": 70_553_706_496}))
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "deep.json").write_text("[" * 100_000)  # json.loads raised RecursionError
    (tmp_path / "other.json").write_text('{"hello": 1}')
    (tmp_path / "FILE").write_text("a file where the folder should go")
    args = [str(tmp_path / "FILE") if a == "FILE" else a for a in args]
    code, out, err = run_cli(["export", plan, *args], capsys)
    assert code == 2 and message in err and out == ""
    assert (tmp_path / "FILE").read_text() == "a file where the folder should go"


@pytest.mark.parametrize("text", ["[1, 2]", "{}", "not json", '{"cpu": []}'])
@pytest.mark.parametrize("command", ["export", "recommend"])
def test_a_hardware_file_that_is_no_profile_is_named(
    command: str, text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "profile.json"
    profile.write_text(text)
    folder = model_folder(tmp_path, "llama-70b", LLAMA_70B, {"BF16": 70_553_706_496})
    code, out, err = run_cli([command, str(folder), "--use", "serve", "--hardware", str(profile)]
                             + (["--format", "ray"] if command == "export" else []), capsys)  # fmt: skip
    assert code == 2 and out == ""
    assert f"{profile} is not a hardware profile from `modeldeck hw --json`" in err


@pytest.mark.parametrize(
    ("where", "value", "why"),
    [
        (("os",), [1], "the profile: 'os' is list, not str | None"),
        (("ram_total",), "24G", "the profile: 'ram_total' is str, not int"),
        (("gpus", 0, "memory_total"), "24GB", "gpu 1: 'memory_total' is str, not int"),
        (("gpus", 0, "compute_capability"), [8], "gpu 1: 'compute_capability' is list, not tuple[int, int] | None"),
        (("gpus", 0), 5, "gpu 1 is int, not an object"),
        (("cpu", "features"), 5, "its cpu: 'features' is int, not tuple[str, ...]"),
        (("gpu_problems",), [{"backend": "cuda", "problem": "p", "advice": "a", "severity": "bad"}],
         "gpu problem 1: 'severity' is str, not Literal['problem', 'note']"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("command", ["export", "recommend"])
def test_a_hardware_file_with_a_field_of_the_wrong_type_is_named_in_one_line(
    command: str, where: tuple[str | int, ...], value: Any, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded = json.loads((HARDWARE / "rtx4090_24gb.json").read_text())
    parent = recorded
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = value
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(recorded))
    folder = model_folder(tmp_path, "llama-70b", LLAMA_70B, {"BF16": 70_553_706_496})
    code, out, err = run_cli([command, str(folder), "--use", "serve", "--hardware", str(profile)]
                             + (["--format", "ray"] if command == "export" else []), capsys)  # fmt: skip
    assert (code, out) == (2, "")
    assert err == f"modeldeck: {profile} is not a hardware profile from `modeldeck hw --json` ({why})\n"


def test_unknown_format_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["export", "x", "--format", "nomad"], capsys)
    assert code == 2 and "invalid choice: 'nomad'" in err


def test_render_refuses_an_unknown_format() -> None:
    with pytest.raises(ExportError, match="unknown format"):
        render(one("llama-8b", "1xH100"), "nomad")


def test_served_name_and_options_pass_through(paths: AppPaths, tmp_path: Path) -> None:
    folder = model_folder(tmp_path, "qwen", QWEN_7B, {"BF16": 7_615_616_512})
    options = ExportOptions(TARGETS["1xH100"], "chat", None, 4096, "assistant")
    deployment = load_deployment(str(folder), options, paths)
    args = deployment.serve_args()
    assert args[0] == str(folder) and args[args.index("--served-model-name") + 1] == "assistant"
    assert args[args.index("--max-model-len") + 1] == "4096"
    assert replace(deployment, image_tag="nightly").image == "vllm/vllm-openai:nightly"


# -- a Hub repository (the local Hub stand-in, tests/support/hub_server.py) ----------------------------------------


def hub_repo(repo_id: str, config: dict[str, Any], counts: dict[str, int]) -> HubRepo:
    full = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16", **config}
    header = {f"t{i}": {"dtype": d, "shape": [n], "data_offsets": [0, 0]} for i, (d, n) in enumerate(counts.items())}
    raw = json.dumps(header).encode()
    files = {"config.json": json.dumps(full).encode(), "model.safetensors": struct.pack("<Q", len(raw)) + raw}
    return HubRepo(repo_id, files, tags=("safetensors", "text-generation"))


def test_export_a_hub_repository_reads_only_its_config_and_headers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repos = [hub_repo("meta/llama-70b", LLAMA_70B, {"BF16": 70_553_706_496}),
             HubRepo("someone/gguf-only", {"model.Q4_K_M.gguf": b"GGUF" + bytes(60)})]  # fmt: skip
    with running_hub(repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, printed, err = run_cli(["export", "meta/llama-70b", "--format", "k8s"], capsys)
        assert code == 0, err
        # standard output is the manifests alone, as `kubectl apply -f -` reads them: YAML documents, no plan.json
        objects = list(yaml.safe_load_all(printed))
        assert objects and all(isinstance(o, dict) and {"apiVersion", "kind"} <= o.keys() for o in objects), objects
        container = objects[1]["spec"]["template"]["spec"]["containers"][0]
        assert container["args"][0] == "meta/llama-70b" and container["resources"]["limits"]["nvidia.com/gpu"] == 4
        # the weights file is only read with Range requests for its header (huggingface_hub asks for 100 kB first)
        ranges = [r.range for r in hub.downloads("model.safetensors")]
        assert ranges and all(r is not None and int(r.split("-")[1]) <= 100_000 for r in ranges), ranges
        code, _, err = run_cli(["export", "meta/missing", "--format", "k8s"], capsys)
        assert code == 2 and "meta/missing" in err
        code, _, err = run_cli(["export", "someone/gguf-only", "--format", "k8s"], capsys)
        assert code == 2 and "has no safetensors weights" in err


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (b"[1, 2]", "config.json is not a JSON object"),  # was AttributeError from the planner
        (b"[" * 100_000, "config.json is not readable JSON (nested more than 64 levels deep)"),  # was "network error"
        (b"\xff{}", "config.json is not readable JSON ('utf-8' codec can't decode byte 0xff"),  # was "network error"
    ],
)
def test_a_hub_config_that_is_no_json_object_is_named(
    config: bytes, message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = hub_repo("meta/broken", LLAMA_70B, {"BF16": 70_553_706_496})
    repo.files["config.json"] = config
    with running_hub([repo]) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, out, err = run_cli(["export", "meta/broken", "--format", "k8s"], capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"modeldeck: meta/broken: {message}"), err


def test_export_for_nodes_like_a_recorded_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two nodes like the recorded 2 x A100 80 GB machine: 70B in 16 bits needs all four GPUs (TP 2 x PP 2)."""
    folder = model_folder(tmp_path, "llama-70b", LLAMA_70B, {"BF16": 70_553_706_496})
    code, _, err = run_cli(["export", str(folder), "--format", "ray", "--hardware",
                            str(HARDWARE / "a100_80gb_x2.json"), "--nodes", "2"], capsys)  # fmt: skip
    assert code == 2 and "makes 2 files (ray-head.sh, ray-worker.sh): give --out DIR" in err
    out = tmp_path / "out"
    argv = ["export", str(folder), "--format", "ray", "--hardware", str(HARDWARE / "a100_80gb_x2.json"), "--nodes", "2"]
    code, _, err = run_cli([*argv, "--out", str(out)], capsys)
    assert code == 0, err
    plan = json.loads((out / "plan.json").read_text())
    assert (plan["gpus_per_node"], plan["plan"]["tensor_parallel_size"], plan["plan"]["nodes"]) == (2, 2, 2)
    assert plan["plan"]["dtype"] == "bfloat16"
    code, _, err = run_cli(["export", str(folder), "--format", "ray", "--hardware",
                            str(HARDWARE / "laptop_8core_16gb.json")], capsys)  # fmt: skip
    assert code == 2 and "no usable NVIDIA GPU" in err
    (tmp_path / "broken.json").write_text("{")
    code, _, err = run_cli(["export", str(folder), "--format", "ray", "--hardware", str(tmp_path / "broken.json")],
                           capsys)  # fmt: skip
    assert code == 2 and "modeldeck:" in err


def test_export_again_into_a_folder_keeps_edited_files_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second export overwrote compose.yaml (and the rest) without a word: a person's edits to it were lost."""
    folder = model_folder(tmp_path, "llama-8b", LLAMA_8B, {"BF16": 8_030_261_248})
    out = tmp_path / "out"
    export = ["export", str(folder), "--format", "docker", "--out", str(out)]
    code, _, err = run_cli(export, capsys)
    assert code == 0, err
    compose = out / "compose.yaml"
    written = compose.read_text()
    code, printed, err = run_cli(export, capsys)  # the same files again: nothing to refuse
    assert code == 0 and err == "" and str(compose) in printed
    compose.write_text(written + "# mine\n")
    code, printed, err = run_cli(export, capsys)
    assert code == 2 and printed == ""
    assert err == (
        f"modeldeck: {compose} differs from what this export writes (edited since?): nothing is written; "
        "give --force to replace it\n"
    )
    assert compose.read_text() == written + "# mine\n"
    code, printed, err = run_cli([*export, "--force"], capsys)
    assert code == 0, err
    assert compose.read_text() == written and str(compose) in printed
