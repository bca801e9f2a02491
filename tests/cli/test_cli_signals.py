"""SIGTERM to a command (``fp4bench ab`` / ``units`` under ``timeout`` or a CI runner) is Ctrl-C:
a ``KeyboardInterrupt`` the command handles (its workers killed, what finished judged), and the
handler before it is back afterwards. Signals are raised in this process: no process is started."""

from __future__ import annotations

import importlib
import signal
import sys
import types

cli_main = importlib.import_module("fp4bench.cli.main")  # the module (``fp4bench.cli.main`` is also its function)


def test_sigterm_during_a_command_is_its_ctrl_c_and_the_handler_before_is_restored(monkeypatch):
    seen: list[str] = []

    def command(argv):
        try:
            signal.raise_signal(signal.SIGTERM)
        except KeyboardInterrupt as exc:
            seen.append(f"interrupted: {exc}")
            return 3
        seen.append("ran to its end")
        return 0

    module = types.ModuleType("fake_command")
    module.fake_main = command
    monkeypatch.setitem(sys.modules, "fake_command", module)
    monkeypatch.setitem(cli_main.COMMANDS, "fake", ("fake_command", "fake_main"))
    guard = lambda signum, frame: seen.append("the handler before")  # noqa: E731
    before = signal.signal(signal.SIGTERM, guard)
    try:
        assert cli_main.main(["fake"]) == 3
        assert signal.getsignal(signal.SIGTERM) is guard
    finally:
        signal.signal(signal.SIGTERM, before)
    assert seen == ["interrupted: SIGTERM: the command was stopped"]
