#!/bin/bash
#SBATCH --nodes=1
# A deliberately bad request: 12XB is not a size.
#DW jobdw type=cache access_mode=striped pfs=/lus/project pool=pliant \
#DW       capacity=12XB
srun ./a.out
