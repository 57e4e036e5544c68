#!/bin/bash
#SBATCH --job-name=run42
#SBATCH --nodes=4
#SBATCH --time=02:00:00
# Cache the run directory; dirty data is written back when the job ends.
#DW jobdw type=cache access_mode=striped(MFS=16GiB) pfs=/lus/project/run42 \
#DW       capacity=10TiB pool=pliant \
#DW       write_window_multiplier=10 write_window_length=86400
#DW preload path=/lus/project/run42/input
#DW preload path=/lus/project/run42/mesh.h5

export JOBDIR="$DW_JOB_STRIPED_CACHE"
srun ./simulate --in "$JOBDIR/input" --mesh "$JOBDIR/mesh.h5" --out "$JOBDIR/output"
# Slurm reads no directives after the first command, so this line is a plain comment:
#DW stage_out source=/lus/project/run42/output destination=/lus/archive/run42
