"""Write a docs/results/<device>/sweep_cores*.json: the wall time of one sweep run two jobs at a time against one
after another, and whether their metrics agree.

    attnbench reproduce --out /tmp/s/side --stages compare --grid data=sst2 --grid seed=0 \
        --set trainer.max_steps=300 --no-report --jobs 2          # timed with: /usr/bin/time -f %e -o /tmp/s/side.time
    attnbench reproduce --out /tmp/s/one ... --jobs 1                # -o /tmp/s/one.time
    python scripts/sweep_cores.py /tmp/s/side /tmp/s/one 300 docs/results/cpu/sweep_cores.json

Each dir's wall seconds are read from ``<dir>.time`` beside it; every job's metrics.json is compared key by key,
timings and host fields left out. ``docs/cost.md``'s answer is generated from the file (``attnbench tables``).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

from attnbench.bench.train import cpu_model
from attnbench.run.outputs import write_text

side, one, steps, out = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
t_side = float((side.parent / (side.name + ".time")).read_text())
t_one = float((one.parent / (one.name + ".time")).read_text())
SKIP = ("time/", "perf/", "output_dir", "cpus", "torch_threads", "wandb", "test_host", "best_checkpoint")
jobs, worst = {}, 0.0
for d in sorted(p.parent for p in (side / "compare").glob("*/metrics.json")):
    a = json.loads((d / "metrics.json").read_text())
    b = json.loads((one / "compare" / d.name / "metrics.json").read_text())
    differing, rel = [], 0.0
    for k, v in a.items():
        if k.startswith(SKIP) or "per_sec" in k or k.endswith("time_sec") or "cpu_share" in k or not isinstance(v, (int, float)):
            continue
        if v != b.get(k):
            differing.append(k)
            rel = max(rel, abs(v - b[k]) / max(abs(b[k]), 1e-30))
    worst = max(worst, rel)
    jobs[d.name] = {
        "side_by_side": {"cpus": a["cpus"], "torch_threads": a["torch_threads"], "test/acc": a["test/acc"]},
        "one_at_a_time": {"cpus": b["cpus"], "torch_threads": b["torch_threads"], "test/acc": b["test/acc"]},
        "identical_metrics": not differing, "differing": differing, "max_relative_difference": rel,
    }
cmd = "attnbench reproduce --stages compare --grid data=sst2 --grid seed=0 --set trainer.max_steps={} --no-report --jobs {}"
res = {
    "what": f"the compare stage's 8 SST-2 jobs (seed 0), each cut to {steps} training steps (validation and test in full), "
            "run two at a time (--jobs 2: one core and one torch thread each) and one after another (--jobs 1: both cores, "
            "2 torch threads each), wall seconds of each whole reproduce command",
    "commands": {"side_by_side": cmd.format(steps, 2), "one_at_a_time": cmd.format(steps, 1)},
    "cpu": f"{cpu_model()} ({os.cpu_count()} cores)",
    "commit": subprocess.run(["git", "-C", str(Path(__file__).resolve().parents[1]), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip(),
    "note": "metrics differ between the two only where the thread "
            "count changes float rounding (1 vs 2 threads); bit-identity at equal thread counts is what "
            "tests/test_parallel_sweeps.py and tests/test_reproduce.py check",
    "steps": steps,
    "wall_seconds": {"side_by_side": t_side, "one_at_a_time": t_one},
    "ratio": t_side / t_one,
    "max_relative_difference": worst,
    "jobs": jobs,
}
write_text(out, json.dumps(res, indent=1) + "\n")
print(f"ratio {t_side / t_one:.3f}  ({t_side:.1f} s vs {t_one:.1f} s); equal test/acc: "
      f"{all(j['side_by_side']['test/acc'] == j['one_at_a_time']['test/acc'] for j in jobs.values())}; max rel diff {worst:.2e}")
