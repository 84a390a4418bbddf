#!/usr/bin/env bash
# Mutation testing of the core numerics and statistics (scope and targets: docs/testing.md).
#
#   scripts/mutation.sh                              # all cores; reuses mutants/ results whose code did not change
#   FRESH=1 scripts/mutation.sh                      # from scratch (delete mutants/ first)
#   taskset -c 0 scripts/mutation.sh --max-children 1    # on a shared machine: one core
#   scripts/mutation.sh 'attnbench.attention.base.x_masked_softmax__mutmut_3'   # re-test named mutants
#
# Runs `mutmut run` (configured in pyproject.toml [tool.mutmut]: what is mutated, which in-process tests run
# per mutant), then scripts/mutation_report.py, which writes the score per module and every mutant that is
# neither killed nor reviewed as equivalent (scripts/mutation_equivalent.txt) to docs/mutation.md.
# Exit status: that of the report (0 when every survivor is reviewed and every target is met).
set -euo pipefail
cd "$(dirname "$0")/.."
export WANDB_MODE=offline
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"  # one torch thread per mutant worker: parallelism comes from --max-children
# The tests run inside mutants/, one folder below the repository, where tests/conftest.py's default data folder
# (<repo>/../shared/data) points elsewhere: pass the repository's default on, and stop before mutmut starts when the
# data is missing (the clean-test run would fail, and a failed stats run makes mutmut drop its cached results).
export ATTNBENCH_DATA_DIR="${ATTNBENCH_DATA_DIR:-$(cd .. && pwd)/shared/data}"
if [ ! -f "$ATTNBENCH_DATA_DIR/sst2/train.parquet" ]; then
    echo "scripts/mutation.sh: real data not found at $ATTNBENCH_DATA_DIR; set ATTNBENCH_DATA_DIR to the folder with sst2/, imdb/, trec/" >&2
    exit 2
fi
if [ "${FRESH:-0}" = 1 ]; then rm -rf mutants; fi
start=$(date +%s)
mutmut run "$@"
end=$(date +%s)
python scripts/mutation_report.py --wall-seconds "$((end - start))"
