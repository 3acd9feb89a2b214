#!/bin/bash
# The default reference's replay (every analysis stage) with the offline GPU host's bytecode settings
# emulated: PYTHONDONTWRITEBYTECODE=1 and a PYTHONPYCACHEPREFIX holding only what tools/device_setup.sh
# compiled into it before this session (torch, triton, numpy, pandas, scipy, pyarrow), then the same
# after tools/precompile.py:
#   rm -rf /tmp/pyc_emu; PYTHONPYCACHEPREFIX=/tmp/pyc_emu python3 -m compileall -q -j 2 \
#       $(python3 -c "import importlib, os; [print(os.path.dirname(importlib.import_module(n).__file__)) for n in ('torch', 'triton', 'numpy', 'pandas', 'scipy', 'pyarrow')]")
#   bash bytecode_emulation.sh before1; bash bytecode_emulation.sh before2
#   PYTHONDONTWRITEBYTECODE=1 PYTHONPYCACHEPREFIX=/tmp/pyc_emu python3 tools/precompile.py --root .
#   bash bytecode_emulation.sh after1; bash bytecode_emulation.sh after2
cd /work/main
R=results/replay-h200-default-flashinfer-6x160
rm -rf $R
start=$(date +%s.%N)
PYTHONDONTWRITEBYTECODE=1 PYTHONPYCACHEPREFIX=/tmp/pyc_emu snakemake --cores 1 \
    --config replay=data/reference/h200/default-flashinfer-6x160 > "/tmp/emu_$1.log" 2>&1 || echo FAIL
end=$(date +%s.%N)
echo "$1 snakemake wall $(echo "$end - $start" | bc)"
for s in policies decision roofline recommendation report; do
  echo "  $s $(tail -1 $R/benchmarks/$s.tsv | cut -f1) start $(grep -h 'after its process started' $R/logs/$s.log | grep -o '[0-9.]* s after')"
done
