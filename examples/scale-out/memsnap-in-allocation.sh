#!/bin/bash
# Inside the training job's own allocation, after training: one memsnap per rank on the node that
# wrote the snapshot (node-local disk works too), only the JSON reports go to the shared folder,
# then one merge. Call it from the training sbatch script after `srun python train.py`:
#   SNAPSHOTS=/local/snapshots REPORTS=/shared/$SLURM_JOB_ID/reports bash examples/scale-out/memsnap-in-allocation.sh
set -euo pipefail
: "${SNAPSHOTS:?}" "${REPORTS:?}"
mkdir -p "$REPORTS"
export SNAPSHOTS REPORTS
# shellcheck disable=SC2016  # expanded per task by the inner shell
srun --ntasks="${SLURM_NTASKS:?run inside a Slurm allocation}" --cpus-per-task=1 bash -c \
  '"${MEMSNAP:-memsnap}" "$SNAPSHOTS/rank$SLURM_PROCID.pickle" --format json -o "$REPORTS/rank$SLURM_PROCID.json"'
"${MEMSNAP:-memsnap}" merge "$REPORTS"
