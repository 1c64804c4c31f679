"""Usable CPUs: affinity, cgroup CPU quota (v1 and v2) and SLURM, from fixture files and a real
cgroup."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadertune.machine import _host as machine
from loadertune.machine._host import CpuBudget, cgroup_cpu_quota, cpu_budget, cpus_per_rank
from tests._cli import SCRIPT
from tests.conftest import FIXTURES, lacking, with_tiny

V1_MOUNTS = (
    "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
)
V2_MOUNTS = "30 23 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n"
V1_SELF = "4:memory:/job\n2:cpu,cpuacct:/job/step\n0::/\n"


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _v1(path: str, quota: int, period: int = 100000) -> dict[str, str]:
    return {
        f"sys/fs/cgroup/cpu,cpuacct{path}/cpu.cfs_quota_us": f"{quota}\n",
        f"sys/fs/cgroup/cpu,cpuacct{path}/cpu.cfs_period_us": f"{period}\n",
    }


# (case, files under the fixture root, CPUs the quota grants)
QUOTAS: list[tuple[str, dict[str, str], float | None]] = [
    (
        "v1 quota",
        {"proc/self/cgroup": V1_SELF, "proc/self/mountinfo": V1_MOUNTS, **_v1("/job/step", 250000)},
        2.5,
    ),
    (
        "v1 unlimited",
        {"proc/self/cgroup": V1_SELF, "proc/self/mountinfo": V1_MOUNTS, **_v1("/job/step", -1)},
        None,
    ),
    (
        "v1 nested: a parent's quota limits its children",
        {
            "proc/self/cgroup": V1_SELF,
            "proc/self/mountinfo": V1_MOUNTS,
            **_v1("", -1),
            **_v1("/job", 300000),
            **_v1("/job/step", 600000),
        },
        3.0,
    ),
    (
        "v1 without mountinfo: the usual mount point",
        {
            "proc/self/cgroup": "1:cpu:/job\n",
            "sys/fs/cgroup/cpu/job/cpu.cfs_quota_us": "50000\n",
            "sys/fs/cgroup/cpu/job/cpu.cfs_period_us": "100000\n",
        },
        0.5,
    ),
    (
        "v2 max",
        {
            "proc/self/cgroup": "0::/user.slice/app\n",
            "proc/self/mountinfo": V2_MOUNTS,
            "sys/fs/cgroup/user.slice/app/cpu.max": "max 100000\n",
        },
        None,
    ),
    (
        "v2 quota",
        {
            "proc/self/cgroup": "0::/user.slice/app\n",
            "proc/self/mountinfo": V2_MOUNTS,
            "sys/fs/cgroup/user.slice/app/cpu.max": "200000 100000\n",
        },
        2.0,
    ),
    (
        "v2 nested path, the quota on an ancestor",
        {
            "proc/self/cgroup": "0::/kubepods/pod1/ctr\n",
            "proc/self/mountinfo": V2_MOUNTS,
            "sys/fs/cgroup/kubepods/pod1/cpu.max": "150000 100000\n",
            "sys/fs/cgroup/kubepods/pod1/ctr/cpu.max": "max 100000\n",
        },
        1.5,
    ),
    (
        "v2 in a container: the mount's root is the container's cgroup",
        {
            "proc/self/cgroup": "0::/docker/abc\n",
            "proc/self/mountinfo": "30 23 0:27 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2\n",
            "sys/fs/cgroup/cpu.max": "400000 100000\n",
        },
        4.0,
    ),
    ("none: no cgroup files at all", {}, None),
    (
        "hybrid: the unified hierarchy holds no cpu controller",
        {"proc/self/cgroup": "0::/\n", "proc/self/mountinfo": V1_MOUNTS},
        None,
    ),
]


@pytest.mark.parametrize(("case", "files", "cpus"), QUOTAS, ids=[q[0] for q in QUOTAS])
def test_cgroup_quota_from_files(
    tmp_path: Path, case: str, files: dict[str, str], cpus: float | None
) -> None:
    assert cgroup_cpu_quota(_tree(tmp_path, files)) == pytest.approx(cpus)


# (case, files, environment, affinity, the budget)
BUDGETS: list[tuple[str, dict[str, str], dict[str, str], int, CpuBudget]] = [
    ("affinity only", {}, {}, 8, CpuBudget(8, "affinity", 8)),
    (
        "a quota rounds down",
        dict(QUOTAS[0][1]),
        {},
        8,
        CpuBudget(2, "cgroup", 8, cgroup_cpus=2.5),
    ),
    (
        "half a CPU is still one",
        dict(QUOTAS[3][1]),
        {},
        8,
        CpuBudget(1, "cgroup", 8, cgroup_cpus=0.5),
    ),
    (
        "a quota above the affinity changes nothing",
        dict(QUOTAS[7][1]),
        {},
        2,
        CpuBudget(2, "affinity", 2, cgroup_cpus=4.0),
    ),
    ("SLURM per task", {}, {"SLURM_CPUS_PER_TASK": "3"}, 8, CpuBudget(3, "slurm", 8, slurm=3)),
    (
        "SLURM on node, when per task is unset",
        {},
        {"SLURM_CPUS_ON_NODE": "6"},
        8,
        CpuBudget(6, "slurm", 8, slurm=6),
    ),
    (
        "the smallest of the three",
        dict(QUOTAS[2][1]),
        {"SLURM_CPUS_PER_TASK": "4"},
        8,
        CpuBudget(3, "cgroup", 8, cgroup_cpus=3.0, slurm=4),
    ),
]


@pytest.mark.parametrize(
    ("case", "files", "env", "affinity", "budget"), BUDGETS, ids=[b[0] for b in BUDGETS]
)
def test_budget_is_the_smallest_limit_and_says_which(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    files: dict[str, str],
    env: dict[str, str],
    affinity: int,
    budget: CpuBudget,
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(affinity)))
    assert cpu_budget(_tree(tmp_path, files), env) == budget


# (case, SLURM variables set, the variables warned about, the count read)
BAD_SLURM: list[tuple[str, dict[str, str], list[str], int | None]] = [
    ("per task unreadable", {"SLURM_CPUS_PER_TASK": "abc"}, ["SLURM_CPUS_PER_TASK"], None),
    (
        "per task unreadable, on node read",
        {"SLURM_CPUS_PER_TASK": "abc", "SLURM_CPUS_ON_NODE": "6"},
        ["SLURM_CPUS_PER_TASK"],
        6,
    ),
    (
        "per task zero, on node read",
        {"SLURM_CPUS_PER_TASK": "0", "SLURM_CPUS_ON_NODE": "5"},
        ["SLURM_CPUS_PER_TASK"],
        5,
    ),
    ("per task negative", {"SLURM_CPUS_PER_TASK": "-4"}, ["SLURM_CPUS_PER_TASK"], None),
    (
        "both unreadable",
        {"SLURM_CPUS_PER_TASK": "-4", "SLURM_CPUS_ON_NODE": "lots(x2)"},
        ["SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"],
        None,
    ),
    ("on node zero", {"SLURM_CPUS_ON_NODE": "0"}, ["SLURM_CPUS_ON_NODE"], None),
    ("a repeated count still reads", {"SLURM_CPUS_PER_TASK": "3(x2)"}, [], 3),
]


@pytest.mark.parametrize(
    ("case", "env", "warned", "slurm"), BAD_SLURM, ids=[b[0] for b in BAD_SLURM]
)
def test_an_unreadable_slurm_count_is_named_and_the_next_source_counts(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    env: dict[str, str],
    warned: list[str],
    slurm: int | None,
) -> None:
    for key in machine.SLURM_KEYS:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(8)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        budget = cpu_budget(tmp_path)  # os.environ itself; no cgroup files under tmp_path
    lines = [str(w.message) for w in caught]
    assert [line.split("=")[0].removeprefix("loadertune: ") for line in lines] == warned
    assert all("\n" not in line and "not a positive CPU count" in line for line in lines)
    assert budget.slurm == slurm
    assert budget == (
        CpuBudget(slurm, "slurm", 8, slurm=slurm) if slurm else CpuBudget(8, "affinity", 8)
    )


@pytest.mark.parametrize(
    ("usable", "nproc", "per_rank"), [(8, 1, 8), (8, 2, 4), (7, 2, 3), (2, 4, 1)]
)
def test_cpus_per_rank(usable: int, nproc: int, per_rank: int) -> None:
    assert cpus_per_rank(nproc, usable) == per_rank


@pytest.mark.parametrize(
    ("env", "ranks"), [({}, 1), ({"LOCAL_WORLD_SIZE": "4"}, 4), ({"LOCAL_WORLD_SIZE": "x"}, 1)]
)
def test_local_world_size_is_the_launchers(env: dict[str, str], ranks: int) -> None:
    assert machine.local_world_size(env) == ranks


def test_machine_info_says_where_the_count_came_from() -> None:
    info = machine.machine_info()
    budget = cpu_budget()
    assert (info["usable_cpus"], info["usable_cpus_source"]) == (budget.count, budget.source)
    assert info["usable_cpus"] == machine.usable_cpus()


# ---- a real cgroup v1 with a one-CPU quota (root on a writable cgroupfs) -------------------

CPU_V1 = Path("/sys/fs/cgroup/cpu")
REPORT = (
    "import json; from loadertune.machine._host import cpu_budget, machine_info; b = cpu_budget(); "
    "i = machine_info(); print(json.dumps([b.count, b.source, i['usable_cpus'], "
    "i['usable_cpus_source']]))"
)


@pytest.fixture
def one_cpu_cgroup() -> Iterator[Path]:
    """A new child of the v1 cpu hierarchy with a quota of one CPU, removed afterwards; a
    skip saying why where none can be made."""
    if os.geteuid() != 0:
        lacking(f"creating a cgroup needs root; this test runs as uid {os.geteuid()}")
    if not (CPU_V1 / "cpu.cfs_quota_us").exists():
        pytest.skip(f"no cgroup v1 cpu controller at {CPU_V1} (cgroup v2 only, or none)")
    child = CPU_V1 / f"loadertune-test-{os.getpid()}"
    try:
        child.mkdir()
    except OSError as e:
        pytest.skip(f"cannot create a cgroup under {CPU_V1}: {e.strerror} (read-only cgroupfs?)")
    try:
        period = int((child / "cpu.cfs_period_us").read_text())
        (child / "cpu.cfs_quota_us").write_text(f"{period}\n")
        yield child
    finally:
        child.rmdir()  # its processes have exited: the cgroup is empty again
    assert not child.exists()


def _inside(cgroup: Path | None, *command: str, **options: Any) -> str:
    """``command``'s output, run in a fresh process inside ``cgroup`` (None: where we are),
    outside any SLURM allocation, recording to MLflow under its working directory."""
    enter = f'echo $$ > "{cgroup}/cgroup.procs" && ' if cgroup else ""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SLURM_") and k != "MLFLOW_TRACKING_URI"
    }
    env.update(options.pop("env", {}))
    proc = subprocess.run(
        ["sh", "-c", f'{enter}exec "$@"', "sh", *command],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        **options,
    )
    assert proc.returncode == 0, proc.stderr
    return str(proc.stdout)


def _report(cgroup: Path | None) -> list[object]:
    """What a fresh Python process reports as its CPU budget and machine info."""
    out = _inside(cgroup, sys.executable, "-c", REPORT)
    return list(json.loads(out.strip().splitlines()[-1]))


def _expected_inside() -> str:
    """One CPU's quota restricts the count unless the affinity already allows only one."""
    return "cgroup" if len(os.sched_getaffinity(0)) > 1 else "affinity"


