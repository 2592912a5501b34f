#!/usr/bin/env python3
"""Runs the scale-out and CI examples (examples/) as written, on the ddp_ranks fixture:

* the Slurm job array (memsnap-ranks.sbatch, one task per rank) and merge (memsnap-merge.sbatch),
  and the Kubernetes Indexed Job's and merge Job's container commands (with JOB_COMPLETION_INDEX
  per pod), must give exactly the rank comparison `memsnap DIR --format json` writes;
* the CI examples' budget command must exit 0 against a baseline of the same run and 3 (one
  "budget broken" line) against a baseline whose peak is lower; every YAML file must parse.

  check_examples.py --memsnap build/src/memsnap --ranks build/tests/fixtures/ddp_ranks
YAML checks need PyYAML; without it they are skipped with a message (the Slurm part still runs).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
FAILED = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILED.append(what)


def run(cmd, env, cwd=None, shell=False):
    return subprocess.run(cmd, env=env, cwd=cwd, shell=shell, capture_output=True, text=True)


def slurm(env, ranks, work, expected):
    reports = os.path.join(work, "slurm", "reports")
    for rank in range(4):
        e = dict(env, SNAPSHOTS=ranks, REPORTS=reports, SLURM_ARRAY_TASK_ID=str(rank))
        r = run(["bash", os.path.join(EXAMPLES, "scale-out", "memsnap-ranks.sbatch")], e)
        check(r.returncode == 0, f"slurm array task {rank} exits 0 ({r.stderr.strip()})")
    r = run(["bash", os.path.join(EXAMPLES, "scale-out", "memsnap-merge.sbatch")], dict(env, REPORTS=reports))
    check(r.returncode == 0, f"slurm merge exits 0 ({r.stderr.strip()})")
    merged = open(os.path.join(work, "slurm", "ranks.json")).read()
    check(merged == expected, "slurm merge of the array's reports equals memsnap DIR --format json")
    check(r.stdout.startswith("Rank 3 of 4 stands out"), "slurm merge prints the rank table's headline")


def container_command(path):
    import yaml
    job = yaml.safe_load(open(path))
    container = job["spec"]["template"]["spec"]["containers"][0]
    return container["command"], {v["name"]: v["value"] for v in container.get("env", [])}, job


def kubernetes(env, ranks, work, expected):
    reports = os.path.join(work, "k8s", "reports")
    command, defaults, job = container_command(os.path.join(EXAMPLES, "scale-out", "memsnap-ranks-job.yaml"))
    check(job["spec"]["completionMode"] == "Indexed" and set(defaults) == {"SNAPSHOTS", "REPORTS"},
          "the ranks Job is Indexed and sets SNAPSHOTS and REPORTS")
    for index in range(4):
        e = dict(env, SNAPSHOTS=ranks, REPORTS=reports, JOB_COMPLETION_INDEX=str(index))
        r = run(command, e)
        check(r.returncode == 0, f"kubernetes pod {index} exits 0 ({r.stderr.strip()})")
    command, defaults, _ = container_command(os.path.join(EXAMPLES, "scale-out", "memsnap-merge-job.yaml"))
    r = run(command, dict(env, REPORTS=reports))
    check(r.returncode == 0, f"kubernetes merge exits 0 ({r.stderr.strip()})")
    check(open(os.path.join(work, "k8s", "ranks.json")).read() == expected,
          "kubernetes merge of the pods' reports equals memsnap DIR --format json")


def budget_line():
    import yaml
    ci = yaml.safe_load(open(os.path.join(EXAMPLES, "ci", "gitlab-ci.yml")))
    line = [s for s in ci["memory-budget"]["script"] if "--fail-if" in s][0]
    gh = yaml.safe_load(open(os.path.join(EXAMPLES, "ci", "github-actions.yml")))
    steps = gh["jobs"]["memory"]["steps"]
    gh_line = " ".join([s for s in steps if "--fail-if" in s.get("run", "")][0]["run"].replace("\\\n", " ").split())
    check(" ".join(line.split()) == gh_line, "the GitHub Actions and GitLab CI examples check the same budgets")
    return line


def ci(env, ranks, work):
    line = budget_line()
    folder = os.path.join(work, "ci")
    os.makedirs(os.path.join(folder, "ci"))
    shutil.copy(os.path.join(ranks, "rank3.pickle"), os.path.join(folder, "memory.pickle"))
    r = run(["memsnap", "memory.pickle", "--format", "json", "-o", "ci/memory-baseline.json"], env, cwd=folder)
    check(r.returncode == 0, f"the baseline report is written ({r.stderr.strip()})")
    r = run(line, env, cwd=folder, shell=True)
    check(r.returncode == 0 and r.stderr == "", f"the CI budget passes against a baseline of the same run ({r.stderr.strip()})")
    r = run(["memsnap", os.path.join(ranks, "rank0.pickle"), "--format", "json", "-o", "ci/memory-baseline.json"], env, cwd=folder)
    check(r.returncode == 0, f"the smaller baseline report is written ({r.stderr.strip()})")
    r = run(line, env, cwd=folder, shell=True)
    broken = [l for l in r.stderr.splitlines() if l.startswith("memsnap: budget broken: ")]
    check(r.returncode == 3 and len(broken) == 4 and len(broken) == len(r.stderr.splitlines()),
          f"the CI budget exits 3 with one line per broken budget against a smaller baseline ({r.stderr.strip()})")
    check(os.path.getsize(os.path.join(folder, "memory-report.json")) > 0, "the report is written when a budget is broken")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--memsnap", required=True)
    parser.add_argument("--ranks", required=True)
    args = parser.parse_args()
    memsnap, ranks = os.path.abspath(args.memsnap), os.path.abspath(args.ranks)
    env = dict(os.environ, PATH=os.path.dirname(memsnap) + os.pathsep + os.environ.get("PATH", ""), MEMSNAP=memsnap)
    expected = run([memsnap, ranks, "--format", "json"], env).stdout
    with tempfile.TemporaryDirectory(prefix="memsnap_examples_") as work:
        slurm(env, ranks, work, expected)
        try:
            import yaml  # noqa: F401
        except ImportError:
            print("skipped: the Kubernetes and CI examples (no PyYAML to read them)")
        else:
            kubernetes(env, ranks, work, expected)
            ci(env, ranks, work)
    if FAILED:
        print(f"{len(FAILED)} check(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
