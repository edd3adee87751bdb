"""The project image builds with no registry, holds its runtime pieces, and rebuilds incrementally.

Builds through scripts/build_images.sh (the `make docker-image` path): on a fresh machine that
is the debootstrapped base, the wheel download and both image builds (a few minutes); after
that every build here takes seconds.
"""

import json
import os
import shutil
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = Path("scripts/build_images.sh")
IMAGE = "flights-optimizer:latest"
RUNTIME_IMAGE = "flights-optimizer-runtime:latest"
PROBE_IMAGE = "flights-optimizer:rebuild-probe"
BUILD_TIMEOUT_S = 1500
RUN_TIMEOUT_S = 300


def _run(args: list[str], timeout_s: float = RUN_TIMEOUT_S, **kwargs) -> str:
    done = subprocess.run(
        args, capture_output=True, text=True, timeout=timeout_s, check=False, **kwargs
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{output[-4000:]}"
    return output


def _in_image(image: str, *command: str) -> str:
    return _run(["docker", "run", "--rm", image, *command])


def _build(repo_root: Path, image: str) -> str:
    # The interpreter running the tests is the project's Python 3.11, the one wheels must fit.
    env = {**os.environ, "PYTHON": sys.executable}
    return _run([str(repo_root / BUILD_SCRIPT), image], timeout_s=BUILD_TIMEOUT_S, env=env)


def _pinned_versions() -> dict[str, str]:
    with open(REPO_ROOT / "pyproject.toml", "rb") as pyproject:
        pins = tomllib.load(pyproject)["project"]["dependencies"]
    return dict(pin.split("==") for pin in pins)


def _inspect(image: str, template: str) -> str:
    return _run(["docker", "image", "inspect", "--format", template, image]).strip()


def _layers(image: str) -> list[str]:
    return json.loads(_inspect(image, "{{json .RootFS.Layers}}"))


@pytest.fixture(scope="module")
def image() -> str:
    _build(REPO_ROOT, IMAGE)
    return IMAGE


def test_image_has_the_pinned_deps_and_the_project_code(image):
    output = _in_image(
        image,
        "python",
        "-c",
        "import sys, numpy, pandas, pyarrow, pyspark, common\n"
        "print(pyspark.__version__, pyarrow.__version__, pandas.__version__, numpy.__version__)\n"
        "print(common.__file__)\n"
        "print(sys.executable)",
    )
    versions, common_file, executable = output.strip().splitlines()[-3:]
    pins = _pinned_versions()
    assert versions.split() == [pins[name] for name in ("pyspark", "pyarrow", "pandas", "numpy")]
    assert common_file == "/app/common/__init__.py"
    assert executable == "/opt/venv/bin/python"


def test_image_has_java_17_at_java_home(image):
    on_path = _in_image(image, "java", "-version")
    at_java_home = _in_image(image, "sh", "-c", '"$JAVA_HOME/bin/java" -version')
    assert 'version "17.' in on_path
    assert 'version "17.' in at_java_home


def test_image_runs_unprivileged_under_tini(image):
    output = _in_image(image, "sh", "-c", "id -u; tr '\\0' ' ' < /proc/1/cmdline")
    uid, pid1_command = output.strip().splitlines()
    assert uid != "0"
    assert pid1_command.split()[0] == "/usr/bin/tini"


def test_spark_runs_python_workers_in_the_image(image):
    numbers_max = 100
    output = _in_image(
        image,
        "python",
        "-c",
        "from pyspark.sql import SparkSession\n"
        "spark = (SparkSession.builder.master('local[1]')"
        ".config('spark.ui.enabled', 'false').getOrCreate())\n"
        f"print('doubled sum', spark.sparkContext.parallelize(range({numbers_max}))"
        ".map(lambda n: 2 * n).sum())\n"
        "spark.stop()",
    )
    assert f"doubled sum {sum(2 * n for n in range(numbers_max))}" in output


def _copy_build_inputs(destination: Path) -> None:
    """Copies what the build reads (scripts, Dockerfiles, the .dockerignore allow-list) and
    hard-links the downloaded wheels, so the copy builds without touching the work tree."""
    with open(REPO_ROOT / ".dockerignore") as dockerignore:
        allowed = [line[1:].strip().rstrip("/") for line in dockerignore if line.startswith("!")]
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in [*allowed, "docker", "scripts", ".dockerignore"]:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, destination / name, ignore=ignore, dirs_exist_ok=True)
        else:  # a file of the allow-list may sit in a folder the rest of which stays out
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    shutil.copytree(REPO_ROOT / "build" / "wheels", destination / "build" / "wheels",
                    copy_function=_link_or_copy)


def _link_or_copy(source: str, destination: str) -> None:
    try:
        os.link(source, destination)
    except OSError:  # another file system: a plain copy is only slower
        shutil.copy2(source, destination)


def test_code_edit_rebuilds_only_the_code_layer(image, tmp_path):
    runtime_id_before = _inspect(RUNTIME_IMAGE, "{{.Id}}")
    _copy_build_inputs(tmp_path)
    token = uuid.uuid4().hex
    (tmp_path / "common" / "_rebuild_probe.py").write_text(f"TOKEN = {token!r}\n")
    try:
        _build(tmp_path, PROBE_IMAGE)
        # A rebuilt deps layer would be a new image: pip install stamps new creation times.
        assert _inspect(RUNTIME_IMAGE, "{{.Id}}") == runtime_id_before
        runtime_layers = _layers(RUNTIME_IMAGE)
        image_layers = _layers(image)
        probe_layers = _layers(PROBE_IMAGE)
        # Both project images are the runtime's layers plus one code layer, which differs.
        assert image_layers[:-1] == probe_layers[:-1] == runtime_layers
        assert image_layers[-1] != probe_layers[-1]
        probe = _in_image(PROBE_IMAGE, "python", "-c",
                          "from common import _rebuild_probe; print(_rebuild_probe.TOKEN)")
        assert probe.strip().splitlines()[-1] == token
    finally:
        subprocess.run(["docker", "rmi", "--force", PROBE_IMAGE], capture_output=True, check=False)
