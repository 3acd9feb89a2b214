#!/usr/bin/env bash
# Source this on the offline GPU host, from the repository root, with the wheels carried as
# .site-gpu/site.tar.xz (tools/wheelhouse.sh's wheels installed with `pip install --no-deps --target`
# for the host's Python; data/checks/h200/2026-12-02-session8/README.md says how it is built):
#   source tools/device_setup.sh [--flashinfer]
# It unpacks them to /tmp/site once per machine (a later call of the same lease finds them there),
# points their scripts' #! lines at python3 and puts them first on PYTHONPATH and PATH.
# FlashInfer travels apart, in pieces carried as .site-gpu/flashinfer/ over consecutive calls
# (docs/airgapped.md): tools/device_flashinfer.sh stashes them and installs it into /tmp/site once
# all are there. With --flashinfer this call needs it: a missing or corrupt piece fails it, named.
if [ ! -f /tmp/site/.unpacked ]; then
    mkdir -p /tmp/site
    tar xJf .site-gpu/site.tar.xz -C /tmp/site
    for f in /tmp/site/bin/*; do
        if head -c 2 "$f" | grep -q '#!'; then sed -i '1s|^#!.*python.*$|#!/usr/bin/env python3|' "$f"; fi
    done
    touch /tmp/site/.unpacked
fi
if [ -d .site-gpu/flashinfer ] || [ "${1:-}" = --flashinfer ]; then
    if [ "${1:-}" = --flashinfer ]; then tools/device_flashinfer.sh --require || return 1
    else tools/device_flashinfer.sh || return 1; fi
fi
export PYTHONPATH="/tmp/site:$PWD" PATH="/tmp/site/bin:$PATH"
# The host's torch has no bytecode cache it can write (each process compiled torch's Python source:
# 8.2 s of the correctness stage's 83 s, data/checks/h200/2026-12-03-session10): cache it under /tmp.
export PYTHONPYCACHEPREFIX=/tmp/pycache
# The prefix alone did not stop it (the stages of 2026-12-03, session 11, still compiled ~2,400
# modules each): under a prefix Python reads bytecode from the prefix only, never from __pycache__
# beside the sources, and the host sets PYTHONDONTWRITEBYTECODE=1, so whatever the prefix lacks (the
# standard library included) is compiled again in every stage process. Once per machine: the carried
# wheels, then tools/precompile.py, which imports what the stages import (a function's own imports
# included) and compiles every loaded module and the third-party packages they came from (on this
# 2-core CPU with the host's settings emulated, the replayed analysis stages started in 0.28 s, not
# 0.63 s, and the replay took 33 s, not 46 s: data/checks/cpu/2026-12-05-session22).
# Again (what is new only) once FlashInfer, which arrives in pieces over several calls, is installed.
marker=/tmp/pycache/.compiled$([ -d /tmp/site/flashinfer ] && echo -flashinfer)
if [ ! -f "$marker" ]; then
    mkdir -p /tmp/pycache
    python3 -m compileall -q -j 0 /tmp/site > /dev/null 2>&1
    python3 tools/precompile.py --root "$PWD" >> /tmp/pycache/precompile.txt 2>&1
    touch "$marker"
fi
