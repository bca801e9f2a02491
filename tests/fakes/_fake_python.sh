#!/bin/sh
exec "/work/wt-10/.venv/bin/python" "/work/wt-10/tests/fakes/fake_worker.py"