def test_a_real_cgroup_quota_limits_the_usable_cpus(one_cpu_cgroup: Path) -> None:
    source = _expected_inside()
    assert _report(one_cpu_cgroup) == [1, source, 1, source]
    outside = _report(None)
    here = cpu_budget(env={})
    assert outside == [here.count, here.source, here.count, here.source]
    if here.cgroup_cpus is None:
        assert outside[:2] == [len(os.sched_getaffinity(0)), "affinity"]


@pytest.mark.slow
def test_a_trial_in_a_cgroup_records_its_quota(one_cpu_cgroup: Path, tmp_path: Path) -> None:
    from mlflow import MlflowClient

    overrides = ["model=simulated", "model.step_ms=5", "trial.steps=4"]
    _inside(
        one_cpu_cgroup,
        SCRIPT,
        f"paths.output_root={tmp_path}",
        *with_tiny(overrides),
        cwd=tmp_path,
        env={"PYTHONPATH": str(FIXTURES)},
    )
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("loadertune")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    tags = run.data.tags
    assert (tags["machine.usable_cpus"], tags["machine.usable_cpus_source"]) == (
        "1",
        _expected_inside(),
    )


def test_local_world_size_inside_a_process_group_defaults_to_the_caller() -> None:
    """AutoLoader's ranks without a launcher's LOCAL_WORLD_SIZE are all on one node."""
    assert machine.local_world_size({}, otherwise=4) == 4
    assert machine.local_world_size({"LOCAL_WORLD_SIZE": "2"}, otherwise=4) == 2
    assert machine.local_world_size({"LOCAL_WORLD_SIZE": "x"}, otherwise=4) == 4
