"""A stand-in for ``python -m fp4bench.run.worker`` that speaks the protocol without torch, so the
parent side (``fp4bench.run.worker.pool``) is tested in milliseconds. What it does with a case is
named by the case's backend (``fault-`` prefix optional): ``abort`` calls os.abort(), ``hang`` sleeps, ``sticky`` answers
a fatal (poisoned-context) reply and exits, ``sticky-linger`` does too but leaves a child holding its stdout
open for 0.3 s (its EOF then reaches the parent after a replacement has started), anything else answers
one measured sample."""

import json
import os
import subprocess
import sys
import time

init = json.loads(sys.stdin.readline())
print(json.dumps({"type": "ready", "pid": os.getpid(), "fingerprint": {"gpu_name": "cpu"}}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    backend = req.get("case", {}).get("backend", "").removeprefix("fault-")
    if backend == "abort":
        os.abort()
    if backend == "hang":
        time.sleep(3600)
    if backend == "sticky-linger":
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"], stdout=sys.stdout, stdin=subprocess.DEVNULL)
        backend = "sticky"
    if backend == "sticky":
        print(json.dumps({"type": "result", "status": "failed", "reason": "CUDA context poisoned: simulated",
                          "fatal": "simulated"}), flush=True)
        sys.exit(3)
    print(json.dumps({"type": "result", "status": "measured", "reason": "", "pid": os.getpid(),
                      "extra_info": {"backend": backend}}), flush=True)
